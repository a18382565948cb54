"""Unit-test isolation shared by every module here."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from mcp_oauth_gateway.devidp import oidc

# Property tests without settings of their own would run under hypothesis' defaults: a 200 ms
# deadline per example (250 ms while generating) and a health check failing slow generation.
# Under a loaded CI machine one example stalled by a GC pause or a busy core overruns it, and
# its fast replay then reports the test as flaky: a failure that says nothing about the code.
# What each example does is still checked in full; only the wall clock is no longer a verdict.
settings.register_profile("unit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("unit")


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """A test that runs the CLI in process (`main(["serve", …])`) configures logging to the
    stderr pytest captured for that test; put the root logger back afterwards, so later tests'
    log lines do not go to a closed capture stream from the log thread."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def access_log_info() -> Iterator[None]:
    """The access logger at INFO for the test (an AccessLog writes only when it is)."""
    logger = logging.getLogger("mcp_oauth_gateway.access")
    before = logger.level
    logger.setLevel(logging.INFO)
    yield
    logger.setLevel(before)


class ServerTime:
    """The dev IdP's wall clock (token expiry), moved forward instead of waited for."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def server_time(monkeypatch: pytest.MonkeyPatch) -> ServerTime:
    """The dev IdP's clock, for tests that move it forward."""
    shifted = ServerTime()
    monkeypatch.setattr(oidc, "time", shifted)
    return shifted
