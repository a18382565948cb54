"""The failover and rolling-restart benchmarks run (a few seconds of load, smoke mode) and write
their JSON results with every field. Nothing about their numbers is asserted here, not even
that they found nothing: they report, `benchmarks/redis_failover.py` and
`benchmarks/rolling_restart.py` measure."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from support import ROOT

KINDS = ("sign-in", "refresh", "tool call")
MCP_KINDS = {"mcp session", "mcp tool call", "mcp stream"}
EFFECTS = ("refresh tokens kept", "rotated tokens refused", "sign-ins during the run")


def run(script: str, output: Path, *args: str) -> dict:
    command = [sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args]
    # A session of its own: on a timeout the benchmark and every server it started are
    # stopped together (SIGTERM unwinds it; SIGKILL what is left).
    benchmark = subprocess.Popen(
        [*command, "--output", str(output)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = benchmark.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(benchmark.pid, signal.SIGTERM)
        try:
            benchmark.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(benchmark.pid, signal.SIGKILL)
        raise
    assert benchmark.returncode == 0, stdout[-2000:] + stderr[-3000:]
    (written,) = output.glob("*-smoke-*.json")
    return json.loads(written.read_text())


def assert_reported(result: dict) -> None:
    # Which requests ended how depends on the machine's load: only that each was reported.
    outcomes = result["outcomes"]
    for kind in KINDS:
        assert set(outcomes[kind]) == {"ok", "503", "error", "hang"}, outcomes
    assert MCP_KINDS & set(outcomes), outcomes  # the SDK clients ran
    assert sum(row["ok"] for row in outcomes.values()) > 0, outcomes
    assert set(result["times"]) == {"first 503", "first success", "last failure"}
    assert set(result["latency"]) == {"before", "during", "after"}
    for row in result["latency"]["before"].values():
        assert set(row) == {"n", "p50", "p99"}
    for effect in EFFECTS:
        assert effect in result["effects"], result["effects"]
    assert isinstance(result["findings"]["count"], int)
    assert isinstance(result["mcp sessions opened again"], int)


def test_the_failover_benchmark_kills_the_primary_and_reports(tmp_path):
    results = run("redis_failover.py", tmp_path, "--fault", "kill")
    assert results["benchmark"] == "redis-failover"
    result = results["runs"]["kill"]
    assert_reported(result)
    assert {"fault", "promoted"} <= set(result["events"])


def test_the_rolling_restart_benchmark_rolls_every_replica_and_reports(tmp_path):
    results = run("rolling_restart.py", tmp_path)
    assert results["benchmark"] == "rolling-restart"
    result = results["run"]
    assert_reported(result)
    steps = result["steps"]
    assert [s["replica"] for s in steps] == ["gateway-0", "gateway-1"]
    for step in steps:
        assert set(step) == {"replica", "drain s", "start s", "step s", "exit code"}
    assert {"roll", "rolled"} <= set(result["events"])
