"""JSON-RPC request bodies as an MCP client sends them."""

from __future__ import annotations

import json


def body(method: str, **params: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()
