"""The jwt-bearer grant of workloadIdentity, through a whole gateway in process: what an
assertion must be to get a token, what the token says, and that the route treats it as any
caller's token (its JWT stage, its CEL rules)."""

from __future__ import annotations

import base64
import time

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.dataplane.tokens import TokenRules, verify_token
from mcp_oauth_gateway.serving.options import ServeOptions
from support import new_key, unsigned, unverified_claims
from unit.stages.harness import drive

from .workload_support import (
    AUDIENCE,
    CLUSTER,
    ISSUED_BY,
    JWT_BEARER,
    RESOURCE,
    audit_lines,
    call,
    exchange,
    gateway,
    policy_yaml,
    sa_claims,
    sa_token,
    svid,
    user_token,
)


def refused(response, error: str, *words: str) -> None:
    """A 400 JSON error `error` whose description says each of `words`."""
    assert response.status == 400, (response.status, response.body)
    body = response.json()
    assert body["error"] == error, body
    for word in words:
        assert word in body["error_description"], body


async def test_a_service_account_token_gets_an_access_token_the_route_accepts(tmp_path):
    app, upstream = gateway(tmp_path)
    assertion_claims = sa_claims(ttl=600)
    response = await exchange(app, sa_token(assertion_claims), resource=RESOURCE)
    assert response.status == 200, response.body
    answer = response.json()
    assert answer["token_type"] == "Bearer"
    assert "refresh_token" not in answer
    assert answer["scope"] == "mcp:tools mcp:read"
    assert 590 <= answer["expires_in"] <= 600
    claims = unverified_claims(answer["access_token"])
    assert claims["iss"] == ISSUED_BY
    assert claims["aud"] == RESOURCE
    assert claims["sub"] == "system:serviceaccount:agents:reader"
    assert claims["workload_issuer"] == CLUSTER
    assert claims["scope"] == "mcp:tools mcp:read"
    # Never outlives the assertion; copies none of its other claims.
    assert claims["exp"] <= assertion_claims["exp"]
    assert "kubernetes.io" not in claims
    reached = await call(app, answer["access_token"])
    assert reached.status == 200, reached.body
    assert len(upstream.sent) == 1


async def test_the_issued_token_verifies_with_the_published_jwks_and_nothing_else(tmp_path):
    app, _ = gateway(tmp_path)
    token = (await exchange(app, sa_token(sa_claims()))).json()["access_token"]
    document = (await drive(app, "GET", "/mcp/oauth/jwks")).json()
    keyset = parse_jwks(document, version=1)
    rules = TokenRules(issuer=ISSUED_BY, audiences=frozenset({RESOURCE}))
    claims = verify_token(token, keyset, rules, time.time())
    assert claims["sub"] == "system:serviceaccount:agents:reader"
    [published] = document["keys"]
    assert published["alg"] == "ES256"
    assert published["kty"] == "EC"
    assert "d" not in published  # the public half only
    # A gateway with another store secret (another deployment) signs with another key.
    (tmp_path / "other").mkdir()
    other, _ = gateway(tmp_path / "other")
    theirs = (await drive(other, "GET", "/mcp/oauth/jwks")).json()
    assert theirs["keys"][0]["kid"] != published["kid"]
    assert (await call(other, token)).status == 401


async def test_the_metadata_lists_the_grant_and_the_key(tmp_path):
    app, _ = gateway(tmp_path)
    response = await drive(app, "GET", "/.well-known/oauth-authorization-server/mcp")
    document = response.json()
    assert JWT_BEARER in document["grant_types_supported"]
    assert document["jwks_uri"] == "http://gw.test/mcp/oauth/jwks"


async def test_a_spiffe_svid_of_the_second_issuer_gets_a_token_without_scopes(tmp_path):
    app, _ = gateway(tmp_path)
    response = await exchange(app, svid())
    assert response.status == 200, response.body
    answer = response.json()
    assert "scope" not in answer
    claims = unverified_claims(answer["access_token"])
    assert claims["sub"] == "spiffe://example.org/agent"
    assert claims["workload_issuer"] == "https://spire.example"
    assert "scope" not in claims


def _expired() -> dict[str, object]:
    claims = sa_claims()
    claims["iat"] = claims["nbf"] = int(time.time()) - 1000
    claims["exp"] = int(time.time()) - 120
    return claims


def _later() -> dict[str, object]:
    claims = sa_claims()
    claims["nbf"] = int(time.time()) + 600
    return claims


@pytest.mark.parametrize(
    ("assertion", "words"),
    # Made when the test runs, not when the module is collected: their times are relative.
    [
        (lambda: sa_token(sa_claims(audience="https://kubernetes.default.svc")), ["aud", AUDIENCE]),
        (lambda: sa_token(sa_claims(audience=["other-service", "vault"])), ["aud"]),
        (lambda: sa_token({**sa_claims(), "iss": "https://other-cluster.example"}), ["iss"]),
        (lambda: sa_token({**sa_claims(), "iss": CLUSTER + "/"}), ["iss", "not one of"]),
        (lambda: sa_token(_expired()), ["expired"]),
        (lambda: sa_token(_later()), ["not yet valid"]),
        (lambda: sa_token({k: v for k, v in sa_claims().items() if k != "exp"}), ["exp"]),
        (lambda: sa_token({k: v for k, v in sa_claims().items() if k != "sub"}), ["sub"]),
        (lambda: sa_token({**sa_claims(), "sub": ""}), ["sub"]),
        (lambda: sa_token({**sa_claims(), "jti": 7}), ["jti"]),
        (lambda: sa_token({**sa_claims(), "jti": "j" * 300}), ["jti"]),
        # Another key under the cluster key's kid: the signature is checked, not the kid.
        (lambda: sa_token(sa_claims(), new_key("cluster")), ["signature"]),
        (lambda: unsigned({"alg": "none", "kid": "cluster"}, sa_claims()), ["alg"]),
        (
            lambda: jwt.encode(
                {"alg": "HS256", "kid": "cluster"},
                sa_claims(),
                OctKey.import_key(b"k" * 32),
                algorithms=["HS256"],
            ),
            ["alg"],
        ),
        (lambda: "not-a-jwt", ["malformed"]),
        # A user's access token of the route's provider is not a workload assertion.
        (user_token, ["iss"]),
    ],
)
async def test_an_assertion_that_is_not_a_valid_token_of_a_trusted_issuer_is_invalid_grant(
    tmp_path, assertion, words
):
    app, _ = gateway(tmp_path)
    made = assertion()
    response = await exchange(app, made)
    refused(response, "invalid_grant", "the assertion is not accepted", *words)
    assert made not in response.body.decode()


async def test_a_request_without_an_assertion_is_invalid_request(tmp_path):
    app, _ = gateway(tmp_path)
    refused(await exchange(app, None), "invalid_request", "assertion is required")


async def test_a_workload_its_issuers_rules_refuse_is_unauthorized_client(tmp_path):
    app, _ = gateway(tmp_path)
    response = await exchange(app, sa_token(sa_claims(namespace="default", name="reader")))
    refused(response, "unauthorized_client", "system:serviceaccount:default:reader")
    # The workload is not shown the operator's rules.
    assert "kubernetes.io" not in response.json()["error_description"]


async def test_a_rule_that_cannot_be_evaluated_refuses(tmp_path):
    # An SVID has no kubernetes.io claim: a rule reading it errors, and an error never allows.
    rules = ['jwt["kubernetes.io"].namespace != "kube-system"']
    app, _ = gateway(tmp_path, policy_yaml(cluster_rules=rules))
    claims = sa_claims()
    del claims["kubernetes.io"]
    refused(await exchange(app, sa_token(claims)), "unauthorized_client")


@pytest.mark.parametrize(
    ("asked", "granted"),
    [("mcp:read", "mcp:read"), ("mcp:read mcp:tools", "mcp:tools mcp:read"), ("", None)],
)
async def test_a_workload_may_ask_for_fewer_scopes(tmp_path, asked, granted):
    app, _ = gateway(tmp_path)
    response = await exchange(app, sa_token(sa_claims()), scope=asked)
    assert response.status == 200, response.body
    expected = granted or "mcp:tools mcp:read"
    assert response.json()["scope"] == expected
    assert unverified_claims(response.json()["access_token"])["scope"] == expected


@pytest.mark.parametrize("asked", ["mcp:admin", "mcp:read mcp:admin", "openid", "offline_access"])
async def test_a_scope_the_issuer_does_not_grant_is_invalid_scope(tmp_path, asked):
    app, _ = gateway(tmp_path)
    response = await exchange(app, sa_token(sa_claims()), scope=asked)
    refused(response, "invalid_scope", "mcp:tools mcp:read")
    # Not used up: the same assertion still works with an acceptable request.
    assert (await exchange(app, sa_token(sa_claims()))).status == 200


async def test_an_assertion_is_used_once_by_its_jti(tmp_path):
    app, _ = gateway(tmp_path)
    assert (await exchange(app, sa_token(sa_claims(jti="once")))).status == 200
    refused(await exchange(app, sa_token(sa_claims(jti="once"))), "invalid_grant", "used already")
    # Another token with the same jti (a copy re-signed by the issuer) is the same assertion.
    again = sa_token(sa_claims(jti="once", ttl=900))
    refused(await exchange(app, again), "invalid_grant", "its jti")
    assert (await exchange(app, sa_token(sa_claims(jti="twice")))).status == 200


async def test_an_assertion_without_jti_is_used_once_as_a_whole(tmp_path):
    app, _ = gateway(tmp_path)
    token = sa_token(sa_claims(jti=None))
    assert (await exchange(app, token)).status == 200
    refused(await exchange(app, token), "invalid_grant", "the assertion itself")
    # The next token the issuer mints (another iat or exp) is another assertion.
    assert (await exchange(app, sa_token(sa_claims(jti=None, ttl=601)))).status == 200


async def test_a_replay_with_its_ecdsa_signature_re_encoded_is_still_a_replay(tmp_path):
    # (r, n - s) verifies as well as (r, s): keyed on the whole token, the copy would pass.
    app, _ = gateway(tmp_path)
    token = svid()
    assert (await exchange(app, token)).status == 200
    head, payload, signature = token.split(".")
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    s = int.from_bytes(raw[32:], "big")
    flipped = raw[:32] + (order - s).to_bytes(32, "big")
    twin = f"{head}.{payload}.{base64.urlsafe_b64encode(flipped).rstrip(b'=').decode()}"
    assert twin != token
    refused(await exchange(app, twin), "invalid_grant", "used already")


async def test_a_refused_assertion_is_not_used_up(tmp_path):
    # Only assertions the gateway acts on are recorded: one refused for its scope stays valid.
    app, _ = gateway(tmp_path)
    token = sa_token(sa_claims(jti="kept"))
    refused(await exchange(app, token, scope="mcp:admin"), "invalid_scope")
    assert (await exchange(app, token)).status == 200


async def test_the_token_lives_no_longer_than_an_hour(tmp_path):
    app, _ = gateway(tmp_path)
    response = await exchange(app, sa_token(sa_claims(ttl=48 * 3600)))
    assert 3590 <= response.json()["expires_in"] <= 3600


async def test_the_routes_own_rules_apply_to_workload_tokens(tmp_path):
    # The issuer lets `ops` get a token; the route lets in only `agents` workloads.
    rules = ['jwt["kubernetes.io"].namespace in ["agents", "ops"]']
    app, upstream = gateway(tmp_path, policy_yaml(cluster_rules=rules))
    token = (await exchange(app, sa_token(sa_claims(namespace="ops")))).json()["access_token"]
    response = await call(app, token)
    assert response.status == 403, response.body
    assert upstream.sent == []


async def test_a_resource_other_than_the_routes_is_invalid_target(tmp_path):
    app, _ = gateway(tmp_path)
    response = await exchange(app, sa_token(sa_claims()), resource="http://gw.test/other")
    refused(response, "invalid_target")


async def test_an_issued_token_is_not_an_assertion(tmp_path):
    # The gateway's own tokens come from an issuer the grant does not trust.
    app, _ = gateway(tmp_path)
    token = (await exchange(app, sa_token(sa_claims()))).json()["access_token"]
    refused(await exchange(app, token), "invalid_grant", "iss")


async def test_every_issuance_and_refusal_is_an_audit_line_naming_the_workload(tmp_path):
    path = tmp_path / "audit.log"
    app, _ = gateway(tmp_path, options=ServeOptions(audit_log=str(path)))
    assert (await exchange(app, sa_token(sa_claims()))).status == 200
    refused(await exchange(app, sa_token(sa_claims(namespace="ops"))), "unauthorized_client")
    issued, denied = audit_lines(app, path)
    assert issued["event"] == "workload-token-issued"
    assert issued["decision"] == "allow"
    assert issued["caller"] == {"iss": CLUSTER, "sub": "system:serviceaccount:agents:reader"}
    assert "scopes [mcp:tools mcp:read]" in issued["reason"]
    assert denied["decision"] == "deny"
    assert denied["caller"]["sub"] == "system:serviceaccount:ops:reader"
    # The auditor, unlike the workload, is told which rule refused.
    assert 'jwt["kubernetes.io"].namespace == "agents"' in denied["reason"]
    assert "workloadIdentity.issuers[0]" in denied["reason"]
