"""What the MCP server behind the gateway receives, with real processes (the gateway and the
`mcp` SDK backend, which records every request's headers): a static secret header and the
caller's signed identity, never a client's copy of either and never the caller's token; or, with
`passthrough`, the verified token itself. With two providers, the identity names the issuer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from conftest import gateway_beside
from support import (
    INITIALIZE,
    claims_for,
    mcp_headers,
    mint,
    second_issuer,
    wait_for_keyset,
)

RULE_LINE = "          - '\"mcp-agent\" in jwt.groups'\n"
SIGNING_KEY = "identity-signing-key-for-tests-0123456789"


def credentials_block(secret_file: Path, key_file: Path) -> str:
    return f"""  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: {{file: {secret_file}}}
        identity:
          header: X-Mcp-Identity
          claims: [sub, groups]
          signingKey: {{file: {key_file}}}
"""


@pytest.fixture(scope="module")
def secret_gateway(stack_b, tmp_path_factory, logs) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("secret-header")
    secret, key = tmp / "api-key", tmp / "signing-key"
    secret.write_text("backend-api-key-42\n")
    key.write_text(SIGNING_KEY)
    edits = ((RULE_LINE, RULE_LINE + credentials_block(secret, key)),)
    yield from gateway_beside(stack_b, tmp / "config", logs, "gateway-secret-header", edits=edits)


@pytest.fixture(scope="module")
def passthrough_gateway(stack_b, tmp_path_factory, logs) -> Iterator[str]:
    edits = ((RULE_LINE, RULE_LINE + "  backend:\n    credentials: {passthrough: true}\n"),)
    yield from gateway_beside(
        stack_b, tmp_path_factory.mktemp("passthrough"), logs, "gateway-passthrough", edits=edits
    )


@pytest.fixture(scope="module")
def two_issuers_gateway(stack_b, tmp_path_factory, logs) -> Iterator[tuple[str, str]]:
    """A gateway whose policy has two providers and the identity header with its default
    claims; yields its base URL and the second provider's issuer."""
    tmp = tmp_path_factory.mktemp("two-issuers-identity")
    secret = tmp / "api-key"
    secret.write_text("backend-api-key-42\n")
    issuer, edits = second_issuer(stack_b.idp)
    block = (
        "  backend:\n    credentials:\n      secretHeader:\n        header: X-Api-Key\n"
        f"        value: {{file: {secret}}}\n        identity: {{header: X-Mcp-Identity}}\n"
    )
    edits = (*edits, (RULE_LINE, RULE_LINE + block))
    gateway = gateway_beside(stack_b, tmp / "config", logs, "gateway-two-issuers", edits=edits)
    try:
        base = next(gateway)
        wait_for_keyset(base, mint(stack_b.key, claims_for(issuer, "mcp-public")))
        yield base, issuer
    finally:
        gateway.close()  # stops the gateway


def seen_by_backend(stack_b, mark: str) -> list[tuple[str, str]]:
    for request in httpx.get(f"http://{stack_b.backend}/debug/requests").json():
        if dict(request["headers"]).get("mcp-param-mark") == mark:
            return [tuple(h) for h in request["headers"]]
    raise AssertionError("the request did not reach the backend")


def send(base: str, token: str, **extra: str) -> tuple[httpx.Response, str]:
    mark = uuid.uuid4().hex
    headers = mcp_headers(token, **{"Mcp-Param-Mark": mark}, **extra)
    return httpx.post(f"{base}/mcp", json=INITIALIZE, headers=headers), mark


def test_the_backend_gets_the_secret_and_a_signed_identity_never_a_clients_copy(
    secret_gateway, stack_b
):
    token = stack_b.token()
    response, mark = send(
        secret_gateway, token, **{"X-Api-Key": "client-guess", "X-Mcp-Identity": "forged"}
    )
    assert response.status_code == 200
    headers = seen_by_backend(stack_b, mark)
    assert [v for k, v in headers if k == "x-api-key"] == ["backend-api-key-42"]
    identities = [v for k, v in headers if k == "x-mcp-identity"]
    assert len(identities) == 1
    claims = jwt.decode(identities[0], OctKey.import_key(SIGNING_KEY.encode())).claims
    assert claims["sub"] == "alice"
    assert claims["groups"] == ["mcp-agent", "users"]
    assert all(k != "authorization" for k, _ in headers)  # the caller's token stays here


def test_passthrough_hands_the_backend_the_verified_token(passthrough_gateway, stack_b):
    token = stack_b.token()
    response, mark = send(passthrough_gateway, token)
    assert response.status_code == 200
    assert ("authorization", f"Bearer {token}") in seen_by_backend(stack_b, mark)


def test_alice_at_two_providers_reaches_the_backend_as_two_identities(two_issuers_gateway, stack_b):
    """`sub` is unique only within its issuer: the backend is told which alice calls."""
    base, other_issuer = two_issuers_gateway
    identities = []
    for token in (stack_b.token(), mint(stack_b.key, claims_for(other_issuer, "mcp-public"))):
        response, mark = send(base, token)
        assert response.status_code == 200, response.text
        found = [v for k, v in seen_by_backend(stack_b, mark) if k == "x-mcp-identity"]
        assert len(found) == 1, found
        identities.append(json.loads(found[0]))
    assert identities == [
        {"iss": stack_b.issuer, "sub": "alice"},
        {"iss": other_issuer, "sub": "alice"},
    ]


def test_the_gateways_own_cookies_never_reach_a_backend_and_its_documents_are_sandboxed(stack_b):
    # Tenants' routes share a host: the Broker's consent and browser cookies of every route go
    # with each request the browser makes there, whatever the path.
    cookies = (
        "theme=dark; mcp-authz=BROWSER; __Host-mcp-consent-0123abcd=CONSENT; "
        "MCP-CONSENT-ffff=X; __Secure-mcp-authz=Y; session=abc"
    )
    answer, mark = send(stack_b.gateway, stack_b.token(), Cookie=cookies)
    assert answer.status_code == 200
    seen = dict(seen_by_backend(stack_b, mark))
    assert seen["cookie"] == "theme=dark; session=abc"
    for secret in ("BROWSER", "CONSENT", "X", "Y"):
        assert secret not in json.dumps(seen)
    # What the backend answers is never a same-origin document able to drive the Broker's pages.
    assert answer.headers["content-security-policy"] == "sandbox"
    assert answer.headers["x-content-type-options"] == "nosniff"
    _, mark = send(stack_b.gateway, stack_b.token(), Cookie="mcp-authz=BROWSER")
    assert "cookie" not in dict(seen_by_backend(stack_b, mark))
