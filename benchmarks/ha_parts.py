"""The real parts the failover and rolling-restart benchmarks share with the end-to-end tests:
child processes and ports (`tests/support.py`), a Sentinel set on loopback
(`tests/redis_ha_support.py`) and the form filling of a headless sign-in
(`tests/peers/headless_login.py`). Imported from the test tree, so that both run the same
servers the same way."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT / "tests", ROOT / "tests" / "peers"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from headless_login import submission  # noqa: E402

from redis_ha_support import SENTINEL_PASSWORD, SERVICE, SentinelSet, sentinel_set  # noqa: E402
from support import Process, free_port, wait_for_port, wait_until  # noqa: E402


def stop_on_sigterm() -> None:
    """SIGTERM ends the benchmark as Ctrl-C does: every server it started is stopped (the
    ExitStacks unwind) instead of being left running without it."""

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


__all__ = [
    "ROOT",
    "SENTINEL_PASSWORD",
    "SERVICE",
    "Process",
    "SentinelSet",
    "free_port",
    "sentinel_set",
    "stop_on_sigterm",
    "submission",
    "wait_for_port",
    "wait_until",
]
