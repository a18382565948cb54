"""The audit log's writer (`serving/audit_sink.py`) on its own: lines that do not fit are counted
and the gap is written into the log itself, a reopen after rotation writes to the new file, a
file removed or replaced at its path is noticed and opened anew there, and lines a failed write
could not place are kept and written once the file can be written again."""

from __future__ import annotations

import errno
import json
import logging
import os

from mcp_oauth_gateway.serving.audit_sink import AuditSink, OtlpAudit, check_path, exposure
from support import wait_until


def read(path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def metrics(sink: AuditSink) -> dict[str, float]:
    return {family.name: family.samples[0].value for family in sink.collect()}


def test_lines_that_do_not_fit_are_counted_and_the_gap_is_written(tmp_path):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path), max_pending=2)
    for n in range(5):
        sink.write({"n": n})
    assert not sink.healthy  # full: --audit-required refuses until it drains
    sink.flush()
    gap, *kept = read(path)
    assert gap["event"] == "audit-lines-dropped"
    assert gap["dropped"] == 3
    assert kept == [{"n": 0}, {"n": 1}]
    assert sink.healthy
    assert metrics(sink)["mcp_gateway_audit_lines_dropped"] == 3
    sink.stop()


def test_a_reopen_after_rotation_writes_to_the_new_file(tmp_path):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1})
    sink.flush()
    path.rename(tmp_path / "audit.log.1")
    sink.reopen()
    sink.write({"n": 2})
    sink.flush()
    assert read(tmp_path / "audit.log.1") == [{"n": 1}]
    # Asked for: no line and no count says the file went missing.
    assert read(path) == [{"n": 2}]
    assert metrics(sink)["mcp_gateway_audit_file_reopened"] == 0
    sink.stop()


def test_lines_a_failed_write_could_not_place_are_written_later(tmp_path):
    directory = tmp_path / "logs"
    directory.mkdir()
    path = directory / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1})
    sink.flush()
    path.unlink()
    directory.rmdir()
    sink.reopen()
    sink.write({"n": 2})
    sink.flush()
    assert not sink.healthy
    assert metrics(sink)["mcp_gateway_audit_write_errors"] == 1
    assert metrics(sink)["mcp_gateway_audit_healthy"] == 0
    directory.mkdir()
    sink.write({"n": 3})
    sink.flush()
    assert sink.healthy
    assert read(path) == [{"n": 2}, {"n": 3}]
    assert metrics(sink)["mcp_gateway_audit_lines"] == 3
    sink.stop()


def test_the_writer_thread_writes_and_stop_flushes(tmp_path):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.start()
    sink.write({"n": 1})
    sink.stop()
    assert read(path) == [{"n": 1}]


def test_standard_output_gets_whole_lines(capfd):
    sink = AuditSink("-")
    sink.write({"n": 1})
    sink.write({"n": 2, "tool": 'x"\ny'})
    sink.flush()
    sink.reopen()  # nothing to reopen: the same standard output
    sink.write({"n": 3})
    sink.stop()
    lines = capfd.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [{"n": 1}, {"n": 2, "tool": 'x"\ny'}, {"n": 3}]


def _failing_after(limit: int):
    """An `os.write` that places at most `limit` bytes in all, then fails as a full disk does."""
    real = os.write
    room = [limit]

    def write(fd: int, data: bytes) -> int:
        if room[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        placed = real(fd, bytes(data[: room[0]]))
        room[0] -= placed
        return placed

    return write


def test_a_line_a_full_disk_cut_in_two_is_finished_not_written_again(tmp_path, monkeypatch):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 0})
    sink.flush()
    for n in (1, 2, 3):
        sink.write({"n": n, "tool": "x" * 40})
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", _failing_after(70))  # line 1 whole, line 2 in part
        sink.flush()
    assert not sink.healthy
    sink.flush()  # room again: the cut line is finished where it stopped
    assert read(path) == [{"n": 0}, *({"n": n, "tool": "x" * 40} for n in (1, 2, 3))]
    assert metrics(sink)["mcp_gateway_audit_lines"] == 4
    sink.stop()


def test_a_cut_line_is_written_whole_to_the_file_that_replaced_it(tmp_path, monkeypatch):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1, "tool": "x" * 40})
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", _failing_after(20))
        sink.flush()
    path.rename(tmp_path / "audit.log.1")  # rotated while it could not be written
    sink.reopen()
    sink.write({"n": 2})
    sink.flush()
    assert read(path) == [{"n": 1, "tool": "x" * 40}, {"n": 2}]
    sink.stop()


def test_standard_output_cut_mid_line_is_finished(capfd, monkeypatch):
    sink = AuditSink("-")
    sink.write({"n": 1, "tool": "x" * 40})
    sink.write({"n": 2})
    with monkeypatch.context() as patched:
        patched.setattr(os, "write", _failing_after(10))
        sink.flush()
    sink.flush()
    sink.stop()
    lines = capfd.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [{"n": 1, "tool": "x" * 40}, {"n": 2}]


class _BrokenExport:
    def emit(self, fields: dict[str, object], span: object = None) -> None:
        raise RuntimeError("exporter broke")

    def shutdown(self) -> None:
        pass


def test_an_otlp_copy_that_fails_neither_fails_the_line_nor_goes_unnoticed(tmp_path):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path), otlp=_BrokenExport())
    sink.write({"n": 1})
    sink.write({"n": 2})
    sink.stop()
    assert read(path) == [{"n": 1}, {"n": 2}]
    assert metrics(sink)["mcp_gateway_audit_otlp_errors"] == 2


def test_a_line_never_outgrows_what_a_pipe_keeps_whole(tmp_path):
    # Values a request chooses, each within its cap, that JSON escapes six-fold (U+2028 is
    # written `\u2028`): several workers' lines on one pipe would interleave past 4 KiB.
    wide = "\u2028" * 255 + "…"
    fields = {
        "request_id": "r-1",
        "route": "default/mcp",
        "decision": "allow",
        "stage": "reverse-proxy",
        "reason": ("\u2028" * 1023) + "…",
        "caller": {"iss": wide, "sub": wide, "client_id": wide},
        "mcp": {"method": wide, "tool": wide, "target": wide},
        "method": "POST",
        "path": wide,
        "status": 200,
    }
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write(fields)
    sink.write({"n": 2})
    sink.stop()
    raw = path.read_bytes().splitlines()
    assert len(raw) == 2
    assert len(raw[0]) + 1 <= 4096
    line = json.loads(raw[0])
    # What the gateway decided is never what gets cut.
    assert {k: line[k] for k in ("request_id", "route", "decision", "stage", "status")} == {
        "request_id": "r-1",
        "route": "default/mcp",
        "decision": "allow",
        "stage": "reverse-proxy",
        "status": 200,
    }
    assert line["mcp"]["tool"].startswith("\u2028")
    assert line["mcp"]["tool"].endswith("…")


def test_an_audit_file_others_may_write_is_refused_and_one_they_may_read_is_named(tmp_path):
    path = tmp_path / "audit.log"
    path.touch()
    path.chmod(0o640)
    assert exposure(str(path)) is None
    path.chmod(0o644)
    assert exposure(str(path)) == (False, "every user of this machine can read it")
    path.chmod(0o666)
    assert exposure(str(path)) == (True, "every user of this machine can write lines into it")
    assert exposure("-") is None
    assert exposure("/dev/null") is None  # not a regular file: not an audit trail to keep


def test_a_new_audit_file_is_readable_by_its_owner_and_group_only(tmp_path):
    path = tmp_path / "new.log"
    check_path(str(path))
    assert path.stat().st_mode & 0o777 & ~0o640 == 0


def test_lines_still_unwritten_at_exit_are_counted_in_the_log(tmp_path, caplog):
    directory = tmp_path / "logs"
    directory.mkdir()
    sink = AuditSink(str(directory / "audit.log"))
    sink.flush()
    (directory / "audit.log").unlink()
    directory.rmdir()
    sink.reopen()
    sink.write({"n": 1})
    sink.write({"n": 2})
    sink.stop()
    assert "2 audit lines could not be written before the gateway stopped" in caplog.text
    assert metrics(sink)["mcp_gateway_audit_lines_dropped"] == 2


def test_a_line_that_comes_after_stop_is_still_written(tmp_path):
    # A request cut at shutdown before it was answered ends after the lifespan stopped the
    # sink: its line (status 0) must not wait for a writer thread that is gone.
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.start()
    sink.write({"n": 1})
    sink.stop()
    sink.write({"n": 2, "status": 0})
    assert read(path) == [{"n": 1}, {"n": 2, "status": 0}]


def test_an_otlp_audit_record_carries_the_request_s_trace_and_span(tmp_path):
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
    from opentelemetry.sdk.trace import TracerProvider

    exported = InMemoryLogRecordExporter()
    sink = AuditSink(str(tmp_path / "audit.log"), otlp=OtlpAudit(exported))
    span = TracerProvider().get_tracer("test").start_span("POST /mcp")
    context = span.get_span_context()
    sink.write({"request_id": "r-1", "decision": "deny"}, span)
    sink.write({"request_id": "r-2", "decision": "deny"})
    sink.stop()
    records = {r.log_record.body["request_id"]: r.log_record for r in exported.get_finished_logs()}
    assert (records["r-1"].trace_id, records["r-1"].span_id) == (context.trace_id, context.span_id)
    assert records["r-2"].trace_id in (0, None)


def test_the_writer_thread_outlives_an_unexpected_error(tmp_path, monkeypatch):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    real = sink._write_lines
    calls: list[int] = []

    def once_broken(lines: list[str]) -> int:
        calls.append(len(lines))
        if len(calls) == 1:
            raise RuntimeError("a bug in the writer")
        return real(lines)

    monkeypatch.setattr(sink, "_write_lines", once_broken)
    sink.start()
    sink.write({"n": 1})
    wait_until(lambda: sink.write_errors == 1, 10, "the failure counted")
    sink.write({"n": 2})
    wait_until(lambda: path.exists() and {"n": 2} in read(path), 10, "the next line written")
    sink.stop()


def test_a_file_every_user_may_write_is_not_written_after_a_reopen(tmp_path):
    # Rotation reopens the file at its path, which someone may have made anew in between.
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1})
    sink.flush()
    path.rename(tmp_path / "audit.log.1")
    path.touch()
    path.chmod(0o666)
    sink.reopen()
    sink.write({"n": 2})
    sink.flush()
    assert path.read_text() == ""
    assert not sink.healthy
    path.chmod(0o640)
    sink.flush()
    assert read(path) == [{"n": 2}]
    assert sink.healthy
    sink.stop()


def reopened(line: dict[str, object], gone: str) -> bool:
    """Whether `line` is the sink's own, saying the file at its path `gone` and was reopened."""
    return line["event"] == "audit-log-reopened" and gone in str(line["reason"])


def test_a_file_removed_or_replaced_while_written_is_opened_anew_at_its_path(
    tmp_path, monkeypatch, caplog
):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1})
    sink.flush()
    path.unlink()  # `rm`: the lines would go on into a file no one can read at the path
    for n in range(2, 102):
        sink.write({"n": n})
    looked = []
    real = os.stat
    with monkeypatch.context() as patched:
        patched.setattr(os, "stat", lambda *a, **k: looked.append(a[0]) or real(*a, **k))
        with caplog.at_level(logging.WARNING, "mcp_oauth_gateway.audit"):
            sink.flush()
    assert looked.count(str(path)) == 1  # one look per batch, not per line
    marker, *lines = read(path)
    assert reopened(marker, "was removed")
    assert lines == [{"n": n} for n in range(2, 102)]
    assert [r.getMessage() for r in caplog.records].count(
        f"audit log {path} was removed while written; opening its path anew"
    ) == 1
    # `mv` of another file over it: the new file is written, after a line saying so.
    other = tmp_path / "other.log"
    other.write_text('{"other":1}\n')
    other.chmod(0o640)
    other.replace(path)
    sink.write({"n": 102})
    sink.flush()
    sink.flush()  # nothing happened since: no other line, no other count
    first, marker, last = read(path)
    assert (first, last) == ({"other": 1}, {"n": 102})
    assert reopened(marker, "was replaced by another file")
    assert metrics(sink)["mcp_gateway_audit_file_reopened"] == 2
    assert sink.healthy
    sink.stop()


def test_a_removed_directory_makes_the_sink_unhealthy_until_its_path_can_be_written(tmp_path):
    directory = tmp_path / "logs"
    directory.mkdir()
    path = directory / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1})
    sink.flush()
    path.unlink()
    directory.rmdir()
    sink.write({"n": 2})
    sink.flush()
    # Nowhere to write: --audit-required refuses (fail closed); the line waits.
    assert not sink.healthy
    assert metrics(sink)["mcp_gateway_audit_healthy"] == 0
    sink.flush()
    assert not sink.healthy
    directory.mkdir()
    sink.flush()  # no new line needed: the path can be written again
    assert sink.healthy
    marker, line = read(path)
    assert reopened(marker, "was removed")
    assert line == {"n": 2}
    assert metrics(sink)["mcp_gateway_audit_file_reopened"] == 1
    sink.stop()


def test_a_file_every_user_may_write_moved_over_it_is_not_written(tmp_path):
    path = tmp_path / "audit.log"
    sink = AuditSink(str(path))
    sink.write({"n": 1})
    sink.flush()
    planted = tmp_path / "planted.log"
    planted.touch()
    planted.chmod(0o666)
    planted.replace(path)
    sink.write({"n": 2})
    sink.flush()
    assert path.read_text() == ""
    assert not sink.healthy
    path.chmod(0o640)
    sink.flush()
    marker, line = read(path)
    assert reopened(marker, "was replaced by another file")
    assert line == {"n": 2}
    assert sink.healthy
    sink.stop()
