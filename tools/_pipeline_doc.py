"""The stage list of docs/concepts/pipeline.md, written from the gateway's own declaration of its
pipeline (`serving.stages.PIPELINE`), so the page cannot disagree with the code (gen_reference)."""

from __future__ import annotations

from pathlib import Path

from mcp_oauth_gateway.serving.stages import PIPELINE

PAGE = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "pipeline.md"
BEGIN = "<!-- BEGIN GENERATED: pipeline stages"
END = "<!-- END GENERATED: pipeline stages -->"
NOTE = (
    "<!-- BEGIN GENERATED: pipeline stages. Do not edit by hand: tools/gen_reference.py writes "
    "it\n     from src/mcp_oauth_gateway/serving/stages.py (PIPELINE). -->"
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def stage_table() -> str:
    """The stages in the request's order: name, what each does, and when it applies."""
    rows = [
        f"| {i} | `{s.name}` | {_cell(s.does)} | {_cell(s.when)} |"
        for i, s in enumerate(PIPELINE, 1)
    ]
    return "\n".join(
        [
            "| # | Stage | What it does | Runs when |",
            "|---|---|---|---|",
            *rows,
        ]
    )


def section() -> str:
    """The generated section, markers included."""
    intro = (
        "A route runs the stages that apply to it, top to bottom, up to the first that "
        "answers every request itself (`fail-closed`, `reverse-proxy`). The admin listener's "
        "`/config` names the stages each route runs."
    )
    return f"{NOTE}\n\n{intro}\n\n{stage_table()}\n\n{END}"


def page(text: str) -> str:
    """`text` (the committed page) with its generated section rewritten."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} … {END!r} are missing; restore them")
    return text[:start] + section() + text[end + len(END) :]
