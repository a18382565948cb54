"""Which IP addresses the gateway may fetch from on a stranger's say-so, and an aiohttp resolver
that connects only to addresses it has checked.

A Client ID Metadata Document URL is chosen by whoever calls the authorization endpoint, so
fetching it must not reach the gateway's own networks (SSRF): only public addresses are fetched
from (`ip_blocks.refusal`, the IANA special-purpose registries).

The resolver closes the DNS-rebinding window: aiohttp connects to exactly the addresses the
resolver returns, and the resolver returns only addresses it has checked, from one lookup.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.helpers import is_ip_address
from aiohttp.resolver import ThreadedResolver

from ..ip_blocks import IPAddress, is_public, parse, refusal

__all__ = [
    "AddressRefused",
    "CheckedResolver",
    "IPAddress",
    "Lookup",
    "checked_addresses",
    "checked_literal",
    "is_public",
    "looks_like_ip",
    "parse",
    "refusal",
]

Lookup = Callable[[str, int, socket.AddressFamily], Awaitable[list[ResolveResult]]]


class AddressRefused(Exception):
    """A host resolved to an address that must not be fetched from (or to no address)."""

    def __init__(self, host: str, address: str | None, reason: str):
        self.host = host
        self.address = address
        self.reason = reason
        super().__init__(
            f"{host} resolves to no address"
            if address is None
            else f"{host} resolves to the non-public address {address} ({reason})"
        )


def checked_addresses(
    host: str, addresses: Sequence[str], allow_private: bool = False
) -> list[str]:
    """The addresses of `host` to connect to: all of them, or AddressRefused if any is bad."""
    if not addresses:
        raise AddressRefused(host, None, "no address")
    for address in addresses:
        try:
            reason = refusal(address, allow_private)
        except ValueError:
            # Anything but a numeric address would be resolved again when connecting.
            reason = "not an IP address"
        if reason is not None:
            # One bad address refuses the host: a client may connect to any of them, and a
            # rebinding name would simply put its private address first or last.
            raise AddressRefused(host, address, reason)
    return list(addresses)


def looks_like_ip(host: str) -> bool:
    """Whether an HTTP client would connect to `host` as written instead of resolving it."""
    # aiohttp's own test decides whether its resolver is consulted at all; the digits-and-dots
    # test also catches legacy forms (2130706433, 127.1) that sockets map onto addresses.
    return is_ip_address(host) or ":" in host or host.replace(".", "").isdigit()


def checked_literal(host: str, allow_private: bool = False) -> str | None:
    """The address a literal IP host names, checked; None when `host` is a name to resolve."""
    if not looks_like_ip(host):
        return None
    try:
        address = str(parse(host))
    except ValueError as exc:
        raise AddressRefused(host, host, "not a canonical IP address") from exc
    checked_addresses(host, [host], allow_private)
    return address


class CheckedResolver(AbstractResolver):
    """An aiohttp resolver that looks a host up once and returns only addresses it checked."""

    def __init__(self, allow_private: bool = False, lookup: Lookup | None = None):
        self.allow_private = allow_private
        self._lookup = lookup
        self._threaded: ThreadedResolver | None = None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve `host`; AddressRefused when any of its addresses is not allowed."""
        # aiohttp connects to literal IPs without asking its resolver, so callers must also
        # call checked_literal; checking here too covers any client that does ask.
        checked_literal(host, self.allow_private)
        results = await (self._lookup or self._default_lookup)(host, port, family)
        checked_addresses(host, [result["host"] for result in results], self.allow_private)
        # The very records that were checked: aiohttp connects to their "host" and "port".
        return results

    async def _default_lookup(
        self, host: str, port: int, family: socket.AddressFamily
    ) -> list[ResolveResult]:
        if self._threaded is None:
            # Created here because it binds the running loop.
            self._threaded = ThreadedResolver()
        return await self._threaded.resolve(host, port, family)

    async def close(self) -> None:
        """Release the underlying resolver."""
        if self._threaded is not None:
            await self._threaded.close()
            self._threaded = None
