"""Latency probes run as their own (pinned) processes by run.py.

probes.py rate URL RATE SECONDS [TOKEN]   fixed-rate POSTs; prints latency percentiles (ms)
probes.py sse URL [TOKEN]                 one SSE request; prints event arrival times (ms)
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time

import aiohttp

BODY = (
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add",'
    b'"arguments":{"a":2,"b":3}}}'
)


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


async def rate(url: str, per_second: float, seconds: float, token: str | None) -> dict:
    """Send at a fixed rate (not closed-loop), so latency is measured below saturation."""
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        headers = _headers(token)

        async def one() -> None:
            nonlocal errors
            started = time.perf_counter()
            async with session.post(url, data=BODY, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
            latencies.append((time.perf_counter() - started) * 1000)

        for _ in range(50):  # warm the pool and the caches
            await one()
        latencies.clear()
        interval = 1 / per_second
        start = time.perf_counter()
        tasks = []
        n = int(per_second * seconds)
        for i in range(n):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "p50": statistics.median(latencies),
        "p99": latencies[int(len(latencies) * 0.99) - 1],
    }


async def sse(url: str, token: str | None) -> dict:
    """Arrival time of each SSE event after the request was sent."""
    async with aiohttp.ClientSession() as session:
        # one warm-up request so connection set-up is not counted
        async with session.get(url, headers=_headers(token)) as response:
            await response.read()
        started = time.perf_counter()
        arrivals = []
        async with session.get(url, headers=_headers(token)) as response:
            async for chunk in response.content.iter_any():
                for _ in range(chunk.count(b"data:")):
                    arrivals.append(round((time.perf_counter() - started) * 1000, 2))
    return {"arrivals_ms": arrivals}


if __name__ == "__main__":
    mode, target = sys.argv[1], sys.argv[2]
    if mode == "rate":
        out = asyncio.run(
            rate(
                target,
                float(sys.argv[3]),
                float(sys.argv[4]),
                sys.argv[5] if len(sys.argv) > 5 else None,
            )
        )
    else:
        out = asyncio.run(sse(target, sys.argv[3] if len(sys.argv) > 3 else None))
    print(json.dumps(out))
