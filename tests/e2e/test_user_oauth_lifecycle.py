"""The life of a user's own grant at a third-party MCP server behind the gateway (issue 36),
with real parts: FastMCP and TypeScript SDK servers that trust only their own authorization
server (npm oidc-provider with rotated refresh tokens, or real Keycloak), the gateway with
`userOAuth` (SQLite, or Redis shared by two replicas), the Python `mcp` client and a browser.

Refresh after expiry with a rotated refresh token; one refresh for concurrent calls, in one
process and across replicas (a second refresh would spend a rotated token, and oidc-provider
then revokes the whole grant); a grant ended at the upstream (refresh refused, or the server
refusing the token) asks the user again; restarts and key rotation keep every grant, an
unrelated key reads them as absent; the operator's `grants` commands; the connections page's
Disconnect; and no upstream token in anything the gateways wrote."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from urllib.parse import urljoin

import pytest

from mcp_oauth_gateway.usertokens import Grant, load_keys
from support import free_port, unverified_claims, wait_until
from upstream_servers_support import initialize, refresh, revoke
from user_oauth_gateway_support import (
    UserOAuthGateway,
    callback_url,
    new_key_line,
    route_idp,
    user_oauth_gateway,
    write_key_file,
)
from user_oauth_lifecycle_support import (
    Evidence,
    Rig,
    access_token_ttl,
    audited,
    concurrently,
    connect,
    disconnect_form,
    grants_cli,
    post_connections,
    refreshes_ok,
    revoked_grants,
    secret_parts,
    signed_in_page,
    still_asked,
    stored,
    whoami,
)
from xdist_scheduling import KEYCLOAK

SHORT = 2  # seconds: an access token a test waits out


@pytest.fixture(scope="module")
def evidence() -> Evidence:
    return Evidence()


@pytest.fixture(scope="module")
def setup(logs, tmp_path_factory, idp_key, upstreams, evidence) -> Iterator[UserOAuthGateway]:
    """One gateway (SQLite) in front of FastMCP + oidc-provider (JWT access tokens)."""
    port = free_port()
    upstream = upstreams(server="fastmcp", auth="oidc-provider", redirect_uris=[callback_url(port)])
    directory = tmp_path_factory.mktemp("lifecycle")
    with (
        route_idp(logs, idp_key[1], port) as idp,
        evidence.watched(
            user_oauth_gateway(
                logs, directory, idp_key, upstream, port, idp=idp, name=f"gateway-lifecycle-{port}"
            )
        ) as running,
    ):
        yield running


async def connected(
    setup: UserOAuthGateway, evidence: Evidence, sub: str, upstream_user: str
) -> Grant:
    """`sub` connected (as `upstream_user` upstream) with a short-lived access token: its grant."""
    with access_token_ttl(setup.upstream.auth, SHORT):
        await connect(setup, sub, upstream_user)
    grant = evidence.saw(await stored(setup, sub))
    assert grant is not None, f"{sub} connected but the store holds no grant"
    return grant


def _expired(token: str) -> bool:
    exp = unverified_claims(token)["exp"]
    assert isinstance(exp, int)
    return time.time() > exp


# 1. Refresh.


async def test_a_call_after_expiry_goes_with_a_new_token_and_the_refresh_token_rotates(
    setup, evidence
):
    auth, server = setup.upstream.auth, setup.upstream.server
    old = await connected(setup, evidence, "expiry-user", "alice")
    assert old.refresh_token
    wait_until(lambda: _expired(old.access_token), 30, "the upstream access token to expire")
    before = refreshes_ok(auth)

    me = await whoami(setup, "expiry-user")

    assert me["sub"] == auth.subject("alice")
    new = evidence.saw(await stored(setup, "expiry-user"))
    assert new is not None
    assert new.access_token != old.access_token
    assert not _expired(new.access_token)
    received = server.tokens_received()
    assert new.access_token in received
    assert old.access_token not in received, "the expired token was sent upstream"
    assert refreshes_ok(auth) == (before[0] + 1, before[1])
    assert new.refresh_token not in (None, old.refresh_token), "the refresh token did not rotate"
    wait_until(audited(setup, "upstream-token-refreshed", "expiry-user"), 10, "the audit line")
    # The AS rotated it: the old refresh token is spent (which ends the grant there).
    spent = refresh(auth, auth.confidential, old.refresh_token)
    assert spent.status_code == 400, spent.text
    assert spent.json()["error"] == "invalid_grant"


async def test_concurrent_calls_on_an_expiring_token_make_one_refresh(setup, evidence):
    auth = setup.upstream.auth
    old = await connected(setup, evidence, "race-user", "bob")
    assert old.expires_at is not None
    assert old.expires_at - time.time() < 60, "the token is not about to expire"
    before = refreshes_ok(auth)

    calls = [whoami(setup, "race-user") for _ in range(8)]
    seen = await concurrently(calls, [setup], auth)

    assert [me["sub"] for me in seen] == [auth.subject("bob")] * 8
    assert refreshes_ok(auth) == (before[0] + 1, before[1]), auth.refreshes()[-8:]
    new = evidence.saw(await stored(setup, "race-user"))
    assert new is not None
    assert new.access_token != old.access_token
    assert new.refresh_token != old.refresh_token


@pytest.fixture(scope="module")
def replicas(
    logs, tmp_path_factory, idp_key, upstreams, redis_url, evidence
) -> Iterator[tuple[UserOAuthGateway, UserOAuthGateway]]:
    """Two gateway processes sharing one Redis store and one key file."""
    ports = free_port(), free_port()
    upstream = upstreams(redirect_uris=[callback_url(p) for p in ports])
    shared = tmp_path_factory.mktemp("replicas")
    key_file = write_key_file(shared / "user-token.key", new_key_line())

    def replica(port: int, idp: str):
        return evidence.watched(
            user_oauth_gateway(
                logs,
                shared / str(port),
                idp_key,
                upstream,
                port,
                idp=idp,
                key_file=key_file,
                store=redis_url,
                name=f"gateway-lifecycle-replica-{port}",
            )
        )

    with (
        route_idp(logs, idp_key[1], ports[0]) as idp,
        replica(ports[0], idp) as first,
        replica(ports[1], idp) as second,
    ):
        yield first, second


async def test_concurrent_calls_over_two_replicas_make_one_refresh(replicas, evidence):
    first, second = replicas
    auth = first.upstream.auth
    old = await connected(first, evidence, "replica-user", "alice")
    assert old.expires_at is not None
    assert old.expires_at - time.time() < 60, "the token is not about to expire"
    before = refreshes_ok(auth)

    calls = [whoami(gateway, "replica-user") for gateway in (first, second) * 4]
    seen = await concurrently(calls, [first, second], auth)

    assert [me["sub"] for me in seen] == [auth.subject("alice")] * 8
    assert refreshes_ok(auth) == (before[0] + 1, before[1]), auth.refreshes()[-8:]
    new = evidence.saw(await stored(second, "replica-user"))
    assert new is not None
    assert new.refresh_token != old.refresh_token
    grants = [g for g in auth.grants() if g["accountId"] == "alice"]
    assert grants, "the grant was revoked at the AS (a rotated refresh token spent twice)"


# 2. A grant that ended upstream.


async def test_a_grant_revoked_at_the_as_fails_to_refresh_and_the_user_is_asked_again(
    setup, evidence
):
    auth = setup.upstream.auth
    await connected(setup, evidence, "revoked-user", "carol")
    before = refreshes_ok(auth)
    auth.revoke_user("carol")

    await still_asked(setup, "revoked-user")

    assert refreshes_ok(auth) == (before[0], before[1] + 1), "no refresh was refused"
    assert await stored(setup, "revoked-user") is None
    wait_until(audited(setup, "upstream-token-refresh-failed", "revoked-user"), 10, "audit")


# (server, AS, token format): servers that ask their AS about every token (introspection).
INTROSPECTED = [("fastmcp", "oidc-provider", "opaque"), ("ts", "keycloak", "jwt")]


# Real Keycloak's parameter carries its xdist group: the fixture reaches it by name.
@pytest.fixture(
    scope="module",
    params=[
        pytest.param(p, id="-".join(p), marks=[KEYCLOAK] if p[1] == "keycloak" else [])
        for p in INTROSPECTED
    ],
)
def introspected(
    request, logs, tmp_path_factory, idp_key, upstreams, evidence
) -> Iterator[UserOAuthGateway]:
    server, auth, token_format = request.param
    keycloak = request.getfixturevalue("real_keycloak") if auth == "keycloak" else None
    port = free_port()
    upstream = upstreams(
        server=server,
        auth=auth,
        redirect_uris=[callback_url(port)],
        keycloak=keycloak,
        token_format=token_format,
    )
    assert "introspection" in upstream.server.verify
    directory = tmp_path_factory.mktemp("introspected")
    with (
        route_idp(logs, idp_key[1], port) as idp,
        evidence.watched(
            user_oauth_gateway(
                logs, directory, idp_key, upstream, port, idp=idp, name=f"gateway-lifecycle-{port}"
            )
        ) as running,
    ):
        yield running


async def test_a_token_the_server_refuses_is_dropped_and_the_user_asked_again(
    introspected, evidence
):
    setup = introspected
    auth = setup.upstream.auth
    await connect(setup, "refused-user", "alice")
    assert (await whoami(setup, "refused-user"))["sub"] == auth.subject("alice")
    grant = evidence.saw(await stored(setup, "refused-user"))
    assert grant is not None
    auth.revoke_user("alice")

    # The call that meets the server's 401 is answered with the connect link, not a 401.
    answer = initialize(setup.mcp, setup.token("refused-user"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["error"]["code"] == -32042, answer.text
    assert setup.upstream.server.tokens_received()[-1] == grant.access_token
    assert await stored(setup, "refused-user") is None
    wait_until(audited(setup, "upstream-token-rejected", "refused-user"), 10, "the audit line")
    await still_asked(setup, "refused-user")


# 3. and 4. Restarts and key rotation.


@pytest.fixture
def sqlite_rig(logs, tmp_path_factory, idp_key, upstreams, evidence) -> Iterator[Rig]:
    port = free_port()
    upstream = upstreams(redirect_uris=[callback_url(port)])
    directory = tmp_path_factory.mktemp("sqlite-rig")
    store = f"sqlite://{directory / 'user-tokens.db'}"
    with route_idp(logs, idp_key[1], port) as idp:
        yield Rig(logs, directory, idp_key, upstream, port, idp, store, evidence)


@pytest.fixture
def redis_rig(logs, tmp_path_factory, idp_key, upstreams, redis_url, evidence) -> Iterator[Rig]:
    port = free_port()
    upstream = upstreams(redirect_uris=[callback_url(port)])
    directory = tmp_path_factory.mktemp("redis-rig")
    with route_idp(logs, idp_key[1], port) as idp:
        yield Rig(logs, directory, idp_key, upstream, port, idp, redis_url, evidence)


USERS = {"keeper-a": "alice", "keeper-b": "bob"}


async def _everyone_connects(gateway: UserOAuthGateway, evidence: Evidence) -> None:
    for sub, upstream_user in USERS.items():
        await connect(gateway, sub, upstream_user)
        evidence.saw(await stored(gateway, sub))


async def _everyone_calls(gateway: UserOAuthGateway) -> None:
    """Each user's call works without being asked."""
    for sub, upstream_user in USERS.items():
        me = await whoami(gateway, sub)
        assert me["sub"] == gateway.upstream.auth.subject(upstream_user)


@pytest.mark.parametrize("rig_name", ["sqlite_rig", "redis_rig"])
async def test_a_restart_keeps_every_grant(request, rig_name, evidence):
    rig: Rig = request.getfixturevalue(rig_name)
    key_file = write_key_file(rig.directory / "user-token.key", new_key_line())
    with rig.start(key_file) as gateway:
        await _everyone_connects(gateway, evidence)
    with rig.start(key_file) as gateway:
        await _everyone_calls(gateway)
    assert len(rig.upstream.auth.grants()) == len(USERS), "a user connected again"


def _grants_json(gateway: UserOAuthGateway) -> list[dict]:
    listed = grants_cli(gateway, "list", "--output", "json", "--issuer", gateway.issuer)
    assert listed.returncode == 0, listed.stderr
    found: list[dict] = json.loads(listed.stdout)
    return found


async def test_key_rotation_keeps_every_grant_and_an_unrelated_key_asks_again(sqlite_rig, evidence):
    rig = sqlite_rig
    old, new, unrelated = new_key_line(), new_key_line(), new_key_line()
    key_file = rig.directory / "user-token.key"
    with rig.start(write_key_file(key_file, old)) as gateway:
        await _everyone_connects(gateway, evidence)
        old_id = {g["key_id"] for g in _grants_json(gateway)}
        assert len(old_id) == 1
    # The new key everywhere as the last line first (it opens), then as the first (it seals).
    with rig.start(write_key_file(key_file, old, new)) as gateway:
        await _everyone_calls(gateway)
    with rig.start(write_key_file(key_file, new, old)) as gateway:
        await _everyone_calls(gateway)
        resealed = grants_cli(gateway, "reseal")
        assert resealed.returncode == 0, resealed.stderr
        assert f"resealed {len(USERS)} grants" in resealed.stdout, resealed.stdout
        listed = _grants_json(gateway)
        assert len(listed) == len(USERS)
        assert {g["key_id"] for g in listed} == {load_keys(key_file).sealing_id}, listed
        assert old_id.isdisjoint({g["key_id"] for g in listed})
        await _everyone_calls(gateway)
    with rig.start(write_key_file(key_file, new)) as gateway:
        await _everyone_calls(gateway)
        assert all(g["key_held"] for g in _grants_json(gateway))
    # A key that opens none of them: every user is asked, the grants stay for their key.
    with rig.start(write_key_file(key_file, unrelated)) as gateway:
        for sub in USERS:
            await still_asked(gateway, sub)
        assert gateway.process.popen.poll() is None
        assert "read as absent" in gateway.process.log()
        assert not any(g["key_held"] for g in _grants_json(gateway))
    with rig.start(write_key_file(key_file, new)) as gateway:
        await _everyone_calls(gateway)
    assert len(rig.upstream.auth.grants()) == len(USERS), "a user connected again"


# 5. The operator.


async def test_grants_list_shows_whose_grant_without_a_token_and_remove_asks_again(setup, evidence):
    await connect(setup, "operated-user", "alice")
    grant = evidence.saw(await stored(setup, "operated-user"))
    assert grant is not None
    assert grant.refresh_token is not None
    secrets = [grant.access_token, grant.refresh_token]

    text = grants_cli(setup, "list")
    assert text.returncode == 0, text.stderr
    (row,) = [line for line in text.stdout.splitlines() if "operated-user" in line]
    assert setup.issuer in row
    listed = [g for g in _grants_json(setup) if g["subject"] == "operated-user"]
    assert len(listed) == 1, listed
    assert listed[0]["issuer"] == setup.issuer
    assert listed[0]["backend"] in row
    assert listed[0]["backend"].endswith(f"|{setup.upstream.name}"), listed
    for output in (text.stdout + text.stderr, str(_grants_json(setup))):
        assert not any(part in output for s in secrets for part in secret_parts(s))

    removed = grants_cli(setup, "remove", "--issuer", setup.issuer, "--subject", "operated-user")
    assert removed.returncode == 0, removed.stderr
    assert "removed 1 grant" in removed.stdout
    assert await stored(setup, "operated-user") is None
    await still_asked(setup, "operated-user")


# 6. The connections page.


async def test_a_user_disconnects_on_the_connections_page_and_is_asked_again(setup, evidence):
    auth = setup.upstream.auth
    await connect(setup, "page-alice", "alice")
    await connect(setup, "page-bob", "bob")
    alice = evidence.saw(await stored(setup, "page-alice"))
    assert alice is not None
    assert alice.refresh_token is not None
    page = signed_in_page(setup, "page-alice")
    assert "Upstream Notes" in page.text
    assert "connected since" in page.text
    form = disconnect_form(page)
    mine = setup.jar("page-alice")
    theirs = disconnect_form(signed_in_page(setup, "page-bob"))
    same_site = setup.gateway
    revoked = revoked_grants(auth)

    refused = {
        "no csrf": post_connections(setup, mine, {"backend": form["backend"]}, same_site),
        "a wrong csrf": post_connections(setup, mine, {**form, "csrf": theirs["csrf"]}, same_site),
        "another site": post_connections(setup, mine, form, "http://127.0.0.1:1"),
        "no page cookie": post_connections(setup, None, form, same_site),
        "bob's cookie": post_connections(setup, setup.jar("page-bob"), form, same_site),
    }
    for why, answer in refused.items():
        assert answer.status_code == 403, (why, answer.status_code, answer.text)
    assert revoked_grants(auth) == revoked
    assert await stored(setup, "page-alice") is not None
    # Bob's own form, with his own cookie, disconnects bob only.
    bobs = post_connections(setup, setup.jar("page-bob"), theirs, same_site)
    assert bobs.status_code in (302, 303), bobs.text
    assert await stored(setup, "page-bob") is None
    assert revoked_grants(auth) == revoked + 1
    assert await stored(setup, "page-alice") is not None
    assert (await whoami(setup, "page-alice"))["sub"] == auth.subject("alice")

    done = post_connections(setup, mine, form, same_site)
    assert done.status_code in (302, 303), done.text
    assert urljoin(setup.mcp, done.headers["location"]) == f"{setup.mcp}/connections"
    assert await stored(setup, "page-alice") is None
    assert revoked_grants(auth) == revoked + 2, "the grant was not revoked at the AS"
    after = refresh(auth, auth.confidential, alice.refresh_token)
    assert after.status_code == 400, after.text
    assert after.json()["error"] == "invalid_grant"
    wait_until(audited(setup, "upstream-disconnected", "page-alice"), 10, "the audit line")
    assert "not connected" in signed_in_page(setup, "page-alice").text
    await still_asked(setup, "page-alice")


# 7. Secrets stay secret.


async def test_no_upstream_token_is_in_any_log_audit_line_or_store(evidence):
    tokens = await asyncio.to_thread(evidence.every_token)
    written = evidence.written()
    # Access tokens (JWTs) and refresh tokens (opaque) to look for, whichever tests ran.
    assert any(t.count(".") == 2 for t in tokens), tokens
    assert any("." not in t for t in tokens), tokens
    assert any(name.endswith(".db") for name in written), list(written)
    assert any(name.endswith("audit.jsonl") for name in written), list(written)
    leaks = [
        (name, token[:12])
        for token in tokens
        for part in secret_parts(token)
        for name, content in written.items()
        if part.encode() in content
    ]
    assert not leaks, f"upstream tokens written: {leaks[:10]}"


async def test_a_refused_token_is_renewed_while_its_grant_lives_and_asked_for_once_it_does_not(
    introspected, evidence
):
    """The server refuses an access token before its expiry (revoked alone, a clock apart):
    the gateway refreshes once and the call goes through without asking the user, as long as
    the AS still honours the refresh token (Keycloak revokes the access token alone);
    oidc-provider revokes the whole grant with it, and then the user is asked again."""
    setup = introspected
    auth = setup.upstream.auth
    await connect(setup, "renewed-user", "bob")
    grant = evidence.saw(await stored(setup, "renewed-user"))
    assert grant is not None
    revoked = revoke(auth, auth.confidential, grant.access_token, "access_token")
    assert revoked.status_code == 200, revoked.text

    if auth.kind == "oidc-provider":
        await still_asked(setup, "renewed-user")
        assert await stored(setup, "renewed-user") is None
        return
    me = await whoami(setup, "renewed-user")
    assert me["sub"] == auth.subject("bob")
    renewed = evidence.saw(await stored(setup, "renewed-user"))
    assert renewed is not None
    assert renewed.access_token != grant.access_token
    assert setup.upstream.server.tokens_received()[-1] == renewed.access_token
    wait_until(audited(setup, "upstream-token-refreshed", "renewed-user"), 10, "the audit line")
