"""Revoking a refresh token that was rotated away (or is being rotated by a request in flight)
ends its sign-in: the family's current token goes too, and the old one stays known as reused."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker.errors import OAuthError
from mcp_oauth_gateway.broker.refresh import RefreshReused, RefreshTokens
from mcp_oauth_gateway.broker.revocation import Revocation
from mcp_oauth_gateway.broker.store import MemoryStore


async def rotated_once() -> tuple[RefreshTokens, Revocation, str, str]:
    """Tokens after one rotation: (refresh, revocation, the old token, the current one)."""
    refresh = RefreshTokens(MemoryStore())
    issued = await refresh.issue("client-a", {"access_token": "a1", "refresh_token": "p1"})
    grant = await refresh.take(issued["refresh_token"])
    assert grant is not None
    rotated = await refresh.rotate(grant, {"access_token": "a2", "refresh_token": "p2"})
    return (
        refresh,
        Revocation(refresh.store, refresh),
        issued["refresh_token"],
        rotated["refresh_token"],
    )


@pytest.mark.parametrize("hint", [None, "refresh_token"])
async def test_revoking_the_old_token_ends_the_sign_in(hint):
    refresh, revocation, old, current = await rotated_once()
    assert await revocation.revoke("client-a", old, hint) is None  # 200: nothing at the provider
    assert await refresh.take(current) is None, "the family's current token still works"
    with pytest.raises(RefreshReused):
        await refresh.take(old)


async def test_another_client_cannot_end_the_sign_in_with_an_old_token():
    refresh, revocation, old, current = await rotated_once()
    with pytest.raises(OAuthError, match="issued to another client"):
        await revocation.revoke("client-b", old, None)
    assert await refresh.take(current) is not None


async def test_an_access_token_hint_leaves_refresh_tokens_alone():
    refresh, revocation, old, current = await rotated_once()
    assert await revocation.revoke("client-a", old, "access_token") is None
    assert await refresh.take(current) is not None
