"""Where a Redis is, as operators run it: one server (`redis://`, `rediss://`, `unix:`), a
Sentinel set (`redis+sentinel://:PASSWORD@h1:26379,h2:26379/SERVICE/DB`) or a Cluster
(`redis+cluster://:PASSWORD@h1:7000,h2:7001/`), TLS with the `rediss` spellings of each. redis-py
reads only the first form from a URL, so the others are read here: one reading for every
place that takes a Redis URL, and one way to show it (never its passwords).

A Sentinel set's own password, when it has one, is the `sentinel_password` query parameter
(the sentinels and the servers usually have different ones)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlsplit

SINGLE = ("redis", "rediss", "unix")
SENTINEL = ("redis+sentinel", "rediss+sentinel")
CLUSTER = ("redis+cluster", "rediss+cluster")
_FORMS = (
    "redis://[:PASSWORD@]HOST:PORT/DB, rediss://… (TLS), unix:///PATH, "
    "redis+sentinel://[:PASSWORD@]H1:PORT,H2:PORT/SERVICE[/DB][?sentinel_password=…] or "
    "redis+cluster://[:PASSWORD@]H1:PORT,H2:PORT/ (rediss+… for TLS)"
)
_DEFAULT_PORT = {"sentinel": 26379, "cluster": 6379}


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

    @property
    def shown(self) -> str:
        """The target as logs, errors and /status show it: never a password."""
        return shown_redis_url(self.url)


def shown_redis_url(url: str) -> str:
    """`url` without its user information or query (where passwords are)."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{hosts}{parts.path}"


def parse_redis_url(url: str, where: str = "the Redis URL") -> RedisTarget:
    """The target `url` names; ValueError naming `where` and the forms it may take."""
    scheme = url.partition(":")[0].lower()
    if scheme in SINGLE:
        return RedisTarget("single", url, tls=scheme == "rediss")
    if scheme not in SENTINEL + CLUSTER:
        raise ValueError(f"{where} {shown_redis_url(url)!r} is not a Redis URL: give {_FORMS}")
    kind: Literal["sentinel", "cluster"] = "sentinel" if scheme in SENTINEL else "cluster"
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, password = _credentials(userinfo)
    nodes = tuple(_node(h, kind, where) for h in hosts.split(",") if h)
    if not nodes:
        raise ValueError(f"{where} {shown_redis_url(url)!r} names no host: give {_FORMS}")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - {"sentinel_password"})
    if unknown or (kind == "cluster" and query):
        raise ValueError(
            f"{where} {shown_redis_url(url)!r}: unknown parameter {', '.join(unknown or query)} "
            "(a Sentinel URL takes sentinel_password; a Cluster URL takes none)"
        )
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
    )


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
