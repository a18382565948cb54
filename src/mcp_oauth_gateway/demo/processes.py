"""The demo's child processes: started with their output in `logs/<name>.log`, waited for until
they listen, watched, and stopped (the last started first)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound."""
    with socket.socket() as sock:
        # As the servers do: connections in TIME_WAIT from a previous run do not block a bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tail(log: Path, lines: int = 15) -> str:
    """The last lines of a log."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Children:
    """The processes the demo started."""

    def __init__(self, logs: Path):
        self.logs = logs
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start `python ARGS` whose output goes to logs/<name>.log."""
        log = self.logs / f"{name}.log"
        handle = log.open("ab")
        proc = subprocess.Popen(
            [sys.executable, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.running.append((name, proc, log))
        return proc

    def wait_port(
        self, port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 60.0
    ) -> None:
        """Return once `proc` listens on 127.0.0.1:`port`; raise if it exits or never does."""
        log = next(log for _, p, log in self.running if p is proc)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{what} exited with code {proc.returncode}; its log "
                    f"({log}) ends with:\n{tail(log)}"
                )
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(
            f"{what} did not listen on 127.0.0.1:{port} within {timeout:g}s; see {log}"
        )

    def exited(self) -> tuple[str, int, Path] | None:
        """(name, exit code, log) of a child that stopped by itself, if any."""
        for name, proc, log in self.running:
            if proc.poll() is not None:
                return name, proc.returncode, log
        return None

    def stop(self) -> None:
        """SIGTERM every child (the last started first), then SIGKILL stragglers."""
        for _, proc, _ in reversed(self.running):
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in reversed(self.running):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
