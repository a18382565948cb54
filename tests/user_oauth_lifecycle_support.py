"""The life of a user's upstream grant behind a `userOAuth` gateway, for the end-to-end tests of
refresh, revocation, restarts, key rotation, the operator's `grants` commands and the
connections page (issue 36): a caller's MCP call as the Python `mcp` client makes it, the link
it is asked to open and the browser that opens it, the grant as the store holds it (read with the
operator's key, as `grants` does), the audit trail, the gateway's metrics, an upstream AS whose
refresh answers can be held (so that every concurrent caller arrives while one refresh runs), and
`Evidence`: every file a gateway wrote and every upstream token issued, to prove none holds any.

Route callers are named apart from the upstream's users (a route subject such as
"expiry-user" signs in upstream as alice), so that the start-up probe's "alice" never has a
grant and each test owns its grant."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from joserfc.jwk import RSAKey
from mcp import MCPError

from connect_flow import Jar, Page, browse, drive_connect_async
from mcp_oauth_gateway.usertokens import Grant, load_keys, open_store
from upstream_as_support import AuthServer, OidcProviderAS
from upstream_servers_support import Upstream
from user_oauth_gateway_support import UserOAuthGateway, call_tool, user_oauth_gateway

ASKED = -32042  # the 2025-11-25 wire's URL elicitation required
SQLITE = "sqlite://"


# MCP calls.


async def whoami(setup: UserOAuthGateway, sub: str, mode: str = "legacy") -> dict[str, Any]:
    """`whoami` through the gateway as route caller `sub` (the Python `mcp` client: initialize,
    then the call); MCPError when the gateway answers with one (-32042: asked to connect)."""
    return (await call_tool(setup.mcp, setup.token(sub), "whoami", mode))[1]


async def asked_link(setup: UserOAuthGateway, sub: str) -> str:
    """The connect link `sub`'s call is answered with (it must be asked: -32042, URL mode)."""
    try:
        seen = await whoami(setup, sub)
    except MCPError as error:
        said = error.error
    else:
        raise AssertionError(f"{sub} was not asked to connect: the call answered {seen}")
    assert said.code == ASKED, f"expected {ASKED}, got {said}"
    assert isinstance(said.data, dict), said
    (elicitation,) = said.data["elicitations"]
    assert elicitation["mode"] == "url", elicitation
    return str(elicitation["url"])


async def connect(setup: UserOAuthGateway, sub: str, upstream_user: str) -> None:
    """Route caller `sub` asked, then connecting in its browser as `upstream_user` upstream."""
    link = await asked_link(setup, sub)
    page = await drive_connect_async(
        link, setup.route_login(sub), setup.upstream_login(upstream_user), setup.jar(sub)
    )
    assert "connected" in page, page


async def still_asked(setup: UserOAuthGateway, sub: str) -> None:
    """`sub`'s next call asks it to connect (whatever it had is gone)."""
    await asked_link(setup, sub)


# The grant as the store holds it.


async def stored(setup: UserOAuthGateway, sub: str) -> Grant | None:
    """Route caller `sub`'s one grant, read from the gateway's store with its key file (as the
    operator's `grants` commands read it); None when there is none, or none that opens."""
    store = open_store(setup.store, load_keys(setup.key_file), create=False)
    try:
        summaries = await store.list_user(setup.issuer, sub)
        assert len(summaries) <= 1, summaries
        return await store.get(summaries[0].key) if summaries else None
    finally:
        await store.close()


def sqlite_file(setup: UserOAuthGateway) -> Path | None:
    """The SQLite file of the gateway's store (None for Redis)."""
    return Path(setup.store.removeprefix(SQLITE)) if setup.store.startswith(SQLITE) else None


def grants_cli(setup: UserOAuthGateway, *args: str) -> subprocess.CompletedProcess[str]:
    """`mcp-oauth-gateway grants ARGS` on the gateway's store and key file."""
    flags = ["--user-token-store", setup.store, "--user-token-key", str(setup.key_file)]
    command = [sys.executable, "-m", "mcp_oauth_gateway", "grants", *args, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


# The audit trail and the metrics.


def audit_log(setup: UserOAuthGateway) -> Path:
    """The gateway's --audit-log file (user_oauth_gateway writes it beside its resources)."""
    return setup.config.parent / "audit.jsonl"


def audit_lines(setup: UserOAuthGateway) -> list[dict[str, Any]]:
    """Every audit line written so far."""
    path = audit_log(setup)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def audited(setup: UserOAuthGateway, event: str, sub: str) -> Callable[[], bool]:
    """Whether an audit line of `event` for route caller `sub` has been written."""

    def found() -> bool:
        return any(
            line.get("event") == event and (line.get("caller") or {}).get("sub") == sub
            for line in audit_lines(setup)
        )

    return found


def metric(setup: UserOAuthGateway, name: str) -> float:
    """One unlabelled metric of the gateway's /metrics."""
    text = httpx.get(f"{setup.status}/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} is not in /metrics"
    return float(found.group(1))


def connections_open(*setups: UserOAuthGateway) -> float:
    """Client connections open on the gateways' listeners, all told."""
    return sum(metric(s, "mcp_gateway_connections_open") for s in setups)


async def until(predicate: Callable[[], bool], what: str, bound: float = 30.0) -> None:
    """Poll a blocking `predicate` off the event loop (the MCP clients run on it meanwhile)."""
    try:
        async with asyncio.timeout(bound):
            while not await asyncio.to_thread(predicate):
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {bound}s waiting for {what}") from None


# The upstream authorization server.


@contextmanager
def access_token_ttl(auth: AuthServer, seconds: int) -> Iterator[None]:
    """Access tokens the AS issues inside the block live `seconds`; the usual lifetime after
    (so that a refresh makes a token that is not about to expire)."""
    usual = auth.access_token_ttl
    auth.set_access_token_ttl(seconds)
    try:
        yield
    finally:
        auth.set_access_token_ttl(usual)


def refreshes_ok(auth: AuthServer) -> tuple[int, int]:
    """How many refresh_token grants the AS answered: (granted, refused)."""
    answered = auth.refreshes()
    granted = sum(r["ok"] for r in answered)
    return granted, len(answered) - granted


class HeldRefreshes:
    """An oidc-provider AS keeping its refresh answers (made, not yet sent) while in use."""

    def __init__(self, auth: AuthServer):
        assert isinstance(auth, OidcProviderAS), "only the oidc-provider AS holds refreshes"
        self.auth = auth

    def __enter__(self) -> HeldRefreshes:
        self.auth.admin("POST", "/hold", json={"refresh": True})
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def count(self) -> int:
        """Refresh answers kept now."""
        held: int = self.auth.admin("GET", "/held").json()["held"]
        return held

    def release(self) -> None:
        """Send the kept answers, and keep no more."""
        self.auth.admin("POST", "/hold", json={"refresh": False})


async def concurrently(
    calls: list[Awaitable[dict[str, Any]]],
    gateways: list[UserOAuthGateway],
    auth: AuthServer,
) -> list[dict[str, Any]]:
    """Run `calls` at once while the AS holds the first refresh: released only once one refresh
    is held and every call's connection is open at the gateways (each call's client has its
    own), so that all of them arrive while the refresh is under way."""
    await until(lambda: connections_open(*gateways) == 0, "the gateways to have no client")
    with HeldRefreshes(auth) as held:
        tasks = [asyncio.ensure_future(call) for call in calls]

        def ended() -> bool:
            # A call that ended while the refresh is held never waited for it: go on to
            # its answer, which says why.
            return any(task.done() for task in tasks)

        try:
            await until(lambda: ended() or held.count() >= 1, "a refresh to reach the AS")
            await until(
                lambda: ended() or connections_open(*gateways) >= len(calls),
                f"{len(calls)} calls to be open at the gateways",
            )
        finally:
            held.release()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert not failed, f"{len(failed)} of {len(calls)} calls failed: {failed!r}"
    return [r for r in results if not isinstance(r, BaseException)]


# Gateways restarted on the same store.


@dataclass
class Rig:
    """One gateway's place (port, route IdP, store, resources' directory), started as often as
    a test wants, with the key file it is given."""

    logs: Path
    directory: Path
    idp_key: tuple[RSAKey, Path]
    upstream: Upstream
    port: int
    idp: str
    store: str
    evidence: Evidence
    starts: int = 0

    def start(self, key_file: Path) -> AbstractContextManager[UserOAuthGateway]:
        """The gateway, running on the rig's store with `key_file` until the block ends."""
        self.starts += 1
        return self.evidence.watched(
            user_oauth_gateway(
                self.logs,
                self.directory,
                self.idp_key,
                self.upstream,
                self.port,
                idp=self.idp,
                key_file=key_file,
                store=self.store,
                name=f"gateway-lifecycle-{self.port}-{self.starts}",
            )
        )


# What must never hold an upstream token.


@dataclass
class Evidence:
    """Every file the module's gateways wrote (logs, audit logs, SQLite files), the Redis
    stores they used, the upstreams they called, and the tokens seen in their stores."""

    files: set[Path] = field(default_factory=set)
    redis: set[str] = field(default_factory=set)
    upstreams: list[Upstream] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)

    @contextmanager
    def watched(
        self, starting: AbstractContextManager[UserOAuthGateway]
    ) -> Iterator[UserOAuthGateway]:
        """A gateway whose files are searched at the end."""
        with starting as setup:
            self.files |= {setup.process.log_path, audit_log(setup)}
            database = sqlite_file(setup)
            if database is not None:
                self.files |= {database, Path(f"{database}-wal"), Path(f"{database}-shm")}
            else:
                self.redis.add(setup.store)
            if setup.upstream not in self.upstreams:
                self.upstreams.append(setup.upstream)
            yield setup

    def saw(self, grant: Grant | None) -> Grant | None:
        """Remember a stored grant's tokens (to search for them later); the grant."""
        if grant is not None:
            self.tokens.add(grant.access_token)
            if grant.refresh_token:
                self.tokens.add(grant.refresh_token)
        return grant

    def every_token(self) -> set[str]:
        """Every upstream token: issued by the oidc-provider ASs, received by the MCP servers,
        or seen in a store."""
        found = set(self.tokens)
        for upstream in self.upstreams:
            found |= set(upstream.server.tokens_received())
            if isinstance(upstream.auth, OidcProviderAS):
                found |= set(upstream.auth.admin("GET", "/issued").json())
        return found

    def written(self) -> dict[str, bytes]:
        """What the gateways wrote: each file's bytes, each Redis store's values."""
        out = {str(path): path.read_bytes() for path in sorted(self.files) if path.exists()}
        for url in sorted(self.redis):
            out[url] = redis_values(url)
        return out


def redis_values(url: str) -> bytes:
    """Every key and value of the user token store in Redis at `url`, one after the other."""
    import redis

    client = redis.Redis.from_url(url, socket_timeout=10)
    chunks: list[bytes] = []
    try:
        for name in client.scan_iter(match="mcp-oauth-gateway:usertokens:*"):
            chunks.append(name)
            kind = client.type(name)
            if kind == b"string":
                chunks.append(client.get(name) or b"")
            elif kind == b"hash":
                for key, value in client.hgetall(name).items():
                    chunks += [key, value]
            elif kind == b"set":
                chunks += list(client.smembers(name))
    finally:
        client.close()
    return b"\n".join(chunks)


def secret_parts(token: str) -> list[str]:
    """What of a token must never be written: the whole token, and a JWT's signature (the
    audit trail writes a JWT's header and claims without it, never the signature)."""
    parts = [token]
    pieces = token.split(".")
    if len(pieces) == 3 and len(pieces[2]) >= 16:
        parts.append(pieces[2])
    return parts


# The connections page.


def disconnect_form(page: Page) -> dict[str, str]:
    """The Disconnect form's hidden fields."""
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.text))
    assert {"backend", "csrf"} <= set(fields), page.text
    return fields


def signed_in_page(setup: UserOAuthGateway, sub: str) -> Page:
    """`sub` at `<mcp>/connections`, signed in at the route's provider."""
    page = browse(f"{setup.mcp}/connections", [setup.route_login(sub)], jar=setup.jar(sub))
    assert page.status == 200, (page.url, page.status, page.text)
    assert page.url == f"{setup.mcp}/connections"
    return page


def post_connections(
    setup: UserOAuthGateway, jar: Jar | None, form: dict[str, str], origin: str | None
) -> httpx.Response:
    url = f"{setup.mcp}/connections"
    headers = {"Accept": "text/html", **(jar.header(url) if jar else {})}
    if origin is not None:
        headers["Origin"] = origin
    return httpx.post(url, data=form, headers=headers, follow_redirects=False, timeout=30)


def revoked_grants(auth) -> int:
    """Grants the oidc-provider AS has revoked."""
    return sum(e["event"] == "grant.revoked" for e in auth.events())
