"""`check`'s look at each userOAuth backend: its upstream authorization server found as the
gateway will find it (explicit endpoints, the issuer's metadata, or the backend's own 401 and
RFC 9728 metadata), so a wrong issuer or an unreachable server is said before users meet it."""

from __future__ import annotations

import asyncio

import aiohttp

from ..controlplane import Snapshot
from ..controlplane.snapshot import CompiledUserOAuth
from ..serving.user_oauth import upstreams_of
from ..urls import shown_url
from ..useroauth.discovery import DiscoveryError
from ..useroauth.servers import find


async def check_upstreams(snapshot: Snapshot, limit: float) -> dict[str, list[dict[str, object]]]:
    """Per policy: each userOAuth backend, its service name, and its issuer or why none."""
    found: dict[str, list[dict[str, object]]] = {}
    seen: set[tuple[str, str]] = set()
    async with aiohttp.ClientSession() as session:
        jobs = []
        for routes in snapshot.listeners.values():
            for route in routes:
                if route.policy is None or route.policy.invalid:
                    continue
                for backend, upstream in upstreams_of(route).items():
                    if (route.policy.key, backend) in seen:
                        continue
                    seen.add((route.policy.key, backend))
                    entry: dict[str, object] = {
                        "service": upstream.service,
                        "backend": shown_url(upstream.url),
                        "issuer": None,
                        "error": None,
                    }
                    found.setdefault(route.policy.key, []).append(entry)
                    jobs.append(_one(session, upstream.oauth, upstream.url, limit, entry))
        await asyncio.gather(*jobs)
    return found


async def _one(
    session: aiohttp.ClientSession,
    oauth: CompiledUserOAuth,
    url: str,
    limit: float,
    entry: dict[str, object],
) -> None:
    try:
        server = await find(session, oauth, url, limit)
    except DiscoveryError as exc:
        entry["error"] = str(exc)
        return
    entry["issuer"] = server.issuer or shown_url(server.token_endpoint)
