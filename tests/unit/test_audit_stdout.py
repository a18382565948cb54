"""`--audit-log -` beside the access log on one pipe (`2>&1`, a container runtime or systemd
collecting both streams): each writer's pipe writes are whole lines of at most PIPE_BUF bytes,
which a pipe never interleaves with another writer's, so no audit line is cut by an access
line, nor the other way round."""

from __future__ import annotations

import os

import pytest

from mcp_oauth_gateway.dataplane.access_log import AccessLog

pytestmark = pytest.mark.usefixtures("access_log_info")

PIPE_BUF = 4096


def test_the_access_log_writes_a_pipe_whole_lines_of_at_most_pipe_buf(monkeypatch):
    read, write = os.pipe()
    writes: list[bytes] = []
    real = os.write

    def recorded(fd: int, data: bytes) -> int:
        if fd == write:
            writes.append(bytes(data))
        return real(fd, data)

    access = AccessLog(fd=write, json_lines=True)
    for n in range(60):
        access.record("POST", f"/mcp/{n}/" + "p" * 300, 200, 0.001, "alice", f"r-{n}")
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", recorded)
        access.flush()
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        lines = pipe.read().splitlines()
    assert len(lines) == 60
    assert len(writes) > 1
    for data in writes:
        assert len(data) <= PIPE_BUF
        assert data.endswith(b"\n")
