"""The audit trail (`serve --audit-log`) of a real gateway process in Broker mode in front of the
real MCP backend and the dev identity provider: a real MCP client (the Python SDK) signs in and
calls an allowed and a denied tool, and the audit file answers who called what and why, line by
line; the Broker's events (registration, consent, sign-in, code, token, refresh, reuse,
revocation) with no token or code ever written; the file reopened on SIGHUP, forwarded by
the supervisor to every worker, for log rotation; and a file removed or replaced while served,
or its directory, noticed and opened anew at its path (503 meanwhile with --audit-required)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from headless_login import sign_in

from broker_calls import authorize_url, redeem, register
from conftest import _start_stack
from support import PEERS, wait_until

TOOL_RULES = """\
  backend:
    mcp:
      authorization:
        action: Allow
        policy:
          matchExpressions:
            - 'mcp.tool.name == "add"'
            - '"admin" in jwt.groups'
"""


def written(path: Path) -> list[dict]:
    """The whole lines written so far (the writer thread may be mid-batch)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def wait_for_line(path: Path, what: str, **expected: object) -> dict:
    """The first line whose fields hold `expected`, once written."""
    found: list[dict] = []

    def matches() -> bool:
        found[:] = [
            line for line in written(path) if all(line.get(k) == v for k, v in expected.items())
        ]
        return bool(found)

    wait_until(matches, 30, what)
    return found[0]


@pytest.fixture(scope="module")
def audited(logs, tmp_path_factory, idp_key, backend) -> Iterator[tuple[object, Path]]:
    """Provider B behind the gateway in Broker mode, with tool rules and an audit log."""
    tmp = tmp_path_factory.mktemp("audited")
    path = tmp / "audit.log"
    for stack in _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp,
        idp_key,
        backend,
        broker=True,
        gateway_args=("--allow-local-client-metadata", "--audit-log", str(path)),
        name="gateway-audit",
        policy_extra=TOOL_RULES,
    ):
        yield stack, path


def test_a_real_client_s_calls_are_answered_line_by_line(audited):
    stack, path = audited
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), stack.mcp, "alice", "x", "count"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # `add` answered first; then `count` (admins only) refused, which the SDK raises.
    assert not report["ok"]
    assert "Unknown tool: count" in report["error"], report

    allowed = wait_for_line(path, "the allowed call", mcp={"method": "tools/call", "tool": "add"})
    assert (allowed["decision"], allowed["stage"], allowed["status"]) == (
        "allow",
        "reverse-proxy",
        200,
    )
    assert allowed["caller"]["sub"] == "alice"
    assert allowed["caller"]["iss"] == stack.issuer
    assert allowed["reason"].startswith("passed ")
    assert "mcp-authorization" in allowed["reason"]
    assert allowed["reason"].endswith("tool 'add': Allow rule `mcp.tool.name == \"add\"` holds")

    denied = wait_for_line(path, "the denied call", mcp={"method": "tools/call", "tool": "count"})
    assert (denied["decision"], denied["stage"], denied["status"]) == (
        "deny",
        "mcp-authorization",
        200,
    )
    assert denied["caller"]["sub"] == "alice"
    assert denied["reason"] == (
        'tool \'count\': no Allow rule holds (`mcp.tool.name == "add"`; `"admin" in jwt.groups`)'
    )

    # How the client got there: refused without a token, then the Broker's sign-in.
    lines = written(path)
    unauthenticated = [
        line
        for line in lines
        if line["path"] == "/mcp" and line["status"] == 401 and line["caller"] is None
    ]
    assert unauthenticated
    assert {(line["decision"], line["stage"]) for line in unauthenticated} == {
        ("deny", "jwt-authentication")
    }
    events = [line["event"] for line in lines if line["event"]]
    for event in ("client-registered", "consent-given", "code-issued", "token-issued"):
        assert event in events, events
    registered = next(line for line in lines if line["event"] == "client-registered")
    issued = next(line for line in lines if line["event"] == "token-issued")
    # The sign-in's lines name the client and who signed in with it.
    assert issued["caller"] == {**registered["caller"], "iss": stack.issuer, "sub": "alice"}
    assert registered["reason"].startswith("registered client 'py-mcp-2'")
    # One line per request, each with the id the client got back.
    ids = [line["request_id"] for line in lines]
    assert len(ids) == len(set(ids))
    assert all(ids)


async def test_broker_events_name_the_client_and_never_a_token_or_code(audited):
    stack, path = audited
    client_id = register(stack)
    query = await sign_in(
        authorize_url(stack, client_id, scope="openid profile offline_access"),
        "alice",
        "x",
        "http://127.0.0.1:47001/cb",
    )
    tokens = redeem(stack, client_id, query["code"]).json()
    form = {"grant_type": "refresh_token", "client_id": client_id}
    rotated = httpx.post(
        f"{stack.gateway}/mcp/oauth/token", data={**form, "refresh_token": tokens["refresh_token"]}
    ).json()
    reused = httpx.post(
        f"{stack.gateway}/mcp/oauth/token", data={**form, "refresh_token": tokens["refresh_token"]}
    )
    assert reused.status_code == 400
    revoked = httpx.post(
        f"{stack.gateway}/mcp/oauth/revoke",
        data={"token": rotated["refresh_token"], "client_id": client_id},
    )
    assert revoked.status_code == 200

    mine = {"client_id": client_id}
    # Who signed in, from the provider's own token response, on the sign-in's lines, and kept
    # beside the refresh token for the reuse's line: whose sign-in was revoked.
    signed = {**mine, "iss": stack.issuer, "sub": "alice"}
    reuse = wait_for_line(path, "reuse detected", event="refresh-reuse-detected", caller=signed)
    assert (reuse["decision"], reuse["stage"]) == ("deny", "oauth-endpoints")
    assert "already exchanged" in reuse["reason"]
    # The reuse revoked the rotated token too: revoking it finds nothing, and names no one.
    for event in ("client-registered", "token-revoked"):
        line = wait_for_line(path, event, event=event, caller=mine)
        assert line["decision"] == "allow"
    for event in ("token-issued", "token-refreshed"):
        line = wait_for_line(path, event, event=event, caller=signed)
        assert line["decision"] == "allow"
    code = wait_for_line(path, "code issued", event="code-issued", caller=signed)
    assert code["stage"] == "broker-pages"
    text = path.read_text()
    secrets = (
        query["code"],
        tokens["access_token"],
        tokens["refresh_token"],
        rotated["access_token"],
        rotated["refresh_token"],
    )
    for secret in secrets:
        assert secret not in text


async def test_a_refused_consent_and_a_bad_code_are_denials_naming_their_event(audited):
    stack, path = audited
    client_id = register(stack)
    refused = await sign_in(
        authorize_url(stack, client_id), "alice", "x", "http://127.0.0.1:47001/cb", "deny"
    )
    assert refused["error"] == "access_denied"
    mine = {"client_id": client_id}
    line = wait_for_line(path, "the refused consent", event="consent-refused", caller=mine)
    assert (line["decision"], line["stage"], line["status"]) == ("deny", "broker-pages", 302)
    assert line["reason"] == "access_denied: the user denied the request"
    bad = redeem(stack, client_id, "not-a-code-5d2c")
    assert bad.status_code == 400
    line = wait_for_line(path, "the refused code", event="token-request", caller=mine)
    assert (line["decision"], line["stage"]) == ("deny", "oauth-endpoints")
    assert line["reason"] == "invalid_grant: unknown, expired or already used authorization code"
    assert "not-a-code-5d2c" not in path.read_text()


def test_sighup_reopens_the_audit_log_in_every_worker(logs, tmp_path_factory, idp_key, backend):
    tmp = tmp_path_factory.mktemp("audit-rotation")
    path = tmp / "audit.log"
    for stack in _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp,
        idp_key,
        backend,
        gateway_args=("--audit-log", str(path), "--workers", "2"),
        name="gateway-audit-rotation",
    ):
        rotate_and_probe(stack, path, tmp / "audit.log.1")


def rotate_and_probe(stack, path: Path, rotated: Path) -> None:
    """Rename the audit log, send SIGHUP, and wait until every worker writes the new file."""
    token = stack.token()

    def probe() -> str:
        response = httpx.post(stack.mcp, json={}, headers={"Authorization": f"Bearer {token}"})
        return response.headers["x-request-id"]

    def landed(request_id: str) -> bool:
        return any(line["request_id"] == request_id for line in written(path) + written(rotated))

    before = probe()
    wait_for_line(path, "a line before rotation", request_id=before)
    path.rename(rotated)
    os.kill(stack.process.popen.pid, signal.SIGHUP)
    wait_until(path.exists, 30, "the audit log reopened at its path")
    # Each worker reopens on its own: once a run of probes all land in the new file, both
    # have (requests go to either).
    streak: list[str] = []

    def all_in_new_file() -> bool:
        request_id = probe()
        wait_until(lambda: landed(request_id), 30, "the probe's line")
        if any(line["request_id"] == request_id for line in written(path)):
            streak.append(request_id)
        else:
            streak.clear()
        return len(streak) >= 10

    wait_until(all_in_new_file, 60, "every worker writing to the new file")
    assert any(line["request_id"] == before for line in written(rotated))
    # Two workers, one line per request each: no two lines name the same request.
    ids = [line["request_id"] for line in written(rotated) + written(path)]
    assert len(ids) == len(set(ids))
    assert stack.process.popen.poll() is None  # SIGHUP did not end the gateway


def test_with_tracing_the_lines_go_out_as_otlp_log_records_too(
    logs, tmp_path_factory, idp_key, backend, otlp_receiver
):
    tmp = tmp_path_factory.mktemp("audit-otlp")
    path = tmp / "audit.log"
    for stack in _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp,
        idp_key,
        backend,
        gateway_args=("--audit-log", str(path), "--tracing", "otlp"),
        name="gateway-audit-otlp",
        gateway_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BLRP_SCHEDULE_DELAY": "100",
        },
    ):
        assert_exported(stack, path, otlp_receiver)


def assert_exported(stack, path: Path, receiver: str) -> None:
    """A refusal's line, and the same event at the OTLP receiver with the request's trace."""
    # The gateway's own id: a client's X-Request-Id is not the audit line's (it is untrusted).
    response = httpx.post(stack.mcp, json={}, headers={"X-Request-Id": uuid.uuid4().hex})
    assert response.status_code == 401
    request_id = response.headers["x-request-id"]
    line = wait_for_line(path, "the refusal's line", request_id=request_id)
    assert re.fullmatch(r"[0-9a-f]{32}", line["trace_id"])

    def exported() -> list[dict]:
        records = httpx.get(f"{receiver}/logs").json()
        return [r for r in records if r["attributes"].get("audit.request_id") == request_id]

    wait_until(exported, 30, "the audit record at the OTLP receiver")
    record = exported()[0]
    assert record["event_name"] == "mcp_oauth_gateway.audit"
    assert record["service"] == "mcp-oauth-gateway"
    assert record["attributes"]["audit.decision"] == "deny"
    assert record["attributes"]["audit.stage"] == "jwt-authentication"
    assert record["body"]["reason"] == "missing bearer token"
    assert record["body"]["trace_id"] == line["trace_id"]

    def span_of_the_request() -> bool:
        spans = httpx.get(f"{receiver}/spans").json()
        return any(s["trace_id"] == line["trace_id"] for s in spans)

    wait_until(span_of_the_request, 30, "the request's span, with the line's trace id")


def test_a_file_removed_or_replaced_while_served_is_opened_anew_at_its_path(
    logs, tmp_path_factory, idp_key, backend
):
    directory = tmp_path_factory.mktemp("audit-replaced") / "logs"
    directory.mkdir(mode=0o750)
    path = directory / "audit.log"
    for stack in _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        directory.parent,
        idp_key,
        backend,
        gateway_args=("--audit-log", str(path), "--audit-required"),
        name="gateway-audit-replaced",
    ):
        remove_replace_and_probe(stack, directory, path)


def remove_replace_and_probe(stack, directory: Path, path: Path) -> None:
    """`rm` the audit log, `mv` another file over it, then remove its directory: lines keep
    arriving at the path, each change said by a line; without a directory, 503 until one is
    made again."""
    headers = {"Authorization": f"Bearer {stack.token()}"}

    def probe() -> httpx.Response:
        return httpx.post(stack.mcp, json={}, headers=headers, timeout=30)

    def served(what: str) -> None:
        """A request answered (not refused by the audit stage) and its line at the path."""
        response = probe()
        assert response.status_code != 503, response.text
        wait_for_line(path, what, request_id=response.headers["x-request-id"])

    served("a line in the file it started with")
    path.unlink()
    served("a line at the path after rm")
    assert written(path)[0]["event"] == "audit-log-reopened"
    other = directory / "other.log"
    other.write_text('{"other":1}\n')
    other.chmod(0o640)
    other.replace(path)
    served("a line at the path after mv")
    lines = written(path)
    assert lines[0] == {"other": 1}
    assert lines[1]["event"] == "audit-log-reopened"
    assert "replaced" in lines[1]["reason"]

    shutil.rmtree(directory)  # nowhere to write: fail closed
    refused: list[httpx.Response] = []

    def refusing() -> bool:
        refused.append(probe())
        return refused[-1].status_code == 503

    wait_until(refusing, 30, "503 while the audit log has no directory")
    assert refused[-1].json()["error"] == "audit_unavailable"
    assert refused[-1].json()["error_description"]
    directory.mkdir(mode=0o750)
    wait_until(lambda: probe().status_code != 503, 30, "served again once it can write")
    served("a line at the path in the directory made anew")
    assert written(path)[0]["event"] == "audit-log-reopened"
    # The refusals meanwhile are lines too, written once the path could be.
    ids = {line.get("request_id") for line in written(path)}
    assert refused[-1].headers["x-request-id"] in ids
