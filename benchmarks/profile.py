"""Where the time goes on the cached path: py-spy samples the gateway (scenario b: one token,
c=64, CEL rule, static backend) and the top frames are written to benchmarks/profile.txt.

    python benchmarks/profile.py        # needs py-spy (pip) and wrk
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from processes import HERE, LOAD_CORE, pinned
from scenarios import Bench


def summarize(raw: Path, top: int) -> str:
    """Self and inclusive time per frame from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    lines = [f"samples: {total}", "", "self time (the frame itself):"]
    lines += [f"{n / total * 100:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    lines += ["", "inclusive time, gateway code only:"]
    ours = [(f, n) for f, n in inclusive.most_common() if "mcp_oauth_gateway" in f]
    lines += [f"{n / total * 100:5.1f}%  {frame}" for frame, n in ours[:top]]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    """The command line: how long to sample, which scenario, where to write."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument(
        "--tokens",
        type=int,
        default=0,
        help="cycle this many tokens (scenario c: 12000 with a 10,000-entry cache); 0: one",
    )
    parser.add_argument("--output", default=str(HERE / "profile.txt"))
    return parser


def main() -> int:
    """Profile and write the summary."""
    args = _parser().parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not os.path.exists(spy):
        print("error: py-spy is required (pip install py-spy)", file=sys.stderr)
        return 2
    options = argparse.Namespace(
        smoke=True, rounds=1, duration=1, warmup=1, conns=64, tokens=10, rate_seconds=1, soak=0
    )
    bench = Bench(options)
    raw = Path(tempfile.mkdtemp()) / "profile.raw"
    try:
        out = _sample(bench, args, spy, raw)
    finally:
        bench.stop_all()
    scenario = f"c ({args.tokens} tokens cycled)" if args.tokens else "b (one token)"
    throughput = next((line.strip() for line in out.splitlines() if "Requests/sec" in line), "")
    text = (
        f"py-spy, {args.seconds} s at 250 Hz, gateway scenario {scenario} (c=64, CEL rule, "
        f"static backend); wrk {throughput}\n\n" + summarize(raw, 30)
    )
    Path(args.output).write_text(text)
    print(text)
    return 0


def _sample(bench: Bench, args: argparse.Namespace, spy: str, raw: Path) -> str:
    """py-spy records the gateway into `raw` while wrk loads it; wrk's output."""
    backend = bench.backend(LOAD_CORE)
    gateway = bench.gateway(backend.port)
    tokens = str(bench.tokens_file(args.tokens)) if args.tokens else ""
    env = {**os.environ, "TOKEN": bench.token, "TOKENS_FILE": tokens}
    load = subprocess.Popen(
        pinned(
            LOAD_CORE,
            [
                "wrk",
                "-t1",
                "-c64",
                f"-d{args.seconds + 4}s",
                "-s",
                str(HERE / "post.lua"),
                f"http://127.0.0.1:{gateway.port}/mcp",
            ],
        ),
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    subprocess.run(
        [
            spy,
            "record",
            "-p",
            str(gateway.popen.pid),
            "-d",
            str(args.seconds),
            "-r",
            "250",
            "-f",
            "raw",
            "-o",
            str(raw),
            "--nonblocking",
        ],
        capture_output=True,
        check=True,
    )
    out, _ = load.communicate(timeout=60)
    return out


if __name__ == "__main__":
    sys.exit(main())
