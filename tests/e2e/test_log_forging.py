"""The gateway's log cannot be forged from a request (issue 24, item 6): the path of the issue,
sent to a running gateway, stays inside its own escaped access line; and a caller is named by
issuer and subject together (item 5), since `sub` is unique only within its issuer."""

from __future__ import annotations

import httpx

from support import INITIALIZE, wait_until

FORGED = "2026-01-01 00:00:00,000 INFO mcp_oauth_gateway.access: POST /mcp 200 1.0ms sub=admin"
# The escaped form the access line holds: the newline and every space written as escapes.
ESCAPED = "/mcp\\n" + FORGED.replace(" ", "\\x20")


def test_a_forged_access_line_in_the_path_is_written_escaped_on_its_own_line(stack_b):
    # The request of the issue, unauthenticated (httpx sends the percent-encoding as it is).
    answer = httpx.post(stack_b.gateway + "/mcp%0A" + FORGED.replace(" ", "%20"), json=INITIALIZE)
    assert answer.status_code == 404, answer.text
    # The access log is written in batches by a background thread: wait for the line.
    wait_until(lambda: ESCAPED in stack_b.process.log(), 30, "the forged request's access line")
    lines = stack_b.process.log().splitlines()
    assert not [line for line in lines if line.startswith(FORGED)], "a forged line was written"
    [line] = [line for line in lines if ESCAPED in line]
    assert " INFO mcp_oauth_gateway.access: POST " + ESCAPED + " " in line


def test_the_access_line_names_the_caller_by_issuer_and_subject(stack_b):
    subject = "alice-audit"
    httpx.post(
        stack_b.mcp,
        json=INITIALIZE,
        headers={
            "Authorization": f"Bearer {stack_b.token(sub=subject)}",
            "Accept": "application/json, text/event-stream",
        },
    )
    named = f"sub={subject} iss={stack_b.issuer}"
    wait_until(lambda: named in stack_b.process.log(), 30, f"an access line with {named!r}")
