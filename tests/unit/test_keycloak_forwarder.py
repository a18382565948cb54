"""What the registration forwarder sends to Keycloak: the validated metadata without `scope`.

Real Keycloak 26 gives a client registered with a `scope` exactly those scopes as optional ones
and none of the realm's defaults (tests/e2e/test_provider_a.py signs in through it)."""

from __future__ import annotations

import orjson

from mcp_oauth_gateway.providers.keycloak import forwarded_registration
from mcp_oauth_gateway.registration import parse_registration


def test_scope_is_left_out_and_everything_else_is_kept():
    raw = orjson.dumps(
        {
            "client_name": "gateway-e2e-ts",
            "redirect_uris": ["http://127.0.0.1:53682/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
            "scope": "openid profile",
            "software_id": "x",
        }
    )
    sent = orjson.loads(forwarded_registration(parse_registration(raw)))
    assert "scope" not in sent
    assert sent == {k: v for k, v in orjson.loads(raw).items() if k != "scope"}


def test_a_body_without_scope_is_sent_as_it_was_read():
    metadata = parse_registration(b'{"redirect_uris": ["http://127.0.0.1:1/cb"]}')
    assert orjson.loads(forwarded_registration(metadata)) == metadata
