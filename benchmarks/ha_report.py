"""The failover and rolling-restart results as Markdown tables (printed) and JSON (written to
benchmarks/results/): what was run, where, and the summary of `ha_record.summary`."""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ha_record import OUTCOMES


def machine() -> dict[str, Any]:
    """Where it ran."""
    return {
        "python": sys.version.split()[0],
        "interpreter": sys.executable,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "load average": list(os.getloadavg()),
    }


def _ms(value: object) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.0f}"


def _s(value: object) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.2f}"


def outcome_lines(outcomes: dict[str, dict[str, int]]) -> list[str]:
    """Requests by kind and outcome."""
    lines = ["| requests | ok | 503 + Retry-After | error | hang |", "|---|---:|---:|---:|---:|"]
    for kind, row in outcomes.items():
        lines.append(f"| {kind} | " + " | ".join(str(row[o]) for o in OUTCOMES) + " |")
    return lines


def latency_lines(latency: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """p50/p99 ms by kind and phase."""
    phases = list(latency)
    kinds = sorted({kind for per in latency.values() for kind in per})
    lines = [
        "| latency ms (n, p50, p99) | " + " | ".join(phases) + " |",
        "|---|" + "---:|" * len(phases),
    ]
    for kind in kinds:
        cells = []
        for phase in phases:
            got = latency[phase].get(kind)
            cells.append(
                "-" if got is None else f"{got['n']}: {_ms(got['p50'])} / {_ms(got['p99'])}"
            )
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def effect_lines(effects: dict[str, int]) -> list[str]:
    """The effects checked after the run."""
    lines = ["| effect checked | count |", "|---|---:|"]
    lines += [f"| {name} | {count} |" for name, count in sorted(effects.items())]
    return lines


def finding_lines(findings: dict[str, Any]) -> list[str]:
    """The findings (a 500, a hang, a lost or duplicated effect), the first ones in full."""
    if not findings["count"]:
        return ["No findings: no error, no hang, nothing lost, nothing accepted twice."]
    lines = [f"**{findings['count']} findings**, the first:", ""]
    lines += [f"- {text}" for text in findings["first"]]
    return lines


def timing_lines(summary: dict[str, Any], fault: str) -> list[str]:
    """The events and times from the fault, in seconds."""
    times = summary["times"]
    lines = [f"| seconds from the {fault} | |", "|---|---:|"]
    for name, value in summary["events"].items():
        lines.append(f"| event: {name} | {_s(value)} |")
    for name, value in times.items():
        lines.append(f"| {name} | {_s(value)} |")
    return lines


def write_json(name: str, results: dict[str, Any], output: Path) -> Path:
    """`results` as JSON in `output`, named for the benchmark and the time."""
    output.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d-%H%M")
    path = output / f"{name}-{stamp}.json"
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    return path
