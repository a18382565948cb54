"""Load with a mix of good and bad callers, bounded in time and count, loopback only: zero wrong
decisions (every valid token served, no invalid one reaching the backend — the backend keeps a
ledger), memory and open file descriptors flat after warm-up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

from support import claims_for, mint, new_key, wait_until

DURATION = float(os.environ.get("LOAD_SECONDS", "8"))
MAX_REQUESTS = 20_000
# Enough requests for the memory and descriptor checks to mean something, however slow the
# machine: the load runs past DURATION until this many were sent (a count, not a speed).
MIN_REQUESTS = 500
WORKERS = 16
ACCEPT = "application/json, text/event-stream"


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cases(stack) -> dict[str, tuple[str | None, int]]:
    """kind → (token, expected status)."""
    forger = new_key("idp-key-1")
    return {
        "valid": (stack.token(), 200),
        "valid-stream": (stack.token(sub="streamer"), 200),
        "forged": (mint(forger, claims_for(stack.issuer, stack.audience)), 401),
        "expired": (stack.token(exp=int(time.time()) - 600), 401),
        "wrong-aud": (stack.token(aud="someone-else"), 401),
        "no-group": (stack.token(groups=[]), 403),
        "no-token": (None, 401),
    }


async def one(client: httpx.AsyncClient, stack, kind: str, token: str | None) -> tuple[int, str]:
    mark = f"{kind}:{uuid.uuid4().hex}"
    headers = {"Accept": ACCEPT, "Mcp-Param-Load": mark}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if kind == "valid-stream":
        headers.update(
            {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "count"}
        )
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "count",
                "arguments": {"n": 2},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "1"},
                },
            },
        }
        async with client.stream("POST", stack.mcp, headers=headers, json=body) as response:
            text = (await response.aread()).decode()
            assert response.status_code != 200 or "counted to 2" in text
            return response.status_code, mark
    response = await client.post(
        stack.mcp,
        headers=headers,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "load", "version": "1"},
            },
        },
    )
    return response.status_code, mark


async def run_load(
    stack, seconds: float, budget: int, at_least: int = 0
) -> tuple[Counter, list[str], list[str]]:
    table = cases(stack)
    kinds = list(table)
    outcomes: Counter = Counter()
    wrong: list[str] = []
    served_marks: list[str] = []
    deadline = time.monotonic() + seconds
    sent = 0

    async def worker(index: int) -> None:
        nonlocal sent
        limits = httpx.Limits(max_connections=2)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            i = index
            while sent < budget and (time.monotonic() < deadline or sent < at_least):
                sent += 1
                kind = kinds[i % len(kinds)]
                i += 1
                token, expected = table[kind]
                status, mark = await one(client, stack, kind, token)
                outcomes[(kind, status)] += 1
                if status != expected:
                    wrong.append(f"{kind}: expected {expected}, got {status}")
                if expected == 200:
                    served_marks.append(mark)

    await asyncio.gather(*(worker(i) for i in range(WORKERS)))
    return outcomes, wrong, served_marks


async def test_mixed_load_makes_no_wrong_decision(stack_b):
    pid = stack_b.process.popen.pid
    await run_load(stack_b, 2, 2_000)  # warm-up: caches, pools, allocator
    rss_before, fds_before = rss_kb(pid), fds(pid)
    tasks_before = httpx.get(stack_b.status).json()["tasks"]
    outcomes, wrong, served = await run_load(stack_b, DURATION, MAX_REQUESTS, MIN_REQUESTS)
    # The clients have closed their connections; the gateway lets them (and their tasks) go
    # shortly after. The same bounds as asserted below, with the numbers, if they never hold.
    fds_bound, tasks_bound = fds_before + 8, tasks_before + 4
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: (
                fds(pid) <= fds_bound and httpx.get(stack_b.status).json()["tasks"] <= tasks_bound
            ),
            10,
            "closed connections and their tasks to go",
        )
    rss_after, fds_after = rss_kb(pid), fds(pid)
    tasks_after = httpx.get(stack_b.status).json()["tasks"]
    async with httpx.AsyncClient() as client:
        ledger = set((await client.get(f"http://{stack_b.backend}/debug/load")).json())
    reached = [m for m in ledger if m.split(":", 1)[0] not in ("valid", "valid-stream")]
    total = sum(outcomes.values())
    print(
        f"\nload: {total} requests in {DURATION:g}s by {WORKERS} clients; "
        f"{sum(n for (k, s), n in outcomes.items() if s == 200)} served, "
        f"{sum(n for (k, s), n in outcomes.items() if s in (401, 403))} refused; "
        f"{len(wrong)} wrong decisions; {len(reached)} invalid requests reached the backend; "
        f"RSS {rss_before // 1024}→{rss_after // 1024} MB; fds {fds_before}→{fds_after}; "
        f"tasks {tasks_before}→{tasks_after}"
    )
    assert wrong == []
    assert reached == []
    assert set(served) <= ledger, "every valid request reached the backend"
    assert total >= MIN_REQUESTS
    assert rss_after <= rss_before * 1.2 + 5 * 1024, (rss_before, rss_after)
    assert fds_after <= fds_bound, (fds_before, fds_after)
    assert tasks_after <= tasks_bound, (tasks_before, tasks_after)
