"""The Python `mcp` 1.x client (2025-11-25 wire) with a bearer token it already has, as a
URL-elicitation-aware client is written: it declares `elicitation.url` (an elicitation
callback) and turns a `-32042` into `UrlElicitationRequiredError` with the SDK's own
`from_error`. Usage:

    py_mcp1_bearer_client.py URL TOKEN TOOL

Prints one JSON line: {"ok": true, "text"} (initialize, the tool's call), or {"ok": false,
"code", "class", "elicitations"} when the server asked for a URL elicitation."""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import ClientSession, types
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError, UrlElicitationRequiredError


async def elicit(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
    """A URL elicitation sent as a request (not what the gateway does): declined."""
    return types.ElicitResult(action="decline")


def first_mcp_error(group: BaseExceptionGroup) -> McpError | None:
    """The McpError inside the transport's task groups (None: another failure)."""
    matched, _ = group.split(McpError)
    while isinstance(matched, BaseExceptionGroup):
        matched = matched.exceptions[0]  # type: ignore[assignment]
    return matched


async def main(url: str, token: str, tool: str) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with (
            streamablehttp_client(url, headers=headers) as (read, write, _),
            ClientSession(read, write, elicitation_callback=elicit) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, {})
    except BaseExceptionGroup as group:
        error = first_mcp_error(group)
        if error is None or error.error.code != types.URL_ELICITATION_REQUIRED:
            raise
        asked = UrlElicitationRequiredError.from_error(error.error)
        return {
            "ok": False,
            "code": asked.error.code,
            "class": type(asked).__name__,
            "elicitations": [e.model_dump(by_alias=True) for e in asked.elicitations],
        }
    first = result.content[0]
    assert isinstance(first, types.TextContent), result
    return {"ok": True, "text": first.text}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:4]))))
