"""The benchmark's static backend app (backend.py) on the gateway's HTTP protocol instead of
uvicorn's own: what the gateway's connection handling costs with no gateway above it
(`instructions.py --floor --gateway-protocol`)."""

from __future__ import annotations

import sys

import uvicorn
from backend import app

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.connections import ConnectionGuard, protocol_class
from mcp_oauth_gateway.dataplane.metrics import ConnectionCounts


def main(port: int) -> None:
    """Serve backend.app on 127.0.0.1:`port` as the gateway's server is set up (uvloop, the
    guard, no proxy-headers middleware)."""
    guard = ConnectionGuard(Limits(), ConnectionCounts())
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http=protocol_class(guard),
        log_level="warning",
        access_log=False,
        server_header=False,
        lifespan="off",
        ws="none",
        proxy_headers=False,  # as the gateway runs it (server.py)
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main(int(sys.argv[1]))
