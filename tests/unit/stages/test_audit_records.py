"""What each refusing stage records in the request's audit record (`audit.py`), driven through
the stage harness: the stage's name as `serving.stages.PIPELINE` spells it, a reason an auditor
can read (the rule's source, the missing scope, "token has expired"), and never the token.

The line written from the record (caller, route, request id, status) is covered through the
whole gateway in `tests/unit/test_audit_trail.py`."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import AUDIT_KEY, CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.audit import Answering, AuditRecord
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.controlplane.snapshot import (
    CompiledAuthorization,
    CompiledCors,
    CompiledProvider,
    CompiledRateLimit,
    KeysetSource,
)
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from mcp_oauth_gateway.dataplane.authz import CelAuthorization
from mcp_oauth_gateway.dataplane.cors import CorsFilter
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization
from mcp_oauth_gateway.dataplane.ratelimit import RateLimit
from mcp_oauth_gateway.dataplane.scopes import RequiredScopes
from mcp_oauth_gateway.serving.stages import PIPELINE
from support import mint
from unit.tokens_support import ISSUER, KEY, KEYSET, bearer, compiled_mcp, good

from .harness import Inner, drive
from .mcp_authz_support import USER
from .mcp_authz_support import stage as mcp_stage
from .scopes_support import PRM, caller, scopes

STAGES = {stage.name for stage in PIPELINE}
PROVIDER = CompiledProvider(
    ISSUER,
    frozenset({"mcp-public"}),
    KeysetSource("inline", 0.0),
    "http://idp/.well-known/openid-configuration",
)


async def audited(app, *args, scope=None, **kwargs) -> tuple[AuditRecord, int]:
    """Drive one request with an audit record in its scope; the record and the status."""
    record = AuditRecord()
    response = await drive(app, *args, scope={AUDIT_KEY: record, **(scope or {})}, **kwargs)
    return record, response.status


def denied_by(record: AuditRecord, stage: str) -> str:
    assert (record.decision, record.stage) == ("deny", stage)
    assert stage in STAGES
    assert record.reason
    return record.reason


def authn(inner: Inner) -> JwtAuthentication:
    return JwtAuthentication(inner, [(PROVIDER, InlineKeyset(KEYSET))], compiled_mcp(None), False)  # type: ignore[list-item]


async def test_no_token_is_denied_by_jwt_authentication():
    record, status = await audited(authn(Inner()), "POST")
    assert status == 401
    assert denied_by(record, "jwt-authentication") == "missing bearer token"


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        (good(exp=1), "token has expired"),
        (good(iss="http://elsewhere/"), "iss 'http://elsewhere/' is not the expected issuer"),
    ],
)
async def test_a_refused_token_is_named_by_its_check_and_never_written(claims, reason):
    token = mint(KEY, claims)
    record, status = await audited(authn(Inner()), "POST", headers=[bearer(token)])
    assert status == 401
    why = denied_by(record, "jwt-authentication")
    assert why.startswith(reason)
    assert token not in why


async def test_a_malformed_token_quoted_by_its_error_is_not_written():
    token = "eyJhbGciOiJub25lIn0.c2VjcmV0LXBheWxvYWQ"  # an unsigned token
    record, _ = await audited(authn(Inner()), "POST", headers=[bearer(token)])
    assert token not in denied_by(record, "jwt-authentication")


async def test_a_verified_token_passes_without_a_decision():
    inner = Inner()
    record, status = await audited(authn(inner), "POST", headers=[bearer(mint(KEY, good()))])
    assert status == 200
    assert record.decision is None  # the answering stage decides `allow`


async def test_a_missing_route_scope_is_named():
    stage = RequiredScopes(Inner(), scopes(required=["mcp:tools", "mcp:admin"]), PRM)
    record, status = await audited(stage, "POST", scope=caller("mcp:tools"))
    assert status == 403
    assert denied_by(record, "required-scopes").startswith("missing scope mcp:admin")


@pytest.mark.parametrize(
    ("action", "rules", "groups", "reason"),
    [
        ("Allow", ('"admin" in jwt.groups',), ["users"], 'no Allow rule holds (`"admin" in'),
        ("Deny", ('"guests" in jwt.groups',), ["guests"], 'Deny rule `"guests" in jwt.groups`'),
        ("Require", ('"a" in jwt.groups', '"b" in jwt.groups'), ["a"], 'Require rule `"b" in'),
        ("Require", ("jwt.department == 'ops'",), ["a"], "Require rule `jwt.department == 'ops'`"),
    ],
)
async def test_a_cel_refusal_names_the_rule_that_decided(action, rules, groups, reason):
    compiled = CompiledAuthorization(action, tuple(compile_expression(r) for r in rules))
    stage = CelAuthorization(Inner(), compiled, "default/p")
    claims = {CLAIMS_KEY: {"sub": "alice", "groups": groups}, TOKEN_KEY: f"t-{action}-{groups}"}
    record, status = await audited(stage, "POST", scope=claims)
    assert status == 403
    assert denied_by(record, "cel-authorization").startswith(reason)


async def test_an_unevaluable_rule_says_so():
    compiled = CompiledAuthorization("Deny", (compile_expression("jwt.level > 3"),))
    stage = CelAuthorization(Inner(), compiled, "default/p")
    record, _ = await audited(stage, "POST", scope={CLAIMS_KEY: {"sub": "a"}, TOKEN_KEY: "t"})
    assert "could not be evaluated (fail closed)" in denied_by(record, "cel-authorization")


class Empty:
    async def take(self, key: str) -> float:
        return 2.5


async def test_an_exhausted_rate_limit_is_named_with_its_policy():
    limit = CompiledRateLimit(compile_expression("jwt.sub"), 10, 1.0, None)
    stage = RateLimit(Inner(), limit, Empty(), "default/p")
    record, status = await audited(stage, "POST", scope={CLAIMS_KEY: {"sub": "alice"}})
    assert status == 429
    assert "rate limit of GatewayPolicy default/p exhausted" in denied_by(record, "rate-limit")


async def test_a_denied_tool_names_the_tool_and_the_rule_and_records_the_call():
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm"}}'
    record, status = await audited(mcp_stage(Inner()), "POST", body=body, scope=USER)
    assert status == 200  # a JSON-RPC error, so the client's session lives on
    reason = denied_by(record, "mcp-authorization")
    assert reason.startswith("tool 'rm': no Allow rule holds")
    assert record.mcp == {"method": "tools/call", "tool": "rm"}


async def test_an_allowed_call_names_the_rule_that_let_it_through_without_a_decision():
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}'
    record, status = await audited(mcp_stage(Inner()), "POST", body=body, scope=USER)
    assert (status, record.decision) == (200, None)  # the answering stage decides `allow`
    assert record.mcp == {"method": "tools/call", "tool": "echo"}
    assert record.notes is not None
    assert record.notes[0].startswith("tool 'echo': Allow rule `\"admin\" in jwt.groups || (")


async def test_on_a_federated_backend_the_call_names_its_target():
    rules = CompiledAuthorization("Allow", (compile_expression('mcp.target == "alpha"', mcp=True),))
    stage = McpAuthorization(Inner(), rules, 1 << 20, None, None, ("alpha", "beta"))
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"beta_rm"}}'
    record, status = await audited(stage, "POST", body=body, scope=USER)
    assert status == 200
    assert record.mcp == {"method": "tools/call", "tool": "beta_rm", "target": "beta"}
    assert denied_by(record, "mcp-authorization").startswith(
        "tool 'beta_rm': no Allow rule holds (`mcp.target == \"alpha\"`)"
    )


async def test_an_unreadable_mcp_body_is_denied():
    record, status = await audited(mcp_stage(Inner()), "POST", body=b"{nope", scope=USER)
    assert status == 400
    assert denied_by(record, "mcp-authorization").startswith("unreadable MCP request")


async def test_an_item_scope_refusal_is_the_mcp_stage_s():
    rules = CompiledAuthorization("Allow", (compile_expression("true", mcp=True),))
    needed = scopes(items=[('mcp.tool.name == "purge"', ["mcp:admin"])])
    stage = McpAuthorization(Inner(), rules, 1 << 20, needed, PRM)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"purge"}}'
    record, status = await audited(stage, "POST", body=body, scope=caller("mcp:tools"))
    assert status == 403
    assert denied_by(record, "mcp-authorization").startswith("missing scope mcp:admin")


def cors() -> CompiledCors:
    return CompiledCors(
        False, frozenset({"https://app.example"}), False, "GET, POST", "", False, "", "600"
    )


@pytest.mark.parametrize(
    ("origin", "decision", "status"),
    [(b"https://app.example", "allow", 204), (b"https://evil.example", "deny", 403)],
)
async def test_a_preflight_is_decided_by_cors(origin, decision, status):
    headers = [(b"origin", origin), (b"access-control-request-method", b"POST")]
    record, answered = await audited(CorsFilter(Inner(), cors()), "OPTIONS", headers=headers)
    assert (record.decision, record.stage, answered) == (decision, "cors", status)


async def test_reaching_the_answering_stage_is_allow_unless_it_refuses():
    record, _ = await audited(Answering("reverse-proxy", Inner()), "POST")
    assert (record.decision, record.stage) == ("allow", "reverse-proxy")
    # A refusal recorded before stands.
    record = AuditRecord(decision="deny", stage="rate-limit", reason="r")
    await drive(Answering("reverse-proxy", Inner()), "POST", scope={AUDIT_KEY: record})
    assert (record.decision, record.stage) == ("deny", "rate-limit")


async def test_without_a_record_the_stages_record_nothing():
    # The audit trail off: no record in the scope, and every stage still answers as before.
    response = await drive(authn(Inner()), "POST")
    assert response.status == 401


async def test_a_token_refused_in_permissive_mode_is_noted_and_the_caller_goes_on():
    stage = JwtAuthentication(
        Inner(),
        [(PROVIDER, InlineKeyset(KEYSET))],  # type: ignore[list-item]
        compiled_mcp(None),
        False,
        mode="Permissive",
    )
    token = mint(KEY, good(exp=1))
    record, status = await audited(stage, "POST", headers=[bearer(token)])
    assert (status, record.decision) == (200, None)
    assert record.notes == [
        "token not accepted (token has expired); went on anonymously (Permissive)"
    ]
