"""The diagram and the stage lists of docs/concepts/pipeline.md, written from the gateway's own
declaration of a request's way (`serving.stages.ENTRY` and `PIPELINE`), so the page cannot
disagree with the code (gen_reference)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcp_oauth_gateway.serving.stages import ENTRY, PIPELINE, Stage

PAGE = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "pipeline.md"
BEGIN = "<!-- BEGIN GENERATED: pipeline stages"
END = "<!-- END GENERATED: pipeline stages -->"
NOTE = (
    "<!-- BEGIN GENERATED: pipeline stages. Do not edit by hand: tools/gen_reference.py writes "
    "it\n     from src/mcp_oauth_gateway/serving/stages.py (ENTRY, PIPELINE). -->"
)
DIAGRAM_BEGIN = "<!-- BEGIN GENERATED: pipeline diagram"
DIAGRAM_END = "<!-- END GENERATED: pipeline diagram -->"
DIAGRAM_NOTE = (
    "<!-- BEGIN GENERATED: pipeline diagram. Do not edit by hand: tools/gen_reference.py "
    "writes it\n     from src/mcp_oauth_gateway/serving/stages.py (ENTRY, PIPELINE). -->"
)
# What comes before the app's first step: the HTTP server's (connections.py), not a stage.
SERVER = ("listener port", "connection limits: header and idle timeouts, --max-connections (503)")
NAME_WIDTH = 24  # the longest stage name, its arrow and a space
TEXT_WIDTH = 74


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def stage_table(stages: Sequence[Stage[Any, Any]]) -> str:
    """`stages` in the request's order: name, what each does, and when it runs."""
    rows = [
        f"| {i} | `{s.name}` | {_cell(s.does)} | {_cell(s.when)} |" for i, s in enumerate(stages, 1)
    ]
    return "\n".join(["| # | Stage | What it does | Runs when |", "|---|---|---|---|", *rows])


def _box(name: str, does: str) -> list[str]:
    """One step of the diagram: its name, an arrow to what it does, and the way on."""
    lines = textwrap.wrap(does, TEXT_WIDTH) or [""]
    head = f" {name} ".ljust(NAME_WIDTH, "─")
    out = [f"{head} {lines[0]}"]
    out += [f"{'   │'.ljust(NAME_WIDTH)} {line}" for line in lines[1:]]
    return [*out, "   │", "   ▼"]


def diagram() -> str:
    """The whole way as a text diagram, from the client to the MCP server."""
    lines = [" client", "   │", "   ▼", *_box(*SERVER)]
    for stage in ENTRY:
        lines += _box(stage.name, stage.does)
    for stage in PIPELINE:
        lines += _box(stage.name, stage.does)
    lines.append(" MCP server(s)")
    return "```text\n" + "\n".join(lines) + "\n```"


def section() -> str:
    """The generated stage lists, markers included."""
    entry = (
        "The gateway's own steps come first, for every request (each runs when the serve "
        "options turn it on); the last, `routing`, hands the request to its route."
    )
    route = (
        "A route runs the stages that apply to it, top to bottom, up to the first that "
        "answers every request itself (`fail-closed`, `reverse-proxy`). The admin listener's "
        "`/config` names the steps the gateway runs and the stages each route runs."
    )
    return (
        f"{NOTE}\n\n{entry}\n\n{stage_table(ENTRY)}\n\n{route}\n\n{stage_table(PIPELINE)}\n\n{END}"
    )


def _replace(text: str, begin: str, end: str, body: str) -> str:
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise SystemExit(f"{PAGE}: the markers {begin!r} … {end!r} are missing; restore them")
    return text[:start] + body + text[stop + len(end) :]


def page(text: str) -> str:
    """`text` (the committed page) with its generated diagram and stage lists rewritten."""
    drawn = f"{DIAGRAM_NOTE}\n\n{diagram()}\n\n{DIAGRAM_END}"
    text = _replace(text, DIAGRAM_BEGIN, DIAGRAM_END, drawn)
    return _replace(text, BEGIN, END, section())
