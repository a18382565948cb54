"""A change as a user sees it (issue 39, item 1): from the moment one policy among R routes is
written until a real `serve` answers with it, measured from outside the process.

The same configuration and changes as `reload_memory.py` (R routes of an HTTPRoute, a
GatewayBackend and a GatewayPolicy; change n rewrites one policy's metadata scopes, served once
its protected resource metadata answers them), with `serve`'s own defaults: in file mode every
resource in one file (the layout with the least help), written beside it and renamed over it,
and no `--watch-interval` flag; in controller mode a merge patch on a real Kubernetes API
server. Reports the median, 90th percentile and worst time of N changes, the gateway
process's CPU time from the change to its answer (median; a busy machine bends it less than
the wall time), and the resident set at the first answer and after the last change.

Usage: python benchmarks/reload_outside.py [--routes 5000] [--changes 20]
           [--modes file,controller] [--write FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from reload_memory import ROOT, Run, Settings, machine, one


def row(run: Run, routes: int) -> str:
    """One mode's times from change to answer, in seconds."""
    times = sorted(run.seconds)
    p90 = times[min(len(times) - 1, int(len(times) * 0.9))]
    return (
        f"| {run.mode} | {routes:,} | {len(times)} | {statistics.median(times):.2f} "
        f"| {p90:.2f} | {times[-1]:.2f} | {statistics.median(run.cpu):.2f} "
        f"| {run.rss[0]:.0f} | {run.rss[max(run.rss)]:.0f} |"
    )


def main(argv: Sequence[str]) -> None:
    """Run each mode, print the table, write it when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=5000)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--modes", default="file,controller")
    parser.add_argument("--write", type=Path, help="also write the table and machine here")
    args = parser.parse_args(argv)
    started = machine()
    lines = [
        "| mode | routes | changes | median s | p90 s | worst s | gateway CPU s (median) "
        "| RSS at start MB | at the end |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in args.modes.split(","):
        settings = Settings(
            args.routes,
            args.changes,
            ROOT / "src",
            "this tree",
            (args.changes,),
            watch_interval=None,
        )
        lines.append(row(one(mode, settings), args.routes))
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines)
    print(text)
    if args.write is not None:
        args.write.write_text(
            f"Machine at start: {started}\nat the end: {machine()}\n\n"
            f"`python benchmarks/reload_outside.py {' '.join(argv)}`\n\n{text}\n"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
