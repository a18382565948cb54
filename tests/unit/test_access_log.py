"""The access log's lines: every JSON line parses whatever the request carried, the caller is
named by issuer and subject, and the time formatted once a second is still each line's own."""

from __future__ import annotations

import calendar
import json
import os
import re
import time

import pytest

from mcp_oauth_gateway.dataplane.access_log import AccessLog
from mcp_oauth_gateway.logs import json_line

ISO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


pytestmark = pytest.mark.usefixtures("access_log_info")


def written(log: AccessLog, read_fd: int) -> list[str]:
    log.flush()
    return os.read(read_fd, 1 << 20).decode("utf-8").splitlines()


def pipe_log(json_lines: bool) -> tuple[AccessLog, int]:
    read_fd, write_fd = os.pipe()
    return AccessLog(fd=write_fd, json_lines=json_lines), read_fd


@pytest.mark.parametrize(
    ("path", "sub"),
    [
        ("/mcp", "alice"),
        ("/mcp/é/漢字", "josé"),  # non-ASCII kept as is
        ("/mcp/\ud800x", "bob"),  # a lone surrogate: not UTF-8, escaped instead
        ('/mcp/"quoted"\n\\', 12345),  # JSON's own specials, a non-string subject
        ("/mcp", None),
    ],
)
def test_every_json_access_line_parses_with_the_request_fields(path: str, sub: object) -> None:
    log, read_fd = pipe_log(json_lines=True)
    log.record("POST", path, 200, 0.0012345, sub, "req-1")
    [line] = written(log, read_fd)
    fields = json.loads(line)
    assert fields["path"] == path
    assert fields["sub"] == (None if sub is None else str(sub))
    assert fields["iss"] is None
    assert fields["method"] == "POST"
    assert fields["status"] == 200
    assert fields["duration_ms"] == 1.234 or fields["duration_ms"] == 1.235
    assert fields["request_id"] == "req-1"
    assert fields["logger"] == "mcp_oauth_gateway.access"
    assert ISO_TIME.match(str(fields["time"]))


def test_json_access_lines_carry_their_own_milliseconds_and_the_current_second() -> None:
    log, read_fd = pipe_log(json_lines=True)
    before = time.time()
    for _ in range(50):
        log.record("GET", "/mcp", 200, 0.001, "alice")
    after = time.time()
    lines = [json.loads(line) for line in written(log, read_fd)]
    assert len(lines) == 50
    for fields in lines:
        stamp = time.strptime(str(fields["time"])[:19], "%Y-%m-%dT%H:%M:%S")
        seconds = calendar.timegm(stamp)  # the stamp is UTC
        assert int(before) <= seconds <= after


def test_text_access_line_format_is_unchanged() -> None:
    log, read_fd = pipe_log(json_lines=False)
    log.record("POST", "/mcp", 403, 0.0021, None)
    [line] = written(log, read_fd)
    assert re.match(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO mcp_oauth_gateway.access: "
        r"POST /mcp 403 2\.1ms sub=-$",
        line,
    )


def test_the_access_line_names_the_issuer_beside_the_subject() -> None:
    # `sub` is unique only within its issuer: with several providers, alice and alice differ.
    issuer = "https://idp-2.example/realms/a b"
    text, read_text = pipe_log(json_lines=False)
    text.record("POST", "/mcp", 200, 0.001, "alice", None, issuer)
    [line] = written(text, read_text)
    assert line.endswith(" sub=alice iss=https://idp-2.example/realms/a\\x20b")
    as_json, read_json = pipe_log(json_lines=True)
    as_json.record("POST", "/mcp", 200, 0.001, "alice", "req-1", issuer)
    [line] = written(as_json, read_json)
    assert (json.loads(line)["sub"], json.loads(line)["iss"]) == ("alice", issuer)


def test_json_line_escapes_what_utf8_cannot_carry() -> None:
    assert json.loads(json_line({"a": "\udcff", "b": "é"})) == {"a": "\udcff", "b": "é"}
    assert json_line({"b": "é"}) == '{"b":"é"}'
