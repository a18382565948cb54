"""DPoP proofs as a Broker client sends them to the token endpoint (RFC 9449 §5: no access
token, so no `ath`), made now (the Broker checks them against the real clock), and what the
Broker hands out for them: its sealed access token opened as the route's JWT stage opens it,
and the key its gateway refresh token is bound to."""

from __future__ import annotations

import time
from typing import Any

from joserfc.jwk import ECKey, Key

from mcp_oauth_gateway.dpop import BoundToken
from unit.dpop.dpop_support import public_jwk, rfc7638
from unit.stages.dpop_requests import proof

from .broker_support import ORIGIN, TOKEN, Rig

TOKEN_URL = ORIGIN + TOKEN
CLIENT_KEY = ECKey.generate_key("P-256")
JKT = rfc7638(public_jwk(CLIENT_KEY))
THIEF_KEY = ECKey.generate_key("P-256")


def token_proof(key: Key = CLIENT_KEY, **changes: Any) -> bytes:
    """A proof for a POST to the rig's token endpoint, made now, signed by `key`; `changes`
    replace claims or name the header (`head`)."""
    changes.setdefault("iat", int(time.time()))
    changes.setdefault("htu", TOKEN_URL)
    return proof(None, key=key, **changes)


async def opened(rig: Rig, token: str) -> BoundToken:
    """What a sealed access token of the rig's route holds."""
    context = rig.context()
    return await context.seal.open(context.route, token)


async def refresh_key(rig: Rig, refresh_token: str) -> str | None:
    """The key a gateway refresh token is bound to (taken and put back)."""
    refresh = rig.context().refresh
    grant = await refresh.take(refresh_token)
    assert grant is not None
    await refresh.put_back(grant)
    return grant.jkt
