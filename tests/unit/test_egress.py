"""Where a tenant may make the gateway connect in a cluster: the operator's allow-list for the
hosts tenants write, and the addresses the gateway never connects to, whatever a name resolves
to. Pure decisions, and resolvers fed by a fake DNS: nothing here connects anywhere."""

from __future__ import annotations

import ipaddress

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane.egress import EgressRules, parse_pattern
from mcp_oauth_gateway.controlplane.egress_resolver import (
    EgressRefused,
    EgressResolver,
    checked_address,
    literal_refusal,
)
from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.proxy.upstream import UpstreamError

from .fake_dns import FakeLookup
from .fuzz_settings import FUZZ

POD = ipaddress.ip_address("10.1.2.3")
NONE = EgressRules.of([], [POD])
ANY = EgressRules.of(["*"], [POD])

# (address, words the refusal must say): never connected to, whatever the allow-list says.
NEVER = [
    ("169.254.169.254", "link-local"),  # AWS, GCP, Azure, Oracle, DigitalOcean metadata
    ("169.254.0.1", "link-local"),
    ("fe80::1", "link-local"),
    ("100.100.100.200", "Alibaba Cloud instance metadata"),
    ("fd00:ec2::254", "AWS instance metadata"),
    ("0.0.0.0", "This"),  # Linux connects 0.0.0.0 to the machine itself
    ("::", "Unspecified"),
    ("224.0.0.1", "Multicast"),
    ("255.255.255.255", "Broadcast"),
    ("10.1.2.3", "the gateway's own pod"),
    # IPv6 forms that carry one of them, judged by what they carry.
    ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::a9fe:a9fe", "link-local"),
    ("::ffff:10.1.2.3", "own pod"),
]


@pytest.mark.parametrize(("address", "words"), NEVER)
def test_some_addresses_are_never_connected_to_whatever_the_allow_list_says(address, words):
    everything = EgressRules.of(["*", "0.0.0.0/0", "::/0", "169.254.0.0/16"], [POD])
    for rules in (NONE, ANY, everything):
        why = rules.address_refusal(ipaddress.ip_address(address))
        assert why is not None, (address, rules)
        assert words in why, why
        assert rules.host_refusal(address, "tenant") is not None
        assert rules.host_refusal(f"[{address}]", "tenant") is not None


def test_loopback_only_through_an_entry_naming_a_loopback_network():
    for address in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        ip = ipaddress.ip_address(address)
        assert "loopback" in (ANY.address_refusal(ip) or ""), address
        assert ANY.host_refusal(address, "tenant") is not None
    laptop = EgressRules.of(["127.0.0.0/8", "::1"])
    assert laptop.address_refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert laptop.host_refusal("127.0.0.1", "tenant") is None
    assert laptop.host_refusal("::1", "tenant") is None
    # `localhost` is loopback by name: `*` does not cover it, an entry naming it does.
    assert ANY.host_refusal("localhost", "tenant") is not None
    assert ANY.host_refusal("api.localhost", "tenant") is not None
    assert EgressRules.of(["localhost"]).host_refusal("LOCALHOST.", "tenant") is None


def test_a_namespaced_entry_allows_that_namespace_only():
    rules = EgressRules.of(["platform=*", "platform=127.0.0.0/8", "team-a=*.example.com"])
    assert rules.host_refusal("anything.example.org", "platform") is None
    assert rules.host_refusal("127.0.0.1", "platform") is None
    why = rules.host_refusal("127.0.0.1", "team-a")
    assert why is not None
    assert rules.host_refusal("mcp.example.com", "team-a") is None
    assert rules.host_refusal("mcp.example.com", "team-b") is not None
    assert rules.host_refusal("example.com", "team-a") is not None  # *.DOMAIN: not the apex
    assert "team-b" in (rules.host_refusal("mcp.example.com", "team-b") or "")


def test_without_entries_a_tenant_names_no_host_and_is_told_to_use_a_service():
    why = NONE.host_refusal("mcp.other-tenant.svc.cluster.local", "tenant")
    assert why is not None
    assert "serve --allow-hosts" in why
    assert "Service" in why
    assert NONE.host_refusal("10.0.0.5", "tenant") is not None
    assert NONE.url_refusal("http://idp.example/jwks", "tenant") is not None


def test_addresses_and_networks_in_the_allow_list():
    rules = EgressRules.of(["10.20.0.0/16", "2001:db8::/32", "192.0.2.7"])
    assert rules.host_refusal("10.20.3.4", "t") is None
    assert rules.host_refusal("10.21.3.4", "t") is not None
    assert rules.host_refusal("2001:db8::5", "t") is None
    assert rules.host_refusal("192.0.2.7", "t") is None
    # An address entry says nothing of names.
    assert rules.host_refusal("mcp.example", "t") is not None


def test_legacy_numeric_forms_are_not_hosts():
    for host in ("2130706433", "127.1", "0x7f.1", "017700000001"):
        if host.replace(".", "").isdigit():
            assert ANY.host_refusal(host, "t") is not None, host
            assert literal_refusal(ANY, host) is not None, host


def test_unix_sockets_and_hostless_urls_are_never_a_tenants():
    assert "local socket" in (ANY.url_refusal("unix:///var/run/redis.sock", "t") or "")
    assert ANY.url_refusal("redis://cache.example:6379/0", "t") is None
    assert ANY.url_refusal("redis://:pw@169.254.169.254:6379/0", "t") is not None


@pytest.mark.parametrize(
    "text",
    ["", "http://x", "x/8", "*.", "*.-a", "a..b", "10.0.0.1/8", "Team=*", "x y", "2130706433"],
)
def test_a_bad_pattern_says_what_is_expected(text):
    with pytest.raises(ValueError, match=r"pattern|namespace|DNS name|not a|host"):
        parse_pattern(text)


@FUZZ
@given(st.ip_addresses())
def test_every_address_of_a_never_block_is_refused_in_every_form(ip):
    rules = EgressRules.of(["*", "0.0.0.0/0", "::/0"], [POD])
    why = rules.address_refusal(ip)
    inner = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    judged = inner or ip
    if judged in ipaddress.ip_network("169.254.0.0/16") or (
        isinstance(judged, ipaddress.IPv6Address) and judged in ipaddress.ip_network("fe80::/10")
    ):
        assert why is not None
    if why is None:
        # Whatever is allowed is also what the host check allows as a literal.
        assert rules.host_refusal(str(ip), "t") is None


async def test_the_resolver_hands_aiohttp_only_checked_addresses():
    lookup = FakeLookup(
        {
            "mcp.tenant.svc.cluster.local": ["10.96.0.12"],
            "rebinding.example": ["93.184.215.14", "169.254.169.254"],
            "metadata.google.internal": ["169.254.169.254"],
            "itself.example": ["10.1.2.3"],
        }
    )
    resolver = EgressResolver(ANY, lookup)
    found = await resolver.resolve("mcp.tenant.svc.cluster.local", 80)
    assert [r["host"] for r in found] == ["10.96.0.12"]
    for host, words in (
        ("rebinding.example", "link-local"),
        ("metadata.google.internal", "link-local"),
        ("itself.example", "own pod"),
    ):
        with pytest.raises(EgressRefused, match=words):
            await resolver.resolve(host, 80)
    assert issubclass(EgressRefused, aiohttp.ClientError)  # every caller reports it as such


async def test_an_address_in_the_url_is_checked_before_any_connection():
    assert literal_refusal(ANY, "169.254.169.254") is not None
    assert literal_refusal(ANY, "mcp.example") is None  # a name: checked once resolved
    with pytest.raises(EgressRefused, match="link-local"):
        await checked_address(ANY, "169.254.169.254", 80)
    with pytest.raises(EgressRefused, match="loopback"):
        await checked_address(ANY, "127.0.0.1", 80)
    assert await checked_address(EgressRules.of(["127.0.0.0/8"]), "127.0.0.1", 80) == "127.0.0.1"


async def test_the_proxy_refuses_a_backend_name_that_resolves_to_loopback():
    # `localhost` comes from /etc/hosts: no DNS, and the refusal comes before any connection.
    upstream = RawUpstream(egress=ANY)
    try:
        with pytest.raises(UpstreamError, match="loopback"):
            await upstream.request("POST", "http://localhost:9/mcp", [], b"{}", 5)
    finally:
        await upstream.close()


async def test_the_gateways_own_listeners_are_never_a_backend_even_where_loopback_is_allowed():
    laptop = EgressRules.of(["127.0.0.0/8", "::1"], [POD], own_ports=[9090, 9091])
    for host in ("127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "0.0.0.0"):
        why = laptop.host_refusal(host, "tenant", 9090) or ""
        assert "own admin or health listener" in why or "This" in why, host
    assert laptop.host_refusal("127.0.0.1", "tenant", 8000) is None
    assert laptop.url_refusal("http://127.0.0.1:9091/keys", "tenant") is not None
    assert laptop.url_refusal("http://127.0.0.1:8080/keys", "tenant") is None
    with pytest.raises(EgressRefused, match="own admin or health listener"):
        await checked_address(laptop, "localhost", 9090)  # a name resolving there
    resolver = EgressResolver(laptop, FakeLookup({"sneaky.example": ["127.0.0.1"]}))
    with pytest.raises(EgressRefused, match="own admin or health listener"):
        await resolver.resolve("sneaky.example", 9091)
    assert await checked_address(laptop, "localhost", 8000) in ("127.0.0.1", "::1")
