"""The audit trail under attack and failure, through the whole gateway in process
(`audit_support`): a line written exactly once even when writing it fails, request ids that a
client cannot forge, and no credential written wherever a request or a provider puts one."""

from __future__ import annotations

import os

import pytest

from mcp_oauth_gateway import audit
from mcp_oauth_gateway.asgi import AUDIT_KEY
from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.dataplane.routing import RouteEntry, RouteTable
from mcp_oauth_gateway.serving.app import new_request_id
from unit.audit_support import ISSUER, audited_app, call, line_for, lines, request, token
from unit.resources_fixture import BASE, policy, write
from unit.stages.harness import drive


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    return audited_app(tmp_path, monkeypatch)


async def test_a_line_whose_writing_fails_is_not_written_twice(gateway, monkeypatch):
    app, _, _ = gateway
    assert app.audit is not None
    tried: list[dict[str, object]] = []

    def broken(fields: dict[str, object], span: object = None) -> None:
        tried.append(fields)
        raise RuntimeError("sink broke")

    monkeypatch.setattr(app.audit.sink, "write", broken)
    headers = [("authorization", f"Bearer {token()}")]
    response = await request(app, body=call("echo"), headers=headers)
    assert response.status_code == 200
    assert len(tried) == 1
    assert app.audit.sink.write_errors == 1


# A JWT's shape: base64url header and payload, and the signature that makes it a credential.
SHORT_JWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0"
SIGNATURE = "c2lnbmF0dXJlLWtlcHQtc2VjcmV0LXZhbHVl"


async def test_a_jwt_in_a_path_or_a_tool_name_is_written_without_its_signature(gateway):
    app, _, path = gateway
    jwt = f"{SHORT_JWT}.{SIGNATURE}"
    headers = [("authorization", f"Bearer {token()}")]
    in_path = await request(app, path=f"/mcp/{jwt}", body=call("echo"), headers=headers)
    as_tool = await request(app, body=call(jwt), headers=headers)
    written = path.read_text() if lines(app, path) else ""
    assert SIGNATURE not in written
    assert line_for(app, path, in_path)["path"] == f"/mcp/{SHORT_JWT}.[signature removed]"
    denied = line_for(app, path, as_tool)
    # Still plain which item was asked for: only the part that makes it a credential is gone.
    assert denied["mcp"]["tool"] == f"{SHORT_JWT}.[signature removed]"
    assert denied["reason"].startswith(f"tool '{SHORT_JWT}.[signature removed]'")


@pytest.mark.parametrize(
    "text",
    [
        "mcpgw.eyJuIjoiYSJ9.c2ln",  # a Broker client id: two parts, not a JWT
        "tools/call",
        "eyJ alone",
    ],
)
def test_text_that_is_no_jwt_is_written_as_it_is(text):
    assert audit.capped(text) == text


async def test_a_client_cannot_choose_the_request_id_of_its_audit_line(gateway):
    app, upstream, path = gateway
    headers = [("authorization", f"Bearer {token()}"), ("x-request-id", "victims-id")]
    first = await request(app, body=call("echo"), headers=headers)
    second = await request(app, body=call("echo"), headers=headers)
    ids = [response.headers["x-request-id"] for response in (first, second)]
    assert "victims-id" not in ids
    assert ids[0] != ids[1]
    assert line_for(app, path, second)["request_id"] == ids[1]
    assert upstream.last.header(b"x-request-id") == ids[1].encode()


async def test_behind_a_trusted_proxy_its_request_id_is_kept(tmp_path, monkeypatch):
    app, _, path = audited_app(tmp_path, monkeypatch, trust_forwarded=True)
    headers = [("authorization", f"Bearer {token()}"), ("x-request-id", "proxy-id-1")]
    response = await request(app, body=call("echo"), headers=headers)
    assert response.headers["x-request-id"] == "proxy-id-1"
    assert line_for(app, path, response)["request_id"] == "proxy-id-1"


def _id_of_a_forked_child() -> str:
    """The first request id a child forked now hands out (as a `--workers N` worker is)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer and leave at once
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.close(write)
    try:
        return os.read(read, 100).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_forked_workers_never_hand_out_the_same_request_id():
    parent = new_request_id()
    first, second = _id_of_a_forked_child(), _id_of_a_forked_child()
    assert len({parent, first, second}) == 3
    assert len({parent[:16], first[:16], second[:16]}) == 3


@pytest.mark.parametrize(
    ("status", "decision", "stage"),
    [(0, "deny", "connection"), (500, "deny", "gateway"), (200, "allow", "gateway")],
)
def test_every_line_names_a_stage_even_when_none_decided(status, decision, stage):
    # The client went away before any stage decided; the gateway failed; (no such answer yet).
    found = audit.decision_of(audit.AuditRecord(), status)
    assert found[:2] == (decision, stage)
    assert found[2]


async def test_a_client_gone_before_any_stage_decided_is_a_line_naming_the_connection(gateway):
    app, _, path = gateway
    headers = [
        (b"host", b"gw.example:8080"),
        (b"authorization", f"Bearer {token()}".encode()),
        (b"content-type", b"application/json"),
    ]
    gone = await drive(
        app,
        "POST",
        "/mcp",
        headers=headers,
        host=None,
        disconnect_first=True,
        scope={"server": ("gw.example", 8080)},
    )
    assert gone.status == 0
    (line,) = lines(app, path)
    assert (line["decision"], line["stage"], line["status"]) == ("deny", "connection", 0)
    assert line["caller"] == {"iss": ISSUER, "sub": "alice"}


def test_serve_refuses_an_audit_file_anyone_may_write(tmp_path, capsys):
    resources = write(tmp_path, BASE + policy())
    audit_file = tmp_path / "audit.log"
    audit_file.touch()
    audit_file.chmod(0o666)
    code = main(["serve", "-f", str(resources), "--audit-log", str(audit_file)])
    error = capsys.readouterr().err
    assert code == 2
    assert error.startswith(f"error: --audit-log {audit_file}: every user of this machine can")


def test_two_long_resource_uris_that_differ_at_the_end_are_told_apart():
    base = "file:///srv/share/" + "deep/" * 60
    records = [audit.AuditRecord() for _ in range(2)]
    for record, leaf in zip(records, ("public.txt", "payroll.xlsx"), strict=True):
        audit.mcp_request({AUDIT_KEY: record}, "resources/read", "resource", base + leaf)
    shown = [record.mcp["resource"] for record in records if record.mcp is not None]
    assert shown[0].endswith("public.txt")
    assert shown[1].endswith("payroll.xlsx")
    assert all(len(uri) == audit.MAX_VALUE for uri in shown)


async def test_a_request_the_gateway_fails_on_is_a_deny_whatever_a_stage_allowed(gateway):
    app, _, path = gateway

    async def failing(scope, receive, send):
        audit.allow(scope, "reverse-proxy")  # a stage let it through, then the gateway failed
        raise ConnectionError("redis://:hunter2@cache:6379 is unreachable")

    app.routes.by_port = {
        port: RouteTable([RouteEntry(entry.route, failing) for entry in table.entries])
        for port, table in app.tables.items()
    }
    response = await request(app, body=call("echo"))
    assert response.status_code == 500
    line = line_for(app, path, response)
    assert (line["decision"], line["stage"], line["status"]) == ("deny", "gateway", 500)
    assert line["reason"] == "the gateway failed to handle this request: ConnectionError"


class _Context:
    def __init__(self, trace_id: int):
        self.trace_id = trace_id


class _Span:
    def __init__(self, trace_id: int):
        self.context = _Context(trace_id)

    def get_span_context(self) -> _Context:
        return self.context


@pytest.mark.parametrize(
    ("trace_id", "written"), [(0, None), (0xAB, "000000000000000000000000000000ab")]
)
def test_a_span_without_a_valid_trace_id_writes_none(gateway, trace_id, written):
    app, _, _ = gateway
    assert app.audit is not None
    scope = {"method": "POST", "path": "/mcp", "headers": []}
    line = app.audit.begin(scope, "id-1", _Span(trace_id))
    assert line.fields(401)["trace_id"] == written


class _Seen:
    """Stands in for the JWT pattern: records the length of every text it is run on."""

    def __init__(self, pattern):
        self.pattern = pattern
        self.lengths: list[int] = []

    def sub(self, replacement, text):
        self.lengths.append(len(text))
        return self.pattern.sub(replacement, text)


def test_a_huge_value_is_cut_before_it_is_searched_for_jwts(monkeypatch):
    # A tool name of a megabyte, all `eyJ`: searched whole, it would cost the event loop
    # seconds (the search restarts at every `eyJ`); it is cut to its cap first.
    seen = _Seen(audit._JWT)
    monkeypatch.setattr(audit, "_JWT", seen)
    huge = "eyJ" * 350_000
    record = audit.AuditRecord()
    audit.mcp_request({AUDIT_KEY: record}, "tools/call", "tool", huge)
    audit.client({AUDIT_KEY: record}, huge + ".sig")
    assert audit.capped(huge, audit.MAX_REASON).endswith("…")
    assert seen.lengths
    assert max(seen.lengths) <= max(audit.MAX_REASON, audit.TAIL_ROOM)


def test_a_jwt_cut_by_the_cap_still_loses_what_it_kept_of_its_signature():
    jwt = f"{SHORT_JWT}.{SIGNATURE * 10}"
    assert SIGNATURE[:20] not in audit.capped("tool " + jwt)
    # A JWT longer than an identifier's cap: its head kept, its end (the signature) not.
    assert SIGNATURE[-20:] not in audit.capped_id(f"{SHORT_JWT}{'A' * 300}.{SIGNATURE}")
