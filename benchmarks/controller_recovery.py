"""Recovery times of controller mode (issue 25): how long the survivor takes to hold the Lease
after the leader's SIGKILL, a policy change to reach every replica, a change made after the API
server restarted to be served, a leader whose API server hangs to stop writing status.

The scenarios are the e2e module tests/e2e/test_controller_robustness.py (two replicas under
bounded load on loopback, a real API server); it asserts that no request fails and records each
recovery's seconds here, where they are reported, never asserted. Several rounds; the report
gives each figure's median and range.

    .venv/bin/python benchmarks/controller_recovery.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODULE = "tests/e2e/test_controller_robustness.py"


def one_round(out: Path) -> None:
    """Run the scenarios once, their times appended to `out`."""
    env = {**os.environ, "CONTROLLER_RECOVERY_TIMES": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", MODULE, "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"the scenarios failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")


def report(times: dict[str, list[float]], rounds: int) -> str:
    """A markdown table: each recovery's median and range over the rounds."""
    lines = [
        f"# Controller recovery ({time.strftime('%Y-%m-%d %H:%M')}, {rounds} rounds)",
        "",
        f"Scenarios: `{MODULE}` (two replicas, bounded load; no request failed in any round).",
        "",
        "| recovery | median s | min-max s |",
        "|---|---:|---:|",
    ]
    for what, seconds in times.items():
        lines.append(
            f"| {what} | {statistics.median(seconds):.2f} | {min(seconds):.2f}-{max(seconds):.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run the rounds and write the report to benchmarks/results/."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "times.jsonl"
        for i in range(args.rounds):
            print(f"[recovery] round {i + 1}/{args.rounds}", file=sys.stderr, flush=True)
            one_round(out)
        for line in out.read_text().splitlines():
            entry = json.loads(line)
            times[entry["what"]].append(float(entry["seconds"]))
    text = report(times, args.rounds)
    target = HERE / "results" / f"controller-recovery-{time.strftime('%Y-%m-%d-%H%M')}.md"
    target.write_text(text)
    print(text)
    print(f"written to {target.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
