"""Which addresses a client metadata document may be fetched from: every IANA special-purpose
block, the forms that embed IPv4, and the resolver that hands aiohttp only checked addresses.
No test here touches the network: lookups are fakes."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from mcp_oauth_gateway.broker.addresses import (
    AddressRefused,
    CheckedResolver,
    checked_addresses,
    checked_literal,
    is_public,
    refusal,
)

from .fake_dns import FakeLookup

# Written out independently of the module's table: (block, words its refusal must quote).
SPECIAL_IPV4 = [
    ("0.0.0.0/8", "This network"),
    ("0.0.0.0/32", "This host on this network"),
    ("10.0.0.0/8", "RFC 1918"),
    ("100.64.0.0/10", "Shared Address Space, RFC 6598"),
    ("127.0.0.0/8", "Loopback"),
    ("169.254.0.0/16", "Link Local, RFC 3927"),
    ("172.16.0.0/12", "RFC 1918"),
    ("192.0.0.0/24", "IETF Protocol Assignments"),
    ("192.0.0.0/29", "IPv4 Service Continuity Prefix, RFC 7335"),
    ("192.0.0.8/32", "IPv4 dummy address, RFC 7600"),
    ("192.0.0.9/32", "Port Control Protocol Anycast, RFC 7723"),
    ("192.0.0.10/32", "RFC 8155"),
    ("192.0.0.170/32", "NAT64/DNS64 Discovery"),
    ("192.0.0.171/32", "NAT64/DNS64 Discovery"),
    ("192.0.2.0/24", "TEST-NET-1"),
    ("192.88.99.0/24", "6to4 Relay Anycast"),
    ("192.168.0.0/16", "RFC 1918"),
    ("198.18.0.0/15", "Benchmarking, RFC 2544"),
    ("198.51.100.0/24", "TEST-NET-2"),
    ("203.0.113.0/24", "TEST-NET-3"),
    ("224.0.0.0/4", "Multicast"),
    ("240.0.0.0/4", "Reserved"),
    ("255.255.255.255/32", "Limited Broadcast"),
]
SPECIAL_IPV6 = [
    ("::1/128", "Loopback Address"),
    ("::/128", "Unspecified Address"),
    ("64:ff9b:1::/48", "local-use"),
    ("100::/64", "Discard-Only"),
    ("100:0:0:1::/64", "Dummy IPv6 Prefix"),
    ("2001::/23", "IETF Protocol Assignments"),
    ("2001::/32", "TEREDO"),
    ("2001:2::/48", "Benchmarking, RFC 5180"),
    ("2001:10::/28", "ORCHID"),
    ("2001:db8::/32", "Documentation, RFC 3849"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "Documentation, RFC 9637"),
    ("5f00::/16", "SRv6"),
    ("fc00::/7", "Unique-Local"),
    ("fe80::/10", "Link-Local"),
    ("fec0::/10", "Site-Local"),
    ("ff00::/8", "Multicast"),
]
SPECIAL = [(ipaddress.ip_network(block), words) for block, words in SPECIAL_IPV4 + SPECIAL_IPV6]


def _samples() -> list[tuple[str, str]]:
    """First, middle and last address of every block, each with the narrowest block's words."""
    samples: dict[str, str] = {}
    for network, _ in SPECIAL:
        for ip in {network[0], network[network.num_addresses // 2], network[-1]}:
            holders = [(n, w) for n, w in SPECIAL if n.version == ip.version and ip in n]
            samples[str(ip)] = max(holders, key=lambda holder: holder[0].prefixlen)[1]
    return sorted(samples.items())


@pytest.mark.parametrize(("address", "words"), _samples())
def test_every_special_purpose_address_is_refused_with_its_registry_name(address, words):
    reason = refusal(address)
    assert reason is not None
    assert words in reason
    assert not is_public(address)


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("100.64.0.1", "Shared Address Space"),
        ("100.100.100.200", "Shared Address Space"),  # Alibaba Cloud metadata
        ("169.254.169.254", "Link Local"),  # AWS/GCP/Azure instance metadata
        ("fd00:ec2::254", "Unique-Local"),  # AWS instance metadata over IPv6
        ("fe80::1%eth0", "Link-Local"),  # a zone does not hide the address
        ("4000::1", "outside Global Unicast"),  # unassigned IPv6
        ("::1:0:0:0", "outside Global Unicast"),
    ],
)
def test_cloud_metadata_and_reserved_addresses_are_refused(address, words):
    assert words in (refusal(address) or "")


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("::ffff:10.0.0.1", "IPv4-mapped Address, RFC 4291 §2.5.5.2: 10.0.0.1 is Private-Use"),
        ("::ffff:127.0.0.1", "IPv4-mapped Address, RFC 4291 §2.5.5.2: 127.0.0.1 is Loopback"),
        ("::ffff:100.100.100.200", "100.100.100.200 is Shared Address Space"),
        ("::ffff:169.254.169.254", "169.254.169.254 is Link Local"),
        ("::ffff:0.0.0.0", '0.0.0.0 is "This host'),
        ("::10.0.0.1", "IPv4-compatible Address (deprecated), RFC 4291 §2.5.5.1: 10.0.0.1"),
        ("::127.0.0.1", "IPv4-compatible Address (deprecated), RFC 4291 §2.5.5.1: 127.0.0.1"),
        ("::0.0.0.2", '0.0.0.2 is "This network'),
        ("64:ff9b::10.0.0.1", "IPv4-IPv6 Translat., RFC 6052: 10.0.0.1 is Private-Use"),
        ("64:ff9b::169.254.169.254", "RFC 6052: 169.254.169.254 is Link Local"),
        ("64:ff9b:1::8.8.8.8", "IPv4-IPv6 Translat. (local-use), RFC 8215"),
        ("2002:a00:1::1", "6to4, RFC 3056"),  # 6to4 of 10.0.0.1
        ("2002:808:808::1", "6to4, RFC 3056"),  # 6to4 of 8.8.8.8: refused all the same
        ("2001:0:4136:e378:8000:63bf:f5ff:fff5", "TEREDO, RFC 4380"),  # Teredo of 10.0.0.10
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "TEREDO, RFC 4380"),  # Teredo of 8.8.8.8
    ],
)
def test_addresses_embedding_ipv4_are_judged_by_the_ipv4_they_carry(address, words):
    assert words in (refusal(address) or "")


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.215.14",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.0",
        "192.167.255.255",
        "192.169.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "192.31.196.1",
        "192.52.193.1",  # AS112-v4 and AMT: globally reachable in the registry
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "2a00:1450:4001:80e::200e",
        "2001:200::1",  # just past 2001::/23
        "2620:4f:8000::1",  # AS112 direct delegation: globally reachable in the registry
        "::ffff:8.8.8.8",
        "::8.8.8.8",
        "64:ff9b::8.8.8.8",  # mapped/compatible/NAT64 of public
    ],
)
def test_ordinary_public_addresses_are_accepted(address):
    assert refusal(address) is None
    assert is_public(address)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.0.0.1",
        "100.64.0.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",
        "64:ff9b::10.0.0.1",
        "2002:a00:1::1",
    ],
)
def test_allow_private_allows_local_addresses(address):
    assert refusal(address, allow_private=True) is None
    assert refusal(address) is not None


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("0.0.0.0", "This host"),
        ("0.1.2.3", "This network"),
        ("::", "Unspecified"),
        ("224.0.0.1", "Multicast"),
        ("239.255.255.250", "Multicast"),
        ("ff02::1", "Multicast"),
        ("255.255.255.255", "Limited Broadcast"),
        ("240.0.0.1", "Reserved"),
        ("::ffff:0.0.0.0", "IPv4-mapped"),
        ("::ffff:224.0.0.1", "Multicast"),
    ],
)
def test_allow_private_still_refuses_what_is_never_a_host(address, words):
    assert words in (refusal(address, allow_private=True) or "")


def test_a_host_is_allowed_only_when_all_its_addresses_are():
    good = ["8.8.8.8", "2606:4700:4700::1111"]
    assert checked_addresses("cimd.example", good) == good
    with pytest.raises(AddressRefused) as refused:
        checked_addresses("cimd.example", ["8.8.8.8", "100.64.0.1", "1.1.1.1"])
    assert refused.value.host == "cimd.example"
    assert refused.value.address == "100.64.0.1"
    assert str(refused.value) == (
        "cimd.example resolves to the non-public address 100.64.0.1 "
        "(Shared Address Space, RFC 6598)"
    )
    with pytest.raises(AddressRefused, match="resolves to no address"):
        checked_addresses("cimd.example", [])
    # A record that is not a numeric address would be resolved again when connecting.
    with pytest.raises(AddressRefused, match="not an IP address"):
        checked_addresses("cimd.example", ["8.8.8.8", "internal.example"])
    assert checked_addresses("dev.test", ["127.0.0.1"], allow_private=True) == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("host", "result"),
    [
        ("cimd.example", None),
        ("8.8.8.8", "8.8.8.8"),
        ("2606:4700:4700::1111", "2606:4700:4700::1111"),
    ],
)
def test_checked_literal_passes_names_and_public_literals(host, result):
    assert checked_literal(host) == result


@pytest.mark.parametrize(
    ("host", "words"),
    [
        ("100.64.0.1", "Shared Address Space"),
        ("::ffff:a00:1", "10.0.0.1 is Private-Use"),
        ("2130706433", "not a canonical IP address"),  # 127.0.0.1 as one number
        ("127.1", "not a canonical IP address"),
        ("127.0.0.1.", "not a canonical IP address"),
        ("010.0.0.1", "not a canonical IP address"),
    ],
)
def test_checked_literal_refuses_private_and_legacy_literals(host, words):
    with pytest.raises(AddressRefused, match=words):
        checked_literal(host)


async def test_resolver_returns_exactly_the_checked_records_from_one_lookup():
    lookup = FakeLookup({"cimd.example": ["8.8.8.8", "2606:4700:4700::1111"]})
    resolver = CheckedResolver(lookup=lookup)
    results = await resolver.resolve("cimd.example", 443, socket.AF_UNSPEC)
    assert [(r["host"], r["port"]) for r in results] == [
        ("8.8.8.8", 443),
        ("2606:4700:4700::1111", 443),
    ]
    assert lookup.calls == ["cimd.example"]


@pytest.mark.parametrize(
    "answer",
    [
        ["10.0.0.1"],
        ["8.8.8.8", "100.100.100.200"],  # one private address among public ones
        ["::ffff:10.0.0.1"],
        ["fd00:ec2::254", "2606:4700:4700::1111"],
    ],
)
async def test_resolver_refuses_a_host_with_any_non_public_address(answer):
    resolver = CheckedResolver(lookup=FakeLookup({"rebind.example": answer}))
    with pytest.raises(AddressRefused, match=r"rebind\.example resolves to the non-public"):
        await resolver.resolve("rebind.example", 443)


async def test_resolver_checks_literal_ip_hosts_before_any_lookup():
    lookup = FakeLookup({"100.64.0.1": ["100.64.0.1"], "8.8.8.8": ["8.8.8.8"]})
    resolver = CheckedResolver(lookup=lookup)
    with pytest.raises(AddressRefused, match=r"100\.64\.0\.1 resolves to the non-public address"):
        await resolver.resolve("100.64.0.1", 443)
    with pytest.raises(AddressRefused, match="not a canonical IP address"):
        await resolver.resolve("2130706433", 443)
    assert lookup.calls == []
    assert [r["host"] for r in await resolver.resolve("8.8.8.8", 443)] == ["8.8.8.8"]


async def test_resolver_with_allow_private_allows_loopback_but_not_unspecified():
    lookup = FakeLookup({"dev.test": ["127.0.0.1"], "zero.test": ["0.0.0.0"]})
    resolver = CheckedResolver(allow_private=True, lookup=lookup)
    assert [r["host"] for r in await resolver.resolve("dev.test", 80)] == ["127.0.0.1"]
    with pytest.raises(AddressRefused, match=r"non-public address 0\.0\.0\.0 "):
        await resolver.resolve("zero.test", 80)
