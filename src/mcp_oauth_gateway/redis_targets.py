"""Where a Redis is, as operators run it: one server (`redis://`, `rediss://`, `unix:`), a
Sentinel set (`redis+sentinel://:PASSWORD@h1:26379,h2:26379/SERVICE/DB`) or a Cluster
(`redis+cluster://:PASSWORD@h1:7000,h2:7001/`), TLS with the `rediss` spellings of each. redis-py
reads only the first form from a URL, so the others are read here: one reading for every
place that takes a Redis URL, and one way to show it (never its passwords).

A Sentinel set's own password, when it has one, is the `sentinel_password` query parameter
(the sentinels and the servers usually have different ones). Every form takes `acks` (how many
replicas must have a critical write before it counts: 1 by default for Sentinel and Cluster,
0 for one server), `ack_timeout_ms` (how long a critical write waits for them, 1000) and, with
TLS, `ssl_ca_certs` (the CA file the servers' certificates are checked with)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

SINGLE = ("redis", "rediss", "unix")
SENTINEL = ("redis+sentinel", "rediss+sentinel")
CLUSTER = ("redis+cluster", "rediss+cluster")
REDIS_FORMS = (
    "redis://[:PASSWORD@]HOST:PORT/DB, rediss://… (TLS), unix:///PATH, "
    "redis+sentinel://[:PASSWORD@]H1:PORT,H2:PORT/SERVICE[/DB][?sentinel_password=…] or "
    "redis+cluster://[:PASSWORD@]H1:PORT,H2:PORT/ (rediss+… for TLS)"
)
_DEFAULT_PORT = {"sentinel": 26379, "cluster": 6379}
_ACK_PARAMETERS = ("acks", "ack_timeout_ms")
DEFAULT_ACK_TIMEOUT_MS = 1000
MAX_ACK_TIMEOUT_MS = 60_000


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A Redis as the gateway connects to it. `url` is the single server's own URL (redis-py
    reads it); `nodes` the sentinels or the cluster's seed nodes."""

    kind: Literal["single", "sentinel", "cluster"]
    url: str = field(repr=False)
    nodes: tuple[tuple[str, int], ...] = ()
    service: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sentinel_password: str | None = field(default=None, repr=False)
    tls: bool = False
    acks: int = 0
    ack_timeout_ms: int = DEFAULT_ACK_TIMEOUT_MS
    # The CA file TLS connections check the servers' certificates with (`ssl_ca_certs`, as
    # redis-py names it; a single server's URL passes it to redis-py itself).
    ca_file: str | None = None

    @property
    def shown(self) -> str:
        """The target as logs, errors and /status show it: never a password."""
        return shown_redis_url(self.url)


def shown_redis_url(url: str) -> str:
    """`url` without its user information (`***@` where it had one) or its query's values
    (where passwords are); `***` when a password written unencoded would leak into what is
    shown."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "***"
    if not url.isprintable() or "@" in parts.path + parts.query + parts.fragment:
        return "***"  # a user-info cut short by a `/`, `?` or `#` in it
    _, at, hosts = parts.netloc.rpartition("@")
    keys = [key for key, _ in parse_qsl(parts.query, keep_blank_values=True)]
    query = "?" + "&".join(f"{key}=***" for key in keys) if keys else ""
    return f"{parts.scheme}://{'***@' if at else ''}{hosts}{parts.path}{query}"


def parse_redis_url(url: str, where: str = "the Redis URL") -> RedisTarget:
    """The target `url` names; ValueError naming `where` and the forms it may take."""
    scheme = url.partition(":")[0].lower()
    if scheme not in SINGLE + SENTINEL + CLUSTER:
        raise ValueError(f"{where} {shown_redis_url(url)!r} is not a Redis URL: give {REDIS_FORMS}")
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if scheme in SINGLE:
        acks, timeout = _acks(query, 0, url, where)
        # redis-py reads the rest of the query (its own options) and would refuse these.
        rest = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in _ACK_PARAMETERS])
        own = urlunsplit(parts._replace(query=rest)) if rest != parts.query else url
        if scheme == "unix" and not own.startswith("unix://"):
            own = "unix://" + own[len("unix:") :]  # redis-py reads unix:///PATH only
        return RedisTarget("single", own, tls=scheme == "rediss", acks=acks, ack_timeout_ms=timeout)
    kind: Literal["sentinel", "cluster"] = "sentinel" if scheme in SENTINEL else "cluster"
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, password = _credentials(userinfo)
    nodes = tuple(_node(h, kind, where) for h in hosts.split(",") if h)
    if not nodes:
        raise ValueError(f"{where} {shown_redis_url(url)!r} names no host: give {REDIS_FORMS}")
    allowed = {*_ACK_PARAMETERS, "ssl_ca_certs"}
    allowed |= {"sentinel_password"} if kind == "sentinel" else set()
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise ValueError(
            f"{where} {shown_redis_url(url)!r}: unknown parameter {', '.join(unknown)} "
            "(a Sentinel URL takes sentinel_password, acks, ack_timeout_ms and ssl_ca_certs; a "
            "Cluster URL acks, ack_timeout_ms and ssl_ca_certs)"
        )
    acks, timeout = _acks(query, 1, url, where)
    service, db = _path(parts.path, kind, url, where)
    return RedisTarget(
        kind,
        url,
        nodes,
        service,
        db,
        username,
        password,
        query.get("sentinel_password") or None,
        scheme.startswith("rediss"),
        acks,
        timeout,
        query.get("ssl_ca_certs") or None,
    )


def _acks(query: dict[str, str], default: int, url: str, where: str) -> tuple[int, int]:
    """The `acks` and `ack_timeout_ms` parameters, checked."""
    shown = shown_redis_url(url)
    acks, timeout = query.get("acks", str(default)), query.get("ack_timeout_ms")
    if not acks.isdigit() or int(acks) > 16:
        raise ValueError(f"{where} {shown!r}: acks={acks!r} is not a number of replicas (0-16)")
    millis = DEFAULT_ACK_TIMEOUT_MS
    if timeout is not None:
        if not timeout.isdigit() or not 1 <= int(timeout) <= MAX_ACK_TIMEOUT_MS:
            raise ValueError(
                f"{where} {shown!r}: ack_timeout_ms={timeout!r} is not a number of "
                f"milliseconds from 1 to {MAX_ACK_TIMEOUT_MS}"
            )
        millis = int(timeout)
    return int(acks), millis


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


def _node(text: str, kind: str, where: str) -> tuple[str, int]:
    # Each host read as a URL's authority (an IPv6 address in brackets, an optional port).
    try:
        parts = urlsplit(f"//{text}")
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or parts.username is not None:
        raise ValueError(f"{where}: {text!r} is not HOST:PORT (an IPv6 address in brackets)")
    return host, port or _DEFAULT_PORT[kind]


def _path(path: str, kind: str, url: str, where: str) -> tuple[str | None, int]:
    segments = [s for s in path.split("/") if s]
    shown = shown_redis_url(url)
    if kind == "cluster":
        if segments not in ([], ["0"]):
            raise ValueError(f"{where} {shown!r}: a Redis Cluster has database 0 only")
        return None, 0
    if not segments or len(segments) > 2:
        raise ValueError(
            f"{where} {shown!r}: name the Sentinel service after the hosts, "
            "e.g. redis+sentinel://h1:26379,h2:26379/mymaster/0"
        )
    db = segments[1] if len(segments) == 2 else "0"
    if not db.isdigit():
        raise ValueError(f"{where} {shown!r}: the database {db!r} is not a number")
    return unquote(segments[0]), int(db)
