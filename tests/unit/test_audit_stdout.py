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


@pytest.mark.parametrize("json_lines", [True, False])
def test_an_access_line_a_long_path_would_stretch_past_pipe_buf_is_cut_to_fit(json_lines):
    read, write = os.pipe()
    access = AccessLog(fd=write, json_lines=json_lines)
    path = "/mcp/" + "\u2028" * 3000  # JSON and the text escape write it six-fold or more
    access.record("POST", path, 404, 0.001, "\u2028" * 500, "r-1", "\u2028" * 500)
    access.flush()
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        (line,) = pipe.read().splitlines(keepends=True)
    assert len(line) <= PIPE_BUF
    assert b"404" in line
