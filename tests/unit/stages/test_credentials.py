"""What the backend receives in place of the caller's token (`dataplane/credentials.py`,
`controlplane/credentials.py`): secrets read at load and refused with the reason, the three
modes, spoofed copies of the gateway's headers removed, and the caller's identity header."""

from __future__ import annotations

import json

import pytest
from joserfc import jwt
from joserfc.errors import BadSignatureError
from joserfc.jwk import OctKey

from mcp_oauth_gateway.asgi import CLAIMS_KEY, PROVIDER_TOKEN_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.credentials import (
    SecretError,
    SecretScope,
    compile_credentials,
    read_secret,
)
from mcp_oauth_gateway.dataplane.credentials import BackendCredentials as Stage
from mcp_oauth_gateway.resources.models import BackendCredentialsSpec, SecretSource

from .harness import Inner, drive

CALLER = {
    CLAIMS_KEY: {"iss": "http://idp/", "sub": "alice", "groups": ["users"], "name": "Zoë"},
    TOKEN_KEY: "caller-token",
}
ENV = {"API_KEY": "k-123", "SIGNING": "s" * 32, "EMPTY": "", "TWO_LINES": "a\nb"}
FILES = SecretScope(environ=ENV)


def compiled(spec: dict, scope: SecretScope = FILES):
    problems: list[str] = []
    result = compile_credentials(BackendCredentialsSpec.model_validate(spec), problems, scope)
    assert not problems, problems
    assert result is not None
    return result


# --- secrets, at load -----------------------------------------------------------------------


def test_a_secret_file_is_read_without_its_trailing_newline(tmp_path):
    path = tmp_path / "api-key"
    path.write_text("k-123\n")
    assert read_secret(SecretSource(file=str(path))) == "k-123"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"env": "MISSING"}, "environment variable MISSING is not set"),
        ({"env": "EMPTY"}, "environment variable EMPTY is empty"),
        ({"env": "TWO_LINES"}, "holds control characters; a secret must be one line"),
        ({"file": "/nonexistent/key"}, "file /nonexistent/key cannot be read"),
    ],
)
def test_a_secret_that_cannot_be_used_says_where_it_was_looked_for(source, message):
    with pytest.raises(SecretError, match=message):
        read_secret(SecretSource.model_validate(source), FILES)


def test_an_unreadable_secret_makes_the_policy_invalid_naming_the_field():
    problems: list[str] = []
    spec = BackendCredentialsSpec.model_validate(
        {"secretHeader": {"header": "X-Api-Key", "value": {"env": "MISSING"}}}
    )
    assert compile_credentials(spec, problems, FILES) is None
    assert problems == [
        "spec.backend.credentials.secretHeader.value: environment variable MISSING is not set "
        "in the gateway's environment"
    ]


def test_secrets_never_show_in_the_compiled_policys_repr():
    exchange = compiled(
        {"tokenExchange": {"clientId": "gw", "clientSecret": {"env": "API_KEY"}, "audience": "b"}}
    )
    header = compiled({"secretHeader": {"header": "X-Api-Key", "value": {"env": "API_KEY"}}})
    assert "k-123" not in repr(exchange)
    assert "k-123" not in repr(header)


# --- the modes ------------------------------------------------------------------------------


async def test_a_secret_header_replaces_any_copy_the_client_sent():
    inner = Inner()
    stage = Stage(
        inner,
        compiled({"secretHeader": {"header": "X-Api-Key", "value": {"env": "API_KEY"}}}),
        "default/mcp",
    )
    spoofed = [(b"x-api-key", b"client-made"), (b"authorization", b"Bearer stolen")]
    response = await drive(stage, "POST", headers=spoofed, scope=CALLER, inner=inner)
    assert response.status == 200
    assert [v for k, v in inner.last.headers if k == b"x-api-key"] == [b"k-123"]
    assert inner.last.header(b"authorization") is None


async def test_passthrough_hands_the_verified_token_on():
    inner = Inner()
    stage = Stage(inner, compiled({"passthrough": True}), "default/mcp")
    await drive(stage, "POST", scope=CALLER, inner=inner)
    assert inner.last.header(b"authorization") == b"Bearer caller-token"


async def test_passthrough_hands_on_the_providers_token_a_broker_sealed_one_holds():
    # A Broker's DPoP-bound token is the gateway's own wrapper: the backend gets what it holds.
    inner = Inner()
    stage = Stage(inner, compiled({"passthrough": True}), "default/mcp")
    caller = {**CALLER, TOKEN_KEY: "mcpgw-dpop.sealed", PROVIDER_TOKEN_KEY: "provider-token"}
    await drive(stage, "POST", scope=caller, inner=inner)
    assert inner.last.header(b"authorization") == b"Bearer provider-token"


async def test_an_anonymous_caller_gets_no_token_passed_on():
    inner = Inner()
    stage = Stage(inner, compiled({"passthrough": True}), "default/mcp")
    await drive(stage, "POST", headers=[(b"authorization", b"Bearer x")], inner=inner)
    assert inner.last.header(b"authorization") is None


async def test_the_identity_header_is_plain_json_or_a_signed_jws():
    base = {"header": "X-Api-Key", "value": {"env": "API_KEY"}}
    plain = compiled(
        {
            "secretHeader": {
                **base,
                "identity": {"header": "X-User", "claims": ["sub", "name", "absent"]},
            }
        }
    )
    signed = compiled(
        {
            "secretHeader": {
                **base,
                "identity": {
                    "header": "X-User",
                    "claims": ["sub", "groups"],
                    "signingKey": {"env": "SIGNING"},
                },
            }
        }
    )
    inner = Inner()
    spoof = [(b"x-user", b'{"sub":"root"}')]
    await drive(Stage(inner, plain, "r"), "POST", headers=spoof, scope=CALLER, inner=inner)
    value = inner.last.header(b"x-user")
    assert value is not None
    assert value.isascii()
    assert json.loads(value) == {"sub": "alice", "name": "Zoë"}
    await drive(Stage(inner, signed, "r"), "POST", headers=spoof, scope=CALLER, inner=inner)
    token = inner.last.header(b"x-user")
    assert token is not None
    decoded = jwt.decode(token.decode(), OctKey.import_key(b"s" * 32))
    assert decoded.claims["sub"] == "alice"
    assert decoded.claims["groups"] == ["users"]
    assert decoded.claims["exp"] - decoded.claims["iat"] == 60
    with pytest.raises(BadSignatureError):
        jwt.decode(token.decode(), OctKey.import_key(b"x" * 32))


def identity_spec(**identity: object) -> dict:
    """A secret header with an identity header `X-User` of these settings."""
    return {
        "secretHeader": {
            "header": "X-Api-Key",
            "value": {"env": "API_KEY"},
            "identity": {"header": "X-User", **identity},
        }
    }


async def test_alice_at_two_providers_reaches_the_backend_as_two_identities():
    """`sub` is unique only within its issuer: by default the identity names both."""
    other = {**CALLER, CLAIMS_KEY: {**CALLER[CLAIMS_KEY], "iss": "http://other/"}}
    inner = Inner()
    seen = []
    for caller in (CALLER, other):
        await drive(Stage(inner, compiled(identity_spec()), "r"), scope=caller, inner=inner)
        seen.append(json.loads(inner.last.header(b"x-user") or b""))
    assert seen == [
        {"iss": "http://idp/", "sub": "alice"},
        {"iss": "http://other/", "sub": "alice"},
    ]
    signed = compiled(identity_spec(signingKey={"env": "SIGNING"}))
    await drive(Stage(inner, signed, "r"), scope=other, inner=inner)
    token = inner.last.header(b"x-user")
    assert token is not None
    claims = jwt.decode(token.decode(), OctKey.import_key(b"s" * 32)).claims
    assert (claims["iss"], claims["sub"]) == ("http://other/", "alice")


async def test_a_policy_whose_only_problem_is_a_secret_fails_closed(tmp_path):
    """Regression: the secret's problem was found after the policy was marked valid, so the
    route was built as if it were, without its keyset (a crash in controller mode)."""
    import httpx

    from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
    from mcp_oauth_gateway.resources import load_paths
    from mcp_oauth_gateway.serving.app import GatewayApp
    from unit.resources_fixture import BASE, policy, write

    text = (
        BASE
        + policy()
        + (
            "  backend:\n    credentials:\n      secretHeader:\n        header: X-Api-Key\n"
            "        value: {env: NOT_SET_IN_THIS_TEST}\n"
        )
    )
    snapshot = build_snapshot(load_paths([write(tmp_path, text)]))
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.invalid is not None
    assert "NOT_SET_IN_THIS_TEST" in route.policy.invalid
    app = GatewayApp(ControlPlane(snapshot))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw.example:8080"
    ) as client:
        response = await client.post("/mcp", json={})
    assert response.status_code == 503
    assert response.json()["error"] == "policy_invalid"
