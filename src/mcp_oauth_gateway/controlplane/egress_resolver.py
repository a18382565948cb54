"""Connecting only where the egress rules allow, whatever a name resolves to.

A name a tenant may use (a Service's DNS name, an allowed host) can still resolve to the cloud's
metadata address or to the gateway's own pod: an ExternalName Service is a CNAME to anything, and
a name's owner can change its records at will. So every connection of the gateway in a cluster
looks the name up once, checks every address, and connects to a checked one, never resolving
again (no DNS-rebinding window). One refused address refuses the name: a client may connect to
any of them.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from .egress import EgressRules, address_of, looks_numeric
from .fetch import new_session

Lookup = Callable[[str, int, socket.AddressFamily], Awaitable[list[ResolveResult]]]


class EgressRefused(aiohttp.ClientOSError):
    """The gateway will not connect to a host (the message says which address, and why); an
    aiohttp client error and an OSError, so every caller already reports it as a failed
    connection."""


def _check(rules: EgressRules, host: str, addresses: list[str], port: int | None) -> None:
    if not addresses:
        raise EgressRefused(f"{host} resolves to no address")
    for text in addresses:
        ip = address_of(text)
        why = "it is not an IP address" if ip is None else rules.connection_refusal(ip, port)
        if why is not None:
            raise EgressRefused(f"refused to connect to {host}: {why}")


def literal_refusal(rules: EgressRules, host: str, port: int | None = None) -> str | None:
    """Why a host written as an address may not be connected to (None: it may, or it is a
    name, which is checked once resolved)."""
    ip = address_of(host)
    if ip is None:
        if looks_numeric(host):
            return f"refused to connect to {host}: not a canonical IP address"
        return None
    why = rules.connection_refusal(ip, port)
    return None if why is None else f"refused to connect to {host}: {why}"


async def checked_address(rules: EgressRules, host: str, port: int) -> str:
    """The address to connect to for `host`: looked up once and checked (EgressRefused)."""
    why = literal_refusal(rules, host, port)
    if why is not None:
        raise EgressRefused(why)
    if address_of(host) is not None:
        return host
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [str(info[4][0]) for info in infos]
    _check(rules, host, addresses, port)
    return addresses[0]


class EgressResolver(AbstractResolver):
    """An aiohttp resolver returning only addresses the rules allow (aiohttp connects to
    exactly what it returns)."""

    def __init__(self, rules: EgressRules, lookup: Lookup | None = None):
        self.rules = rules
        self._lookup = lookup
        self._threaded: ThreadedResolver | None = None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve `host`; EgressRefused when any of its addresses is refused."""
        if self._lookup is not None:
            results = await self._lookup(host, port, family)
        else:
            if self._threaded is None:
                self._threaded = ThreadedResolver()  # binds the running loop: made here
            results = await self._threaded.resolve(host, port, family)
        _check(self.rules, host, [result["host"] for result in results], port or None)
        return results

    async def close(self) -> None:
        """Release the underlying resolver."""
        if self._threaded is not None:
            await self._threaded.close()
            self._threaded = None


def _literal_guard(rules: EgressRules) -> aiohttp.TraceConfig:
    # aiohttp connects to an address written in the URL without asking its resolver.
    async def on_request_start(
        session: aiohttp.ClientSession, context: object, params: aiohttp.TraceRequestStartParams
    ) -> None:
        why = literal_refusal(rules, params.url.host or "", params.url.port)
        if why is not None:
            raise EgressRefused(why)

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_request_start)
    return trace


def guarded_session(rules: EgressRules | None) -> aiohttp.ClientSession:
    """A control-plane session (JWKS, discovery, token endpoints) that connects only where
    `rules` allow; None: the plain session of file mode."""
    if rules is None:
        return new_session()
    connector = aiohttp.TCPConnector(limit=16, resolver=EgressResolver(rules))
    return new_session(connector, [_literal_guard(rules)])
