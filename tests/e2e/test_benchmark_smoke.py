"""The benchmark runs (a few seconds, smoke mode) and writes its report. Nothing about speed is
asserted here: speed is measured by `make bench`, on a quiet machine."""

from __future__ import annotations

import shutil
import subprocess
import sys

from support import ROOT


def test_benchmark_smoke_run_writes_a_report(tmp_path):
    for tool in ("wrk", "haproxy", "nginx"):
        assert shutil.which(tool), f"{tool} is required: `make test` installs it"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = list(tmp_path.glob("*-smoke.md"))
    assert len(reports) == 1
    text = reports[0].read_text()
    for scenario in (
        "a direct backend",
        "b gateway, one token",
        "c gateway, a new token per request",
        "d HAProxy jwt_verify",
        "d nginx plain proxy",
        "e mcp SDK server alone",
        "e gateway → mcp SDK tools/call",
    ):
        assert f"| {scenario} |" in text, text
    assert "| b / d (gateway ÷ HAProxy jwt_verify); per round " in text
    assert "| c / d (cache-miss gateway ÷ HAProxy); per round " in text
    # Each optional stage's cost, and the security checks' (the stage variants are valid
    # configurations: a variant the gateway refused would not answer 200 and fail the run).
    for stage in (
        "plain",
        "rate limit",
        "transformation",
        "tool authorization",
        "metrics",
        "JSON logs",
        "tracing",
        "all",
    ):
        row = next((line for line in text.splitlines() if line.startswith(f"| {stage} | ")), "")
        assert row.endswith(" | 0 |"), text  # every request answered 2xx
    assert "entry header check, 10 headers" in text
    assert "SSE: worst extra delay per event (ms), median of 1 stream (" in text
    assert "| 0 |" in text  # scenarios ran without errors


def test_the_reload_memory_benchmark_runs_both_modes(tmp_path, apiserver):
    """benchmarks/reload_memory.py, a few changes: each served, RSS read, the table written
    (`apiserver`: the API server the controller mode starts a copy of is built)."""
    report = tmp_path / "reload-memory.md"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "reload_memory.py"),
            *("--routes", "3", "--changes", "3", "--write", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = report.read_text()
    assert "Machine at start: " in text
    for mode in ("file", "controller"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {mode} | "))
        assert row.count("|") == 10, row  # start, after 1 and 3, growth, rate, seconds


def test_the_outside_reload_benchmark_times_both_modes(tmp_path, apiserver):
    """benchmarks/reload_outside.py, a few changes with serve's defaults: each served and timed,
    the table written."""
    report = tmp_path / "reload-outside.md"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "reload_outside.py"),
            *("--routes", "3", "--changes", "2", "--write", str(report)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = report.read_text()
    for mode in ("file", "controller"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {mode} | 3 | 2 | "))
        assert row.count("|") == 10, row  # median, p90, worst, CPU, RSS at start and at the end
