"""`mcp-oauth-gateway serve` with glibc's malloc_trim(0) after each installed configuration:
for benchmarks/reload_memory.py --malloc-trim only, to see how much of the resident set is
memory the allocator holds free (fragmentation) rather than memory in use."""

from __future__ import annotations

import ctypes
import sys

from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.controlplane.snapshot import Snapshot
from mcp_oauth_gateway.serving.app import GatewayApp

_LIBC = ctypes.CDLL("libc.so.6")
_install = GatewayApp._install


def _install_and_trim(app: GatewayApp, snapshot: Snapshot) -> None:
    _install(app, snapshot)
    _LIBC.malloc_trim(0)


GatewayApp._install = _install_and_trim  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
