"""The machine under test: free loopback ports, each program pinned to its core, and the CPU time
and memory of a process tree read from /proc."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVER_CORE, LOAD_CORE = "0", "1"


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port(port: int, timeout: float = 20) -> None:
    """Until something listens on the port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def pinned(core: str, cmd: list[str]) -> list[str]:
    """The command pinned to one core (when taskset exists)."""
    return ["taskset", "-c", core, *cmd] if shutil.which("taskset") else cmd


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children."""
    total = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """Resident (or peak, with VmHWM) memory of a process tree, MB."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024
