"""Where a tenant may make the gateway connect, in a cluster.

In controller mode the objects are written by tenants who do not trust each other, and every
host or URL in them is one the gateway connects to (with callers' requests, and with the
tenant's credentials). Two decisions, both pure:

- **Load time** (`EgressRules.host_refusal`): a host a tenant wrote itself (a GatewayBackend's
  `static.host`, a JWKS or Redis URL, an issuer the discovery document is fetched from, an
  ExternalName Service's `externalName`) is used only when the operator's allow-list
  (`serve --allow-hosts`) names it for the tenant's namespace. A Service reference needs no
  entry: the cluster's DNS name is the controller's own making.
- **Connect time** (`EgressRules.address_refusal`): whatever the name, the gateway never
  connects to a link-local or cloud metadata address, an unspecified, multicast or broadcast
  address, or an address of its own pod; to loopback only when an allow-list entry names a
  loopback network explicitly (a laptop, a test), never through `*`.

File mode has no rules: its files are the operator's own.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..ip_blocks import IPAddress, block_of, embedded_ipv4, parse
from ..urls import shown_url

# Link-local is where every major cloud serves instance metadata (169.254.169.254); these are
# the metadata services elsewhere, named so a refusal says what was reached for.
METADATA = {
    ipaddress.ip_address("100.100.100.200"): "Alibaba Cloud instance metadata",
    ipaddress.ip_address("fd00:ec2::254"): "AWS instance metadata over IPv6",
}
LINK_LOCAL = (
    (ipaddress.ip_network("169.254.0.0/16"), "link-local, RFC 3927 (cloud instance metadata)"),
    (ipaddress.ip_network("fe80::/10"), "link-local, RFC 4291"),
)
LOOPBACK_NAMES = ("localhost",)
FLAG = "serve --allow-hosts"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
HOST_LABEL = re.compile(r"[a-z0-9_]([-a-z0-9_]{0,61}[a-z0-9_])?")


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One allow-list entry: `[NAMESPACE=]` and `*`, `NAME`, `*.DOMAIN`, an address or a CIDR."""

    text: str
    namespace: str | None = None
    name: str | None = None
    suffix: str | None = None
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None

    @property
    def any(self) -> bool:
        """`*`: every name, and every address no rule refuses (never loopback)."""
        return self.name is None and self.suffix is None and self.network is None

    def applies_to(self, namespace: str) -> bool:
        """Whether the entry is for tenants of `namespace`."""
        return self.namespace is None or self.namespace == namespace

    def names(self, host: str) -> bool:
        """Whether the entry names the (lowercase) host name `host`."""
        if self.suffix is not None:
            return host.endswith(self.suffix) and len(host) > len(self.suffix)
        return self.any or host == self.name

    def holds(self, ip: IPAddress) -> bool:
        """Whether the entry's network holds `ip` (`*` holds no address explicitly)."""
        return self.network is not None and ip in self.network


def _normal_host(text: str) -> str:
    return text.strip().lower().removesuffix(".").removeprefix("[").removesuffix("]")


def parse_pattern(text: str) -> HostPattern:
    """An allow-list entry as the operator wrote it; ValueError naming the form expected."""
    namespace, _, rest = text.rpartition("=")
    raw = rest.strip().lower()
    if namespace and not _is_label(namespace):
        raise ValueError(f"{text!r}: {namespace!r} is not a namespace name")
    scope = namespace or None
    if raw == "*":
        return HostPattern(text, scope)
    if raw.startswith("*."):
        domain = raw[2:].removesuffix(".")
        if not _is_dns_name(domain):
            raise ValueError(f"{text!r}: {domain!r} after '*.' is not a DNS name")
        return HostPattern(text, scope, suffix="." + domain)
    host = _normal_host(raw)
    try:
        network = ipaddress.ip_network(host, strict=True)
    except ValueError:
        network = None
    if network is not None:
        return HostPattern(text, scope, network=network)
    if "/" in host or not _is_dns_name(host) or host.replace(".", "").isdigit():
        raise ValueError(
            f"{text!r} is not a host pattern: give *, a DNS name, *.DOMAIN, an IP address or a "
            "CIDR such as 10.0.0.0/8, optionally after NAMESPACE="
        )
    return HostPattern(text, scope, name=host)


def _is_label(text: str) -> bool:
    return DNS_LABEL.fullmatch(text) is not None


def _is_dns_name(text: str) -> bool:
    # Underscores appear in real internal names (SRV-style records); hosts are matched as text.
    return len(text) <= 253 and all(HOST_LABEL.fullmatch(label) for label in text.split("."))


def address_of(host: str) -> IPAddress | None:
    """The address a host written as an IP literal names (brackets allowed), else None."""
    try:
        return parse(_normal_host(host))
    except ValueError:
        return None


def looks_numeric(host: str) -> bool:
    """Digits and dots only (`2130706433`, `127.1`): what sockets read as legacy IPv4 forms."""
    return host.replace(".", "").isdigit()


@dataclass(frozen=True, slots=True)
class EgressRules:
    """The operator's allow-list and the addresses of the gateway's own pod."""

    patterns: tuple[HostPattern, ...] = ()
    own: frozenset[IPAddress] = frozenset()
    # The gateway's own admin and health listeners: never a tenant's backend, even on a laptop
    # where loopback is allowed (`/config` lists every tenant's routes and rules).
    own_ports: frozenset[int] = frozenset()

    @classmethod
    def of(
        cls, entries: Iterable[str], own: Iterable[IPAddress] = (), own_ports: Iterable[int] = ()
    ) -> EgressRules:
        """Rules from `--allow-hosts` entries (ValueError naming a bad one)."""
        patterns = tuple(parse_pattern(e) for e in entries if e.strip())
        mine = frozenset(ip for ip in own if not ip.is_loopback)
        return cls(patterns, mine, frozenset(own_ports))

    def connection_refusal(self, ip: IPAddress, port: int | None) -> str | None:
        """`address_refusal`, and never the gateway's own listeners on its own addresses."""
        why = self.address_refusal(ip)
        if why is not None or port not in self.own_ports:
            return why
        inner = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        host = inner[0] if inner is not None else ip
        if host.is_loopback or host.is_unspecified or host in self.own:
            return f"{ip} port {port} is the gateway's own admin or health listener"
        return None

    def address_refusal(self, ip: IPAddress) -> str | None:
        """Why the gateway must not connect to `ip` (None: it may), whoever named it."""
        if isinstance(ip, ipaddress.IPv6Address):
            inner = embedded_ipv4(ip)
            if inner is not None:
                why = self.address_refusal(inner[0])
                return None if why is None else f"{ip} carries {inner[0]}: {why}"
        if ip in METADATA:
            return f"{ip} is {METADATA[ip]}"
        for network, name in LINK_LOCAL:
            if ip in network:
                return f"{ip} is {name}"
        block = block_of(ip)
        if block is not None and block.never:
            return f"{ip} is {block.name}"
        if ip in self.own:
            return f"{ip} is an address of the gateway's own pod"
        if ip.is_loopback and not any(p.holds(ip) for p in self.patterns):
            return (
                f"{ip} is loopback (the gateway's own machine); only an {FLAG} entry naming a "
                "loopback network allows it"
            )
        return None

    def host_refusal(self, host: str, namespace: str, port: int | None = None) -> str | None:
        """Why a tenant of `namespace` may not name `host` (and `port`) itself (None: it may)."""
        ip = address_of(host)
        mine = [p for p in self.patterns if p.applies_to(namespace)]
        if ip is not None:
            why = self.connection_refusal(ip, port)
            if why is not None:
                return why
            # `*` never covers loopback: only a network entry for this namespace does.
            if any(p.holds(ip) or (p.any and not ip.is_loopback) for p in mine):
                return None
            if ip.is_loopback:
                return (
                    f"{ip} is loopback (the gateway's own machine); only an {FLAG} entry naming "
                    f"a loopback network for namespace {namespace} allows it"
                )
            return self._not_allowed(str(ip), namespace)
        name = _normal_host(host)
        if looks_numeric(name):
            return f"{host!r} is not a canonical IP address or a DNS name"
        loopback = name in LOOPBACK_NAMES or name.endswith(".localhost")
        if any(p.names(name) and not (loopback and p.any) for p in mine):
            return None
        return self._not_allowed(name, namespace)

    def url_refusal(self, url: str, namespace: str) -> str | None:
        """`host_refusal` for the host of an http(s) or Redis URL (`unix:` sockets never)."""
        parts = urlsplit(url)
        if parts.scheme == "unix" or not parts.hostname:
            return (
                f"{shown_url(url)!r} names no host: a tenant's URL must be a network one "
                "(a local socket is the gateway's own)"
            )
        try:
            port = parts.port
        except ValueError:
            port = None  # the models refuse such a URL; nothing to add here
        return self.host_refusal(parts.hostname, namespace, port)

    def _not_allowed(self, host: str, namespace: str) -> str:
        return (
            f"{host} is not a host the gateway's operator lets namespace {namespace} name "
            f"({FLAG}); refer to a Service in the namespace instead, or ask the operator to "
            f"allow it"
        )
