"""The run's Markdown report: the scenarios' table, the targets each ratio is held to, the optional
stages' cost, the security checks and what ran (machine, interpreter, versions)."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from measurements import Result, middle
from processes import LOAD_CORE, SERVER_CORE

GAP_NOTE = (
    "Targets not met, and what limits them: see [PROFILE.md](../PROFILE.md) (cache misses: "
    "the RSA check, the same work HAProxy does, and the Python around it; one connection: "
    "compare with the direct backend's own c=1 row, the host's scheduling delay is in both; "
    "gateway ÷ direct backend: uvicorn's per-request task, scope and event, and the Python "
    "around three socket operations; SSE: a stream that starts late is as late on every "
    "event, so compare its first event with the direct stream's)."
)

# One row of the targets' table: what is measured, its value, the goal, and whether it is met.
Target = tuple[str, str, str, bool]


def stage_lines(stages: list[Result], security: str | None) -> list[str]:
    """The report's section on the optional stages and the security checks."""
    lines: list[str] = []
    plain = next((r for r in stages if r.scenario == "stage: plain"), None)
    if plain is not None:
        base = plain.extra["median_cpu_us"]
        lines += [
            "",
            "Optional stages: scenario b with each stage on (and all of them), interleaved with "
            "the plain gateway; CPU µs/req is the median over the rounds, `added` the "
            "difference to the plain gateway's.",
            "",
            "| gateway | req/s (min-max) | CPU µs/req | added µs/req | errors |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in stages:
            cpu = r.extra["median_cpu_us"]
            added = "" if r is plain else f"{cpu - base:+.1f}"
            lines.append(
                f"| {r.scenario.removeprefix('stage: ')} | {r.rps:,.0f} "
                f"({r.extra.get('min_rps', r.rps):,.0f}-{r.extra.get('max_rps', r.rps):,.0f}) "
                f"| {cpu:.1f} | {added} | {r.errors} |"
            )
        lines += [
            "",
            "Controller mode adds nothing per request: its pipelines are the same objects, "
            "built by the same code from the watched resources; the only difference on the "
            "request path is that a listener's table is looked up by exact port.",
        ]
    if security:
        lines += [
            "",
            "Security checks, in process on one core (`benchmarks/security_checks.py`):",
            "",
            "```",
            security.rstrip(),
            "```",
        ]
    return lines


def versions() -> dict[str, str]:
    """What ran, for the report."""

    def first_line(cmd: list[str]) -> str:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (done.stdout or done.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "not found"

    from importlib.metadata import version

    out = {"python": platform.python_version()}
    for package in (
        "mcp-oauth-gateway",
        "uvicorn",
        "uvloop",
        "httptools",
        "joserfc",
        "cel-expr-python",
    ):
        try:
            out[package] = version(package)
        except Exception:
            out[package] = "not installed"
    out["wrk"] = first_line(["wrk", "-v"])
    out["haproxy"] = first_line(["haproxy", "-v"])
    out["nginx"] = first_line(["nginx", "-v"])
    return out


def interpreter() -> str:
    """The interpreter the servers run on, past the virtual environment's link: whether it is
    the distribution's (built with PGO and LTO) or a developer build changes CPU per request."""
    return os.path.realpath(sys.executable)


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def report(
    args: argparse.Namespace,
    results: list[Result],
    extras: dict[str, Any],
    soak: dict[str, Any] | None,
) -> str:
    """The Markdown report, with the ratios and the targets."""
    targets = _targets({x.scenario: x for x in results}, extras, soak)
    lines = [*_header(args), *(_scenario_row(x) for x in results)]
    lines += ["", "| target | measured | goal | met |", "|---|---:|---|---|"]
    for name, value, goal, met in targets:
        lines.append(f"| {name} | {value} | {goal} | {'yes' if met else '**no**'} |")
    lines += stage_lines(extras.get("stages") or [], extras.get("security"))
    if not all(met for *_, met in targets):
        lines += ["", GAP_NOTE]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()), ""]
    return "\n".join(lines)


def _header(args: argparse.Namespace) -> list[str]:
    """The title, the machine and the settings of the run, and the scenarios' table head."""
    return [
        f"# Benchmark {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
        f"{' (smoke run: numbers are meaningless)' if args.smoke else ''}",
        "",
        f"Machine: {os.cpu_count()} cores, {cpu_model()}, Linux {platform.release()}. "
        f"Python {platform.python_version()} ({interpreter()}) for every Python server. "
        f"Servers on core {SERVER_CORE}, wrk (and backends behind a proxy) on core "
        f"{LOAD_CORE}. wrk -t1 -c{args.conns}, {args.duration:g} s after {args.warmup:g} s "
        f"warm-up, {args.rounds} interleaved round(s), median shown (min-max). "
        f'POST /mcp tools/call, 800-byte RS256 token; CEL rule `"mcp-agent" in '
        f"jwt.groups`; scenario c cycles {args.tokens} tokens (cache holds 10,000).",
        "",
        "| scenario | req/s (min-max) | p50 ms | p99 ms | CPU µs/req | peak RSS MB | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]


def _scenario_row(x: Result) -> str:
    """One scenario's row: its median round's req/s (the range over the rounds) and figures."""
    return (
        f"| {x.scenario} | {x.rps:,.0f} ({x.extra.get('min_rps', x.rps):,.0f}-"
        f"{x.extra.get('max_rps', x.rps):,.0f}) | {x.p50:.2f} | {x.p99:.2f} | "
        f"{x.cpu_us:.0f} | {x.rss:.0f} | {x.errors} |"
    )


def _targets(
    by: dict[str, Result], extras: dict[str, Any], soak: dict[str, Any] | None
) -> list[Target]:
    """Each target the run has the figures for, in the report's order."""
    get = by.get
    a, b, c = (
        get("a direct backend"),
        get("b gateway, one token"),
        get("c gateway, a new token per request"),
    )
    d, d1, b1 = get("d HAProxy jwt_verify"), get("d HAProxy jwt_verify c=1"), get("b gateway c=1")
    each = extras.get("round_ratios", {})
    found = [
        _ratio("b / a (gateway ÷ direct backend)", b, a, 0.33),
        _paired("b / d (gateway ÷ HAProxy jwt_verify)", each.get("b/d"), b, d, 0.7),
        _paired("c / d (cache-miss gateway ÷ HAProxy)", each.get("c/d"), c, d, 0.4),
        *_latency_targets(b, d, b1, d1),
        _ratio(
            "b / mcp SDK server alone (gateway req/s ÷ a Python MCP backend's, per core)",
            b,
            get("e mcp SDK server alone"),
            6,
        ),
        _share_target(get("e gateway → mcp SDK tools/call")),
        _rate_target(extras.get("rate_direct"), extras.get("rate_gateway")),
        _sse_target(extras.get("sse", [])),
        _soak_target(soak),
    ]
    return [target for target in found if target is not None]


def _ratio(name: str, num: Result | None, den: Result | None, goal: float) -> Target | None:
    """num's req/s over den's, held to at least `goal`."""
    if num and den and den.rps:
        value = num.rps / den.rps
        return (name, f"{value:.2f}", f"≥ {goal}", value >= goal)
    return None


def _paired(
    name: str, each: list[float] | None, num: Result | None, den: Result | None, goal: float
) -> Target | None:
    """A ratio taken within each round (`each`), or of the medians when there are none."""
    # The median of the ratios within each round (the two measured minutes apart at
    # most, so a noisy neighbour weighs on both); the ratio of medians otherwise.
    if not each:
        return _ratio(name, num, den, goal)
    value = each[middle(each)]
    rounds = ", ".join(f"{v:.2f}" for v in each)
    return (f"{name}; per round {rounds}", f"{value:.2f}", f"≥ {goal}", value >= goal)


def _latency_targets(
    b: Result | None, d: Result | None, b1: Result | None, d1: Result | None
) -> list[Target]:
    """The gateway's p99 against HAProxy's at c=64, and its latency at one connection."""
    out: list[Target] = []
    if b and d:
        out.append(
            ("p99 at c=64, gateway ÷ HAProxy", f"{b.p99 / d.p99:.2f}", "≤ 2", b.p99 / d.p99 <= 2)
        )
    if b1 and d1:
        out.append(
            (
                "p50 at c=1, gateway - HAProxy (ms)",
                f"{b1.p50 - d1.p50:+.2f}",
                "≤ +0.15",
                b1.p50 - d1.p50 <= 0.15,
            )
        )
        out.append(("p99 at c=1, gateway (ms)", f"{b1.p99:.2f}", "≤ 1", b1.p99 <= 1))
    return out


def _share_target(share: Result | None) -> Target | None:
    """The gateway's CPU per tools/call beside the mcp SDK backend's (reported, no goal)."""
    if share and share.extra.get("backend_cpu_us"):
        return (
            "gateway CPU per tools/call as a share of the mcp SDK backend's "
            f"({share.cpu_us:.0f} µs vs {share.extra['backend_cpu_us']:.0f} µs)",
            f"{share.cpu_us / share.extra['backend_cpu_us'] * 100:.0f} %",
            "report",
            True,
        )
    return None


def _rate_target(rate_d: dict[str, Any] | None, rate_g: dict[str, Any] | None) -> Target | None:
    """The p50 the gateway adds at a fixed 500 req/s (reported, no goal)."""
    if rate_d and rate_g:
        added = rate_g["p50"] - rate_d["p50"]
        return (
            "added p50 at 500 req/s (ms)",
            f"{added:+.2f} (direct {rate_d['p50']:.2f}, gateway {rate_g['p50']:.2f})",
            "report",
            True,
        )
    return None


def _sse_target(sse: list[tuple[list[float], list[float]]]) -> Target | None:
    """The worst extra delay of an SSE event through the gateway, in the median stream."""
    streams = [(d, g) for d, g in sse if d and g]
    if not streams:
        return None
    # Per stream, the worst extra delay of an event through the gateway; the median stream.
    worsts = [max(y - x for x, y in zip(d, g, strict=False)) for d, g in streams]
    median = middle(worsts)
    first_d, first_g = streams[median][0][0], streams[median][1][0]
    return (
        f"SSE: worst extra delay per event (ms), median of {len(worsts)} "
        f"stream{'s' if len(worsts) > 1 else ''} "
        f"({', '.join(f'{w:.1f}' for w in worsts)}); its first event direct "
        f"{first_d:.1f}, gateway {first_g:.1f}",
        f"{worsts[median]:.1f}",
        "≤ 10",
        worsts[median] <= 10,
    )


def _soak_target(soak: dict[str, Any] | None) -> Target | None:
    """How much the gateway's RSS grew over the long run, held to 10 %."""
    if not soak:
        return None
    growth = (soak["rss_end_mb"] - soak["rss_start_mb"]) / soak["rss_start_mb"] * 100
    return (
        f"RSS growth over {soak['requests']:,} requests "
        f"({soak['rss_start_mb']:.0f} → {soak['rss_end_mb']:.0f} MB)",
        f"{growth:+.1f} %",
        "≤ 10 %",
        growth <= 10,
    )
