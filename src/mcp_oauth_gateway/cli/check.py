"""`check`: load the resources, fetch every keyset and discovery document once, report."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Awaitable
from typing import Any

from ..authorization_server_modes import AuthorizationServerMode
from ..controlplane import ControlPlane, Deployment, Snapshot
from ..controlplane.fetch import FetchError
from ..controlplane.jwks import RemoteKeyset
from ..urls import shown_url
from .common import EXIT_INVALID, FACADE_HINT, Refused, load
from .redis_check import check_redis, redis_urls
from .user_oauth_check import check_upstreams
from .user_token_flags import store_kind, user_token_settings


async def _check_fetches(control: ControlPlane, limit: float) -> dict[str, str | None]:
    await control.start()
    results: dict[str, str | None] = {}

    async def fetch(url: str, coro: Awaitable[object]) -> None:
        try:
            async with asyncio.timeout(limit + 1):
                await coro
            results[url] = None
        except (FetchError, TimeoutError) as exc:
            results[url] = str(exc) or "timed out"

    session = control.session
    assert session is not None, "ControlPlane.start() opens the session"
    try:
        jobs = [
            fetch(url, h.fetch_once(session))
            for url, h in control.keysets.items()
            if isinstance(h, RemoteKeyset)
        ]
        jobs += [fetch(url, d.fetch_now()) for url, d in control.discoveries.items()]
        await asyncio.gather(*jobs)
    finally:
        await control.stop()
    return results


def _facade_policies(snapshot: Snapshot) -> set[str]:
    return {
        route.policy.key
        for routes in snapshot.listeners.values()
        for route in routes
        if route.policy is not None
        and route.policy.mcp is not None
        and route.policy.mcp.mode is AuthorizationServerMode.FACADE
    }


def _deployment(args: argparse.Namespace) -> Deployment:
    """What serve would be run with, as far as the resources' validity depends on it."""
    user_tokens = user_token_settings(args)
    kind = store_kind(user_tokens.store_url) if user_tokens is not None else None
    return Deployment(user_token_store=kind)


def _print_text(
    errors: tuple[str, ...], policies: list[dict[str, Any]], redis: list[dict[str, Any]], ok: bool
) -> None:
    """The report as lines for people."""
    for error in errors:
        print(f"error: {error}")
    for r in redis:
        acked = f"writes acknowledged by {r['acks']} replica(s)" if r["acks"] else "reached"
        state = f"ok, {acked}" if r["error"] is None else f"FAILED: {r['error']}"
        print(f"redis {r['redis']} ({r['where']}): {state}")
    for entry in policies:
        print(f"GatewayPolicy {entry['policy']} ({entry['source']})")
        for c in entry["conditions"]:
            print(f"  {c['type']:<13} {c['status']:<6} {c['reason']:<18} {c['message']}")
        for d in entry["discovery"]:
            state = "ok" if d["error"] is None else f"FAILED: {d['error']}"
            print(f"  discovery     {d['url']}: {state}")
        for u in entry["upstreams"]:
            state = f"ok ({u['issuer']})" if u["error"] is None else f"FAILED: {u['error']}"
            print(f"  userOAuth     {u['service']} {u['backend']}: {state}")
        if "hint" in entry:
            print(f"  hint: {entry['hint']}")
    print("OK" if ok else "NOT OK")


def cmd_check(args: argparse.Namespace) -> int:
    """Print every policy's conditions; exit 0 only when all are True and keysets fetched."""
    # The table below reports every fetch failure; the fetchers' own log lines would repeat it.
    logging.getLogger("mcp_oauth_gateway").setLevel(logging.ERROR)
    try:
        deployment = _deployment(args)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    snapshot = load(args.files, deployment)
    control = ControlPlane(snapshot)
    fetches = asyncio.run(_check_fetches(control, args.timeout))
    upstreams = asyncio.run(check_upstreams(snapshot, args.timeout))
    store = user_token_settings(args)
    urls = redis_urls(snapshot, store.store_url if store is not None else None)
    redis = asyncio.run(check_redis(urls, args.timeout))
    ok = not snapshot.errors and all(r["error"] is None for r in redis)
    facade = _facade_policies(snapshot)
    policies: list[dict[str, Any]] = []
    for report in snapshot.policies:
        conditions = control.conditions(report)
        ok = ok and all(c.status for c in conditions)
        discovery = [
            {"url": shown_url(url), "error": fetches.get(url)} for url in report.discovery_urls
        ]
        found = upstreams.get(report.key, [])
        ok = ok and all(u["error"] is None for u in found)
        entry: dict[str, Any] = {
            "policy": report.key,
            "source": report.source,
            "conditions": [c.as_dict() for c in conditions],
            "discovery": discovery,
            "upstreams": found,
        }
        if report.key in facade:
            entry["hint"] = FACADE_HINT
        policies.append(entry)
    if not snapshot.policies and not snapshot.errors:
        print(
            "warning: no GatewayPolicy found: every route would be served without authentication",
            file=sys.stderr,
        )
    if args.output == "json":
        json.dump(
            {"ok": ok, "errors": list(snapshot.errors), "policies": policies, "redis": redis},
            sys.stdout,
            indent=2,
        )
        print()
    else:
        _print_text(snapshot.errors, policies, redis, ok)
    if not snapshot.ok:
        return EXIT_INVALID
    return 0 if ok else 1
