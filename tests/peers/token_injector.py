"""A tiny reverse proxy that adds `Authorization: Bearer <token>` to every request, so test
harnesses without a token option (the MCP conformance `server` command) can run through the
gateway. Usage: token_injector.py LISTEN_PORT TARGET_BASE_URL (token from $INJECT_TOKEN)."""

from __future__ import annotations

import os
import sys

import aiohttp
from aiohttp import web

HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}


async def forward(request: web.Request) -> web.StreamResponse:
    target = request.app["target"] + request.rel_url.path_qs
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
    headers["Authorization"] = f"Bearer {os.environ['INJECT_TOKEN']}"
    session: aiohttp.ClientSession = request.app["session"]
    async with session.request(
        request.method, target, headers=headers, data=await request.read(), allow_redirects=False
    ) as upstream:
        response = web.StreamResponse(
            status=upstream.status,
            headers={k: v for k, v in upstream.headers.items() if k.lower() not in HOP},
        )
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def start(app: web.Application) -> None:
    app["session"] = aiohttp.ClientSession(auto_decompress=False)


async def stop(app: web.Application) -> None:
    await app["session"].close()


if __name__ == "__main__":
    application = web.Application()
    application["target"] = sys.argv[2].rstrip("/")
    application.router.add_route("*", "/{tail:.*}", forward)
    application.on_startup.append(start)
    application.on_cleanup.append(stop)
    web.run_app(application, host="127.0.0.1", port=int(sys.argv[1]), print=None)
