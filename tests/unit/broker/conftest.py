"""The Broker rig every endpoint test starts from."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from .broker_support import Rig, started_rig


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    """A Broker signing users in at one provider."""
    async with started_rig() as started:
        yield started
