"""The audit trail through the whole gateway in process (`audit_support`): exactly one line per
request, allow or deny with the stage that decided and why, the caller and the MCP call, the
request id the client got back; never a token or a secret; `--audit-required` refusing while
the log cannot be written; and the `--audit-log` flag's checks."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time

import pytest

from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.serving.stages import ENTRY, PIPELINE
from unit.audit_support import (
    BACKEND_SECRET,
    ISSUER,
    audited_app,
    call,
    line_for,
    lines,
    request,
    token,
)
from unit.resources_fixture import BASE, policy, write
from unit.stages.dpop_requests import JKT, proof

FIELDS = {
    "time",
    "request_id",
    "trace_id",
    "route",
    "policy",
    "decision",
    "stage",
    "reason",
    "caller",
    "mcp",
    "event",
    "method",
    "path",
    "status",
}
STAGES = {stage.name for stage in (*ENTRY, *PIPELINE)}


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    return audited_app(tmp_path, monkeypatch)


async def test_an_allowed_call_says_who_called_which_tool_and_what_it_passed(gateway):
    app, upstream, path = gateway
    response = await request(
        app, body=call("echo"), headers=[("authorization", f"Bearer {token(azp='cli-7')}")]
    )
    assert response.status_code == 200
    line = line_for(app, path, response)
    assert set(line) == FIELDS
    assert line["time"].endswith("Z")
    assert (line["route"], line["policy"]) == ("default/mcp", "default/auth")
    assert (line["decision"], line["stage"], line["status"]) == ("allow", "reverse-proxy", 200)
    assert line["reason"] == (
        "passed owned-headers, jwt-authentication, cel-authorization, mcp-authorization, "
        'backend-credentials; tool \'echo\': Allow rule `mcp.tool.name in ["echo", "purge"]` '
        "holds"
    )
    assert line["caller"] == {"iss": ISSUER, "sub": "alice", "client_id": "cli-7"}
    assert line["mcp"] == {"method": "tools/call", "tool": "echo"}
    # The backend got the same request id the client got back and the line names.
    assert upstream.last.header(b"x-request-id") == response.headers["x-request-id"].encode()


@pytest.mark.parametrize(
    ("tool", "claims", "authorization", "stage", "reason", "status"),
    [
        ("echo", {}, False, "jwt-authentication", "missing bearer token", 401),
        ("echo", {"ttl": -3600}, True, "jwt-authentication", "token has expired", 401),
        (
            "echo",
            {"groups": ["users"]},
            True,
            "cel-authorization",
            'no Allow rule holds (`"mcp-agent" in jwt.groups`)',
            403,
        ),
        (
            "rm",
            {},
            True,
            "mcp-authorization",
            'tool \'rm\': no Allow rule holds (`mcp.tool.name in ["echo", "purge"]`)',
            200,
        ),
        ("purge", {}, True, "mcp-authorization", "missing scope mcp:admin: tools/call", 403),
    ],
)
async def test_a_refusal_names_its_stage_and_reason(
    gateway, tool, claims, authorization, stage, reason, status
):
    app, _, path = gateway
    headers = [("authorization", f"Bearer {token(**claims)}")] if authorization else []
    response = await request(app, body=call(tool), headers=headers)
    assert response.status_code == status
    line = line_for(app, path, response)
    assert (line["decision"], line["stage"], line["status"]) == ("deny", stage, status)
    assert line["reason"].startswith(reason)
    # The caller is only ever what a verified token says.
    verified = stage != "jwt-authentication"
    assert line["caller"] == ({"iss": ISSUER, "sub": "alice"} if verified else None)


@pytest.mark.parametrize(
    ("method", "target", "headers", "decision", "stage", "status"),
    [
        ("GET", "/.well-known/oauth-protected-resource/mcp", [], "allow", "oauth-endpoints", 200),
        ("POST", "/.well-known/oauth-protected-resource/mcp", [], "deny", "oauth-endpoints", 405),
        (
            "OPTIONS",
            "/mcp",
            [("origin", "https://a.example"), ("access-control-request-method", "POST")],
            "allow",
            "cors",
            204,
        ),
        ("GET", "/elsewhere", [], "deny", "routing", 404),
        ("POST", "/mcp", [("x-api-key", "a"), ("x-api-key", "b")], "deny", "owned-headers", 400),
        ("POST", "/mcp", [("content-type", "text/plain")], "deny", "entry-rules", 400),
    ],
)
async def test_every_kind_of_answer_is_decided(
    gateway, method, target, headers, decision, stage, status
):
    app, _, path = gateway
    response = await request(app, method, target, headers=headers)
    assert response.status_code == status
    line = line_for(app, path, response)
    assert (line["decision"], line["stage"], line["status"]) == (decision, stage, status)
    assert line["stage"] in STAGES


async def test_exactly_one_line_per_request(gateway):
    app, _, path = gateway
    ids = set()
    for tool in ("echo", "rm", "purge", "echo"):
        response = await request(
            app, body=call(tool), headers=[("authorization", f"Bearer {token()}")]
        )
        ids.add(response.headers["x-request-id"])
    written = lines(app, path)
    assert len(ids) == 4
    assert sorted(line["request_id"] for line in written) == sorted(ids)


async def test_no_token_code_or_secret_is_ever_written(gateway):
    app, _, path = gateway
    valid, expired = token(), token(ttl=-3600)
    secrets = [
        valid,
        expired,
        valid + "tampered",
        "Basic dXNlcjpodW50ZXIy",
        "hunter2-password",
        "client-s3cret-value",
        "code-4f9d1a",
        "cookie-7c1e",
        BACKEND_SECRET,
    ]
    for credential in (valid, expired, valid + "tampered"):
        await request(app, body=call("echo"), headers=[("authorization", f"Bearer {credential}")])
    await request(app, body=call("rm"), headers=[("authorization", f"Bearer {valid}")])
    await request(app, headers=[("authorization", "Basic dXNlcjpodW50ZXIy")])
    await request(app, headers=[("cookie", "__Host-mcp-consent=cookie-7c1e; sid=cookie-7c1e")])
    form = "grant_type=password&password=hunter2-password&client_secret=client-s3cret-value"
    await request(app, body=form.encode(), headers=[("authorization", f"Bearer {valid}")])
    await request(
        app,
        "POST",
        "/.well-known/oauth-authorization-server/mcp/client-registration",
        body=json.dumps({"client_secret": "client-s3cret-value", "code": "code-4f9d1a"}).encode(),
    )
    await request(app, "GET", "/mcp/oauth/callback?code=code-4f9d1a&state=x")
    written = path.read_text() if lines(app, path) else ""
    assert written.count("\n") == 9
    for secret in secrets:
        assert secret not in written


async def test_values_from_the_request_are_escaped_and_capped(gateway):
    app, _, path = gateway
    tool = 'x"\n{"decision": "allow"}' + "y" * 1000
    response = await request(app, body=call(tool), headers=[("authorization", f"Bearer {token()}")])
    written = path.read_text() if lines(app, path) else ""
    assert written.count("\n") == 1  # the newline in the name did not start a line
    line = line_for(app, path, response)
    assert line["decision"] == "deny"
    assert len(line["mcp"]["tool"]) == 256


async def test_audit_required_refuses_while_the_log_cannot_be_written(tmp_path, monkeypatch):
    directory = tmp_path / "logs"
    directory.mkdir()
    app, _, path = audited_app(directory, monkeypatch, audit_required=True)
    assert app.audit is not None
    sink = app.audit.sink
    headers = [("authorization", f"Bearer {token()}")]
    assert (await request(app, body=call("echo"), headers=headers)).status_code == 200
    sink.flush()
    resources = (directory / "resources.yaml").read_text()
    shutil.rmtree(directory)
    sink.reopen()
    sink.flush()  # the file cannot be opened: failing
    assert not sink.healthy
    refused = await request(app, body=call("echo"), headers=headers)
    assert refused.status_code == 503
    assert refused.json()["error"] == "audit_unavailable"
    directory.mkdir()
    (directory / "resources.yaml").write_text(resources)
    sink.flush()  # written again, the refusal's line with it
    assert sink.healthy
    line = line_for(app, path, refused)
    assert (line["decision"], line["stage"], line["status"]) == ("deny", "audit", 503)
    assert (await request(app, body=call("echo"), headers=headers)).status_code == 200
    metrics = {m.name: m.samples[0].value for m in sink.collect()}
    assert metrics["mcp_gateway_audit_write_errors"] >= 1
    assert metrics["mcp_gateway_audit_healthy"] == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--audit-log", "/nonexistent-dir/audit.log"], "--audit-log /nonexistent-dir/audit.log"),
        (["--audit-log", ""], "--audit-log needs a file path"),
        (["--audit-required"], "--audit-required needs --audit-log"),
    ],
)
def test_a_bad_audit_flag_is_one_line_naming_it(tmp_path, capsys, flags, message):
    resources = write(tmp_path, BASE + policy())
    code = main(["serve", "-f", str(resources), *flags])
    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith(f"error: {message}")
    assert error.count("\n") == 1


def test_on_a_federated_route_reaching_the_federation_stage_is_the_allow(gateway):
    app, _, _ = gateway
    assert app.audit is not None
    route = next(r for r in app.control.snapshot.listeners[8080] if r.match_value == "/mcp")
    two = dataclasses.replace(
        route,
        targets=(
            dataclasses.replace(route.targets[0], name="alpha"),
            dataclasses.replace(route.targets[0], name="beta"),
        ),
    )
    scope = {"method": "POST", "path": "/mcp", "headers": []}
    line = app.audit.begin(scope, "id-1", None)
    line.route = two
    line.record.decision, line.record.stage = "allow", "federation"
    fields = line.fields(200)
    assert (fields["decision"], fields["stage"]) == ("allow", "federation")
    assert fields["reason"].startswith("passed owned-headers, jwt-authentication")


async def test_a_dpop_bound_call_names_the_key_its_proof_was_signed_with(gateway):
    app, _, path = gateway
    bound = token(cnf={"jkt": JKT})
    url = "http://gw.example:8080/mcp"
    once = proof(bound, htu=url, iat=int(time.time())).decode()
    headers = [("authorization", f"DPoP {bound}"), ("dpop", once)]
    allowed = await request(app, body=call("echo"), headers=headers)
    assert allowed.status_code == 200
    assert line_for(app, path, allowed)["caller"] == {
        "iss": ISSUER,
        "sub": "alice",
        "dpop_jkt": JKT,
    }
    # The same proof again: refused, and the line says why (no caller: nothing was accepted).
    replayed = await request(app, body=call("echo"), headers=headers)
    line = line_for(app, path, replayed)
    assert (line["decision"], line["stage"], line["status"]) == ("deny", "jwt-authentication", 401)
    assert "this DPoP proof was used already" in line["reason"]
    assert line["caller"] is None
