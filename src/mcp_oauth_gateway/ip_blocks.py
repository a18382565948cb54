"""The IANA special-purpose address registries, and what they say of an address: which block
holds it, whether it is publicly routable, and which IPv4 address an IPv6 form carries.

"Public" is decided from an explicit copy of the IANA IPv4 and IPv6 Special-Purpose Address
Registries rather than from `ipaddress` properties alone, because those changed between Python
releases (3.11 treats 100.64.0.0/10 and multicast as global, for instance). Addresses that embed
an IPv4 address are judged by the IPv4 rules, since that is where their packets end up. Used by
the Broker (whose client metadata documents may come only from public addresses) and by the
control plane (what a tenant may make the gateway connect to in a cluster).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Block:
    """A special-purpose block; `name` is its registry name and RFC, quoted in refusals."""

    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    name: str
    # Never a unicast host anyone could serve a document from: refused even when private
    # addresses are allowed (--allow-local-client-metadata), because connecting to, say,
    # 0.0.0.0 reaches the gateway's own machine on Linux, which is never what a client meant.
    never: bool = False


def _blocks(*rows: tuple[str, str] | tuple[str, str, bool]) -> tuple[Block, ...]:
    built = [
        Block(ipaddress.ip_network(row[0]), row[1], len(row) == 3 and bool(row[-1])) for row in rows
    ]
    # Most specific first, so a refusal names the narrowest entry (192.0.0.9 is "PCP Anycast",
    # not "IETF Protocol Assignments").
    return tuple(sorted(built, key=lambda block: -block.network.prefixlen))


# IANA IPv4 Special-Purpose Address Registry: every entry whose "Globally Reachable" is not
# True, plus a few that are but can never host a document. Deliberately absent (globally
# reachable, ordinary unicast): 192.31.196.0/24 AS112-v4 (RFC 7535) and 192.52.193.0/24 AMT
# (RFC 7450).
IPV4_BLOCKS = _blocks(
    ("0.0.0.0/8", '"This network", RFC 791 §3.2', True),
    ("0.0.0.0/32", '"This host on this network", RFC 1122 §3.2.1.3', True),
    ("10.0.0.0/8", "Private-Use, RFC 1918"),
    ("100.64.0.0/10", "Shared Address Space, RFC 6598"),  # CGNAT; also cloud metadata services
    ("127.0.0.0/8", "Loopback, RFC 1122 §3.2.1.3"),
    ("169.254.0.0/16", "Link Local, RFC 3927"),  # 169.254.169.254: cloud instance metadata
    ("172.16.0.0/12", "Private-Use, RFC 1918"),
    ("192.0.0.0/24", "IETF Protocol Assignments, RFC 6890 §2.1"),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix, RFC 7335"),
    ("192.0.0.8/32", "IPv4 dummy address, RFC 7600"),
    # The next two are marked globally reachable, but they are anycast service addresses
    # (PCP, TURN) and never serve HTTP documents.
    ("192.0.0.9/32", "Port Control Protocol Anycast, RFC 7723"),
    ("192.0.0.10/32", "Traversal Using Relays around NAT Anycast, RFC 8155"),
    ("192.0.0.170/32", "NAT64/DNS64 Discovery, RFC 8880"),
    ("192.0.0.171/32", "NAT64/DNS64 Discovery, RFC 8880"),
    ("192.0.2.0/24", "Documentation (TEST-NET-1), RFC 5737"),
    ("192.88.99.0/24", "Deprecated (6to4 Relay Anycast), RFC 7526"),  # relays only, retired
    ("192.168.0.0/16", "Private-Use, RFC 1918"),
    ("198.18.0.0/15", "Benchmarking, RFC 2544"),
    ("198.51.100.0/24", "Documentation (TEST-NET-2), RFC 5737"),
    ("203.0.113.0/24", "Documentation (TEST-NET-3), RFC 5737"),
    # Not in the special-purpose registry but never a unicast host: multicast (IANA IPv4
    # Multicast Address Space registry).
    ("224.0.0.0/4", "Multicast, RFC 5771", True),
    ("240.0.0.0/4", "Reserved, RFC 1112 §4", True),
    ("255.255.255.255/32", "Limited Broadcast, RFC 8190 / RFC 919 §7", True),
)

# IANA IPv6 Special-Purpose Address Registry, same rule. ::ffff:0:0/96 (IPv4-mapped),
# ::/96 (IPv4-compatible) and 64:ff9b::/96 (NAT64 well-known prefix) are not listed: they are
# judged by the IPv4 address they carry (see `embedded_ipv4`). Deliberately absent (globally
# reachable): 2620:4f:8000::/48 AS112 direct delegation (RFC 7534).
IPV6_BLOCKS = _blocks(
    ("::1/128", "Loopback Address, RFC 4291 §2.5.3"),
    ("::/128", "Unspecified Address, RFC 4291 §2.5.2", True),
    ("64:ff9b:1::/48", "IPv4-IPv6 Translat. (local-use), RFC 8215"),
    ("100::/64", "Discard-Only Address Block, RFC 6666"),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix, RFC 9780"),
    # 2001::/23 is not globally reachable as a whole. Its globally reachable sub-entries
    # (PCP/TURN/DNS-SD anycast 2001:1::1-3, AMT 2001:3::/32, AS112-v6 2001:4:112::/48,
    # ORCHIDv2 2001:20::/28, DETs 2001:30::/28) are anycast services or cryptographic
    # identifiers, never a document host, so the whole block is refused.
    ("2001::/23", "IETF Protocol Assignments, RFC 2928"),
    ("2001::/32", "TEREDO, RFC 4380"),  # tunnels to an IPv4 host we cannot judge
    ("2001:2::/48", "Benchmarking, RFC 5180"),
    ("2001:10::/28", "Deprecated (previously ORCHID), RFC 4843"),
    ("2001:db8::/32", "Documentation, RFC 3849"),
    # 6to4 is refused outright rather than judged by its embedded IPv4 address: a site that
    # numbers its own hosts 2002:<its public IPv4>::/48 would otherwise let a caller reach
    # them through a "public" embedded address.
    ("2002::/16", "6to4, RFC 3056"),
    ("3fff::/20", "Documentation, RFC 9637"),
    ("5f00::/16", "Segment Routing (SRv6) SIDs, RFC 9602"),
    ("fc00::/7", "Unique-Local, RFC 4193"),  # fd00:ec2::254: AWS instance metadata over IPv6
    ("fe80::/10", "Link-Local Unicast, RFC 4291 §2.5.6"),
    ("fec0::/10", "Site-Local (deprecated), RFC 3879"),
    ("ff00::/8", "Multicast, RFC 4291 §2.7", True),
)

# Everything else outside 2000::/3 is "Reserved by IETF" in the IANA IPv6 Address Space
# registry: no one can be assigned it, so nothing there is a public host.
GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
EMBEDDING = (
    (IPV4_MAPPED, "IPv4-mapped Address, RFC 4291 §2.5.5.2"),
    (IPV4_COMPATIBLE, "IPv4-compatible Address (deprecated), RFC 4291 §2.5.5.1"),
    (NAT64_WELL_KNOWN, "IPv4-IPv6 Translat., RFC 6052"),
)


def parse(address: str) -> IPAddress:
    """The IP address `address` spells, strictly (no names, no legacy IPv4 forms)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
        # The zone only picks an interface; the address is judged without it.
        ip = ipaddress.IPv6Address(int(ip))
    return ip


def block_of(ip: IPAddress) -> Block | None:
    for block in IPV4_BLOCKS if ip.version == 4 else IPV6_BLOCKS:
        if ip in block.network:
            return block
    return None


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    # ::/128 and ::1 sit inside ::/96 but are IPv6's own unspecified and loopback addresses.
    if ip in IPV4_COMPATIBLE and int(ip) <= 1:
        return None
    for network, name in EMBEDDING:
        if ip in network:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), name
    return None


def refusal(address: IPAddress | str, allow_private: bool = False) -> str | None:
    """Why `address` may not be fetched from (its registry entry), or None when it may be."""
    ip = parse(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = embedded_ipv4(ip)
        if embedded is not None:
            inner, name = embedded
            reason = refusal(inner, allow_private)
            return None if reason is None else f"{name}: {inner} is {reason}"
    block = block_of(ip)
    if block is not None and (block.never or not allow_private):
        return block.name
    if allow_private:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip not in GLOBAL_UNICAST:
        return "Reserved by IETF (outside Global Unicast 2000::/3), RFC 4291 §2.4"
    if not ip.is_global:
        # Belt and braces: a Python that knows of a newer registry entry refuses it too.
        return "not globally reachable according to Python's ipaddress module"
    return None


def is_public(address: IPAddress | str) -> bool:
    """Whether `address` is publicly routable: no special-purpose registry entry holds it."""
    return refusal(address) is None
