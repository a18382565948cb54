"""The CEL authorization stage (`dataplane/authz.py`) on its own: Allow / Deny / Require over the
claims (and the request), the 403 it answers, what counts as false, and the per-token cache.

Covered elsewhere, not repeated: which claims a rule reads (`referenced_claims`) and CEL seeing
every copy of a repeated header (`tests/unit/test_dataplane.py`)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.snapshot import CompiledAuthorization
from mcp_oauth_gateway.dataplane import authz as authz_module
from mcp_oauth_gateway.dataplane.authz import CelAuthorization

from .harness import Inner, drive

ADMIN = '"admin" in jwt.groups'
ALICE = 'jwt.sub == "alice"'
# A claim nobody has: evaluating it is an error, never true.
MISSING = 'jwt.department == "ops"'


def authz(inner: Inner, action: str, *rules: str) -> CelAuthorization:
    compiled = CompiledAuthorization(action, tuple(compile_expression(r) for r in rules))  # type: ignore[arg-type]
    return CelAuthorization(inner, compiled, "default/policy")


def claims(sub: str = "alice", groups: tuple[str, ...] = ("users",)) -> dict[str, object]:
    return {CLAIMS_KEY: {"sub": sub, "groups": list(groups)}}


@pytest.mark.parametrize(
    ("action", "rules", "caller", "allowed"),
    [
        ("Allow", (ADMIN, ALICE), claims("alice"), True),  # any one rule is enough
        ("Allow", (ADMIN, ALICE), claims("bob"), False),
        ("Deny", (ADMIN, 'jwt.sub == "mallory"'), claims("alice"), True),
        ("Deny", (ADMIN, 'jwt.sub == "mallory"'), claims("mallory"), False),  # any one rule denies
        ("Require", (ADMIN, ALICE), claims("alice", ("admin",)), True),
        ("Require", (ADMIN, ALICE), claims("alice"), False),  # every rule must hold
        ("Require", (ADMIN, ALICE), claims("bob", ("admin",)), False),
    ],
)
async def test_the_action_decides_how_rules_combine(action, rules, caller, allowed):
    inner = Inner()
    response = await drive(authz(inner, action, *rules), "POST", scope=caller, inner=inner)
    assert response.reached is allowed
    assert response.status == (200 if allowed else 403)


@pytest.mark.parametrize(
    ("action", "description"),
    [
        ("Allow", "the token's claims satisfy none of the authorization rules"),
        ("Deny", "the token's claims match a deny rule"),
        ("Require", "the token's claims do not satisfy every required rule"),
    ],
)
async def test_a_refusal_is_403_naming_the_action_and_the_policy(action, description):
    rule = ADMIN if action != "Deny" else ALICE
    response = await drive(authz(Inner(), action, rule), "POST", scope=claims("alice"))
    assert response.status == 403
    assert response.json() == {
        "error": "forbidden",
        "error_description": f"{description} of GatewayPolicy default/policy",
    }
    assert response.header(b"content-type") == b"application/json"


@pytest.mark.parametrize(
    ("action", "rules", "allowed"),
    [
        ("Allow", (MISSING,), False),
        ("Allow", (MISSING, ALICE), True),  # the erroring rule is false, the other still counts
        ("Require", (ALICE, MISSING), False),
        # Under Deny an erroring rule denies: a rule that cannot be evaluated never lets a request
        # through (fail closed).
        ("Deny", (MISSING,), False),
        ("Deny", (MISSING, '"nobody" == jwt.sub'), False),
    ],
)
async def test_an_erroring_rule_never_lets_a_request_through(action, rules, allowed):
    response = await drive(authz(Inner(), action, *rules), "POST", scope=claims("alice"))
    assert response.status == (200 if allowed else 403)


@pytest.mark.parametrize("rule", ["jwt.sub", "size(jwt.groups)", '"yes"'])
async def test_a_rule_that_is_not_a_boolean_is_false(rule):
    response = await drive(authz(Inner(), "Allow", rule), "POST", scope=claims("alice"))
    assert response.status == 403


async def test_an_anonymous_caller_is_an_empty_jwt_and_a_denial_asks_for_a_token():
    allow = await drive(authz(Inner(), "Allow", "size(jwt) == 0"), "POST")
    deny = await drive(authz(Inner(), "Allow", ALICE), "POST")
    # Optional and Permissive modes let anonymous callers reach the rules; a token might let
    # them in, so the denial is a 401 (MCP clients then sign in), not a 403.
    assert (allow.status, deny.status) == (200, 401)
    assert deny.header(b"www-authenticate") == b"Bearer"
    assert deny.json()["error"] == "invalid_token"
    signed_in = await drive(
        authz(Inner(), "Allow", "size(jwt) == 0"), "POST", scope={CLAIMS_KEY: {"sub": "a"}}
    )
    assert signed_in.status == 403


async def test_a_rule_over_the_whole_jwt_sees_every_claim():
    caller = {CLAIMS_KEY: {"sub": "alice", "groups": [], "email": "a@example.com"}}
    response = await drive(authz(Inner(), "Allow", "size(jwt) == 3"), "POST", scope=caller)
    assert response.status == 200


@pytest.mark.parametrize(
    ("method", "path", "tenant", "allowed"),
    [
        ("POST", "/mcp", b"acme", True),
        ("GET", "/mcp", b"acme", False),
        ("POST", "/mcp/admin", b"acme", False),
        ("POST", "/mcp", b"other", False),
    ],
)
async def test_rules_read_the_request(method, path, tenant, allowed):
    rule = (
        'request.method == "POST" && request.path == "/mcp" && '
        'request.headers["x-tenant"] == "acme" && request.host == "gw.test" && '
        'request.scheme == "http"'
    )
    inner = Inner()
    response = await drive(
        authz(inner, "Allow", rule),
        method,
        path,
        inner=inner,
        headers=[(b"x-tenant", tenant)],
        scope=claims(),
    )
    assert response.reached is allowed


async def test_the_request_passes_inward_unchanged():
    inner = Inner()
    headers = [(b"authorization", b"Bearer t"), (b"x-tenant", b"acme")]
    await drive(
        authz(inner, "Allow", ALICE),
        "POST",
        headers=headers,
        body=[b"{", b"}"],
        scope=claims(),
        inner=inner,
    )
    assert inner.last.headers == [(b"host", b"gw.test"), *headers]
    assert (inner.last.body, inner.last.body_messages) == (b"{}", 2)


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the rule evaluations the stage makes."""
    made = [0]
    real = authz_module.decide

    def decide(rules, activation):
        made[0] += 1
        return real(rules, activation)

    monkeypatch.setattr(authz_module, "decide", decide)
    return made


async def test_decisions_over_named_claims_are_remembered_per_claim_values(monkeypatch):
    """Rules that read named claims decide the same for the same values, whichever token
    carries them (a new token per request costs no evaluation); other values, or the same
    values with another JSON type, are decided anew."""
    made = counting(monkeypatch)
    stage = authz(Inner(), "Allow", ADMIN)
    admin = {"groups": ["admin"], "sub": "alice", "jti": "1"}
    first = await drive(stage, scope={TOKEN_KEY: "t1", CLAIMS_KEY: admin})
    other_token = await drive(
        stage, scope={TOKEN_KEY: "t2", CLAIMS_KEY: {**admin, "sub": "bob", "jti": "2"}}
    )
    assert (first.status, other_token.status, made[0]) == (200, 200, 1)
    users = await drive(stage, scope={TOKEN_KEY: "t3", CLAIMS_KEY: {"groups": ["users"]}})
    assert (users.status, made[0]) == (403, 2)
    typed = authz(Inner(), "Allow", "jwt.level == 1")
    one = await drive(typed, scope={TOKEN_KEY: "a", CLAIMS_KEY: {"level": 1}})
    text = await drive(typed, scope={TOKEN_KEY: "b", CLAIMS_KEY: {"level": "1"}})
    true = await drive(typed, scope={TOKEN_KEY: "c", CLAIMS_KEY: {"level": True}})
    assert (one.status, text.status, true.status) == (200, 403, 403)


async def test_rules_over_the_whole_jwt_are_remembered_per_token(monkeypatch):
    made = counting(monkeypatch)
    stage = authz(Inner(), "Allow", '"admin" in jwt["groups"] && size(jwt) > 0')
    admin = {TOKEN_KEY: "t1", CLAIMS_KEY: {"groups": ["admin"]}}
    assert (await drive(stage, scope=admin)).status == 200
    assert (await drive(stage, scope=admin)).status == 200
    other = await drive(stage, scope={TOKEN_KEY: "t2", CLAIMS_KEY: {"groups": ["admin"]}})
    assert (other.status, made[0]) == (200, 2)


async def test_decisions_that_read_the_request_are_made_per_request():
    stage = authz(Inner(), "Allow", 'request.method == "GET"')
    scope = {TOKEN_KEY: "t1", **claims()}
    get = await drive(stage, "GET", scope=scope)
    post = await drive(stage, "POST", scope=scope)
    assert (get.status, post.status) == (200, 403)
