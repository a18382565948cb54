"""No value a request carries can forge a log line (issue 24, item 6): every log format escapes
it. The access log's text line escapes each field (spaces too), every text record escapes its
message and indents its traceback, and every JSON line stays one printable line."""

from __future__ import annotations

import codecs
import io
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.dataplane.access_log import AccessLog
from mcp_oauth_gateway.logs import escape, escape_field, json_line, queued

FORGED = "2026-01-01 00:00:00,000 INFO mcp_oauth_gateway.access: POST /mcp 200 1.0ms sub=admin"
# What the issue sent: `/mcp%0A<a whole access line>`, as the path reaches the gateway.
FORGED_PATH = "/mcp\n" + FORGED
# A text record starts with its date at the left margin; nothing else may.
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
# Every character Python's str.splitlines() (and so many log readers) takes for a line break.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
NON_PRINTABLE = [
    *(chr(c) for c in range(0x20)),
    "\x7f",
    *(chr(c) for c in range(0x80, 0xA0)),
    "\u00a0",
    "\u200b",  # zero width space
    "\u202e",  # right-to-left override
    "\u2028",
    "\u2029",
    "\ufeff",
    "\ud800",  # a lone surrogate
    "\U000e0001",  # a tag character (beyond the BMP)
]


pytestmark = pytest.mark.usefixtures("access_log_info")


def unescaped(text: str) -> str:
    """Undo `escape`: its escapes are Python's, so the unicode_escape codec reads them."""
    return codecs.decode(text.encode("latin-1", "backslashreplace"), "unicode_escape")


def access_lines(json_lines: bool, *records: tuple[Any, ...]) -> list[str]:
    read_fd, write_fd = os.pipe()
    log = AccessLog(fd=write_fd, json_lines=json_lines)
    for record in records:
        log.record(*record)
    log.flush()
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        return pipe.read().decode("utf-8").split("\n")[:-1]


# --- escape ---------------------------------------------------------------------------------


@pytest.mark.parametrize("char", NON_PRINTABLE, ids=lambda c: f"U+{ord(c):04X}")
def test_every_non_printable_character_is_written_as_a_visible_escape(char: str) -> None:
    escaped = escape(f"a{char}b")
    assert escaped.isprintable()
    assert escaped.isascii()
    assert escaped.startswith("a\\")
    assert escaped.endswith("b")
    assert unescaped(escaped) == f"a{char}b"


def test_printable_text_is_left_as_it_is_and_the_backslash_doubled() -> None:
    assert escape("/mcp/é/漢字 x") == "/mcp/é/漢字 x"
    assert escape("a\\x0ab") == "a\\\\x0ab"  # a client's own `\x0a` cannot pass for an escape
    assert escape_field("a b") == "a\\x20b"
    assert escape_field("/mcp") == "/mcp"


@given(st.text())
def test_escaped_text_is_one_printable_line_that_reads_back_exactly(text: str) -> None:
    for escaped in (escape(text), escape_field(text)):
        assert escaped.isprintable()
        assert len(escaped.splitlines()) <= 1
        assert unescaped(escaped) == text
    assert " " not in escape_field(text)


# --- the access log ---------------------------------------------------------------------------


def test_the_forged_access_line_of_the_issue_stays_inside_its_own_line() -> None:
    [line] = access_lines(False, ("POST", FORGED_PATH, 401, 0.0003, None))
    assert RECORD_START.match(line)
    assert "POST /mcp\\n2026-01-01\\x2000:00:00,000\\x20INFO\\x20" in line
    assert line.endswith(" 401 0.3ms sub=-")


@given(st.text(), st.text(), st.text(), st.text())
def test_a_text_access_line_is_one_line_of_ten_fields_whatever_the_request_held(
    method: str, path: str, sub: str, iss: str
) -> None:
    [line] = access_lines(False, (method, path, 200, 0.001, sub, "r-1", iss))
    assert line.isprintable()
    fields = line.split(" ")
    # date, time, level, logger, method, path, status, duration, sub, iss
    assert len(fields) == 10
    assert [unescaped(f) for f in fields[4:6]] == [method, path]
    assert fields[8] == ("sub=-" if not sub else "sub=" + escape_field(sub))
    assert unescaped(fields[9].removeprefix("iss=")) == iss


@given(st.text(), st.text(), st.one_of(st.none(), st.text()))
def test_a_json_access_line_is_one_printable_line_whatever_the_request_held(
    path: str, sub: str, iss: str | None
) -> None:
    [line] = access_lines(True, ("POST", path, 200, 0.001, sub, "r-1", iss))
    assert line.isprintable()
    assert len(line.splitlines()) == 1
    fields = json.loads(line)
    assert (fields["path"], fields["sub"], fields["iss"]) == (path, sub, iss)


@pytest.mark.parametrize("value", [*LINE_BREAKS, "\x7f", "\ud83d", "\u202e"])
def test_json_lines_escape_what_readers_take_for_a_line_break(value: str) -> None:
    # orjson for most text, json.dumps for what orjson cannot encode (the lone surrogate).
    line = json_line({"message": f"a{value}{FORGED}"})
    assert line.isprintable()
    assert len(line.splitlines()) == 1
    assert json.loads(line) == {"message": f"a{value}{FORGED}"}


# --- every other log record -----------------------------------------------------------------


def logged(json_lines: bool, emit: Callable[[logging.Logger], None]) -> str:
    """What the gateway's queued handler writes for the records `emit(logger)` logs."""
    stream = io.StringIO()
    handler, listener = queued(stream, json_lines)
    logger = logging.getLogger("test.log_escaping")
    logger.propagate = False
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    try:
        emit(logger)
    finally:
        listener.stop()  # writes everything queued
        logger.handlers[:] = []
    return stream.getvalue()


def _fail_with(message: str) -> None:
    raise ValueError(message)


def _log_a_failure(logger: logging.Logger) -> None:
    logger.warning("refused %s", FORGED_PATH)
    try:
        _fail_with(FORGED_PATH + "\u2028" + FORGED)
    except ValueError:
        logger.exception("unhandled error serving POST %s", FORGED_PATH)


def test_no_text_record_lets_a_logged_value_start_a_line() -> None:
    lines = logged(False, _log_a_failure).splitlines()
    starts = [line for line in lines if not line.startswith(" ")]
    assert len(starts) == 2, lines  # the warning and the error, nothing else at the margin
    assert all(RECORD_START.match(line) for line in starts)
    assert starts[0].endswith("test.log_escaping: refused /mcp\\n" + FORGED)
    # The traceback keeps its lines, each indented; the exception's text is escaped in it.
    traceback = lines[lines.index(starts[1]) + 1 :]
    assert traceback[0] == "    Traceback (most recent call last):"
    assert traceback[-2:] == ["    ValueError: /mcp", "    " + FORGED + "\\u2028" + FORGED]
    assert not any(line.startswith(FORGED) for line in lines)


def test_a_json_record_is_one_line_with_its_traceback_apart() -> None:
    lines = logged(True, _log_a_failure).splitlines()
    assert len(lines) == 2
    warning, error = (json.loads(line) for line in lines)
    assert warning["message"] == "refused " + FORGED_PATH
    assert error["message"] == "unhandled error serving POST " + FORGED_PATH
    assert error["exception"].startswith("Traceback (most recent call last):")
    assert error["exception"].endswith("ValueError: " + FORGED_PATH + "\u2028" + FORGED)
