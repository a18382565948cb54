"""`mcp-oauth-gateway demo` as a process: started, read for its URL and password, stopped."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from support import free_port, read_until


@dataclass
class RunningDemo:
    process: subprocess.Popen[str]
    url: str
    password: str
    directory: Path
    lines: list[str]
    ports: list[str]


def start_demo(
    directory: Path, flavour: str = "authentik", ports: list[str] | None = None
) -> RunningDemo:
    ports = ports or [str(free_port()) for _ in range(3)]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcp_oauth_gateway",
            "demo",
            "--flavor",
            flavour,
            "--dir",
            str(directory),
            "--port",
            ports[0],
            "--idp-port",
            ports[1],
            "--backend-port",
            ports[2],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines, _ = read_until(process.stdout, lambda line: "Ctrl-C stops everything" in line)
    text = "".join(lines)
    url = re.search(r"MCP server URL:\s+(\S+)", text)
    password = re.search(r"alice / (\S+)", text)
    assert url, text
    assert password, text
    return RunningDemo(process, url.group(1), password.group(1), directory, lines, ports)


@contextmanager
def running_demo(directory: Path) -> Iterator[RunningDemo]:
    """A demo for the duration of the block, stopped afterwards if still running."""
    running = start_demo(directory)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            stop(running)


def stop(demo: RunningDemo) -> int:
    demo.process.send_signal(signal.SIGINT)
    code = demo.process.wait(30)
    assert demo.process.stdout is not None
    demo.lines.extend(demo.process.stdout.readlines())
    return code
