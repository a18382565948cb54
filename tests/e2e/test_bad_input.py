"""Bad input, one case each: every one gets a clear JSON error and the gateway keeps serving."""

from __future__ import annotations

import hashlib
import hmac
import time

import httpx
import pytest

from support import b64url, claims_for, mint, new_key, unsigned

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bad-input-test", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def post_mcp(stack, authorization: str | None) -> httpx.Response:
    headers = dict(ACCEPT)
    if authorization is not None:
        headers["Authorization"] = authorization
    return httpx.post(stack.mcp, json=INITIALIZE, headers=headers, timeout=10)


def assert_still_serving(stack) -> None:
    response = post_mcp(stack, f"Bearer {stack.token()}")
    assert response.status_code == 200, response.text


def hs256_with_public_key(stack) -> str:
    pem = stack.key.as_pem(private=False)
    head = b64url(b'{"alg":"HS256","kid":"idp-key-1","typ":"JWT"}')
    body = b64url(str(claims_for(stack.issuer, stack.audience)).replace("'", '"').encode())
    sig = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(sig)}"


def other_key_same_kid(stack) -> str:
    impostor = new_key("idp-key-1")
    return mint(impostor, claims_for(stack.issuer, stack.audience))


CASES = {
    "wrong part count": (lambda s: "abc.def", "three dot-separated parts"),
    "bad base64": (lambda s: "!!!.???.***", "malformed token"),
    "non-JSON header": (
        lambda s: f"{b64url(b'not json')}.{b64url(b'{}')}.{b64url(b'x')}",
        "malformed token",
    ),
    "alg none": (
        lambda s: unsigned({"alg": "none", "kid": "idp-key-1"}, claims_for(s.issuer, s.audience)),
        "alg 'none'",
    ),
    "HS256 signed with the RSA public key": (hs256_with_public_key, "alg 'HS256'"),
    "signed by another key under a known kid": (other_key_same_kid, "signature does not verify"),
    "wrong iss": (
        lambda s: s.token(iss="http://127.0.0.1:1/application/o/other/"),
        "not the expected issuer",
    ),
    "iss without trailing slash": (
        lambda s: s.token(iss=s.issuer.rstrip("/")),
        "a trailing slash matters",
    ),
    "wrong aud": (lambda s: s.token(aud="someone-else"), "does not include any accepted"),
    "expired": (lambda s: s.token(exp=int(time.time()) - 3600), "expired"),
    "nbf in the future": (lambda s: s.token(nbf=int(time.time()) + 3600), "not yet valid"),
    "unknown kid": (
        lambda s: mint(new_key("never-published"), claims_for(s.issuer, s.audience)),
        "no key with kid",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_token_is_refused_with_reason(stack_b, case):
    build, reason = CASES[case]
    response = post_mcp(stack_b, f"Bearer {build(stack_b)}")
    assert response.status_code == 401, response.text
    body = response.json()
    assert body["error"] == "invalid_token"
    assert reason in body["error_description"], body
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert (
        f'resource_metadata="{stack_b.gateway}/.well-known/oauth-protected-resource/mcp"'
        in challenge
    )
    assert_still_serving(stack_b)


def test_no_token_gets_challenge_without_error_code(stack_b):
    response = post_mcp(stack_b, None)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_token"
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer resource_metadata="')
    assert "error=" not in challenge


def test_non_bearer_scheme_counts_as_missing(stack_b):
    response = post_mcp(stack_b, "Basic YWxpY2U6eA==")
    assert response.status_code == 401
    assert response.json()["error_description"] == "Unauthorized: missing bearer token"


def test_oversized_authorization_header_is_a_4xx(stack_b):
    response = post_mcp(stack_b, "Bearer " + "a" * 9000)
    assert 400 <= response.status_code < 500, response.status_code
    assert_still_serving(stack_b)


def test_service_account_token_is_forbidden(stack_b):
    # client_credentials: a machine caller authorised for the same client, with no groups
    token = httpx.post(
        f"{stack_b.issuer}token/",
        data={"grant_type": "client_credentials", "client_id": "mcp-public", "scope": "openid"},
        timeout=10,
    ).json()["access_token"]
    response = post_mcp(stack_b, f"Bearer {token}")
    assert response.status_code == 403, response.text
    assert response.json()["error"] == "forbidden"


def test_valid_token_without_group_is_forbidden(stack_b):
    response = post_mcp(stack_b, f"Bearer {stack_b.token(sub='bob', groups=[])}")
    assert response.status_code == 403
    assert "authorization rules" in response.json()["error_description"]


REGISTRATION = "/.well-known/oauth-authorization-server/mcp/client-registration"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", "invalid_client_metadata"),
        (b"[1, 2]", "invalid_client_metadata"),
        (b'"text"', "invalid_client_metadata"),
        (b'{"client_name": "x"}', "invalid_redirect_uri"),
        (b'{"redirect_uris": "http://127.0.0.1/cb"}', "invalid_redirect_uri"),
        (b'{"redirect_uris": ["/relative/callback"]}', "invalid_redirect_uri"),
        (b'{"redirect_uris": ["javascript:alert(1)"]}', "invalid_redirect_uri"),
        (b'{"redirect_uris": ["http:///nohost"]}', "invalid_redirect_uri"),
    ],
)
def test_bad_registration_body_is_400(stack_b, body, error):
    response = httpx.post(
        stack_b.gateway + REGISTRATION,
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == error
    assert response.json()["error_description"]
    assert_still_serving(stack_b)


def test_registration_shim_returns_preregistered_client(stack_b):
    response = httpx.post(
        stack_b.gateway + REGISTRATION,
        json={
            "client_name": "Claude Code",
            "redirect_uris": ["http://127.0.0.1:33418/callback"],
            "client_id": "attacker-chosen",
        },
        timeout=10,
    )
    assert response.status_code == 201
    body = response.json()
    assert body["client_id"] == "mcp-public"
    assert body["token_endpoint_auth_method"] == "none"
    assert body["redirect_uris"] == ["http://127.0.0.1:33418/callback"]
    assert "client_secret" not in body


def test_registration_needs_post(stack_b):
    response = httpx.get(stack_b.gateway + REGISTRATION, timeout=10)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
