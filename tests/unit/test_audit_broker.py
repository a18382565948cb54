"""The Broker's audit events name who signed in, not only the client they signed in with: the
user (`iss`, `sub` of the provider's ID token, else of its access token) on the lines of the
sign-in's return, the code's redemption and each refresh; never a token or a code."""

from __future__ import annotations

import base64
import json
from urllib.parse import urlencode

import pytest

from mcp_oauth_gateway import audit
from mcp_oauth_gateway.asgi import AUDIT_KEY
from mcp_oauth_gateway.broker.clients import issue_client_id
from mcp_oauth_gateway.broker.refresh import digest, user_of
from unit.broker.broker_support import (
    CALLBACK,
    IDP_ISSUER,
    REDIRECT,
    REGISTRATION,
    REVOKE,
    TOKEN,
    VERIFIER,
    at_provider,
    redirected,
    refresh,
    register,
    signed_in,
    started_rig,
)


def jwt(**claims: object) -> str:
    """A JWT-shaped token with `claims` (the Broker does not check its signature: it got it
    from the provider itself)."""

    def part(value: object) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def answer(n: int, **tokens: str) -> dict[str, object]:
    return {
        "access_token": f"opaque-at-{n}",
        "token_type": "Bearer",
        "expires_in": 300,
        "refresh_token": f"provider-rt-{n}",
        **tokens,
    }


async def test_the_sign_in_code_and_refresh_lines_name_the_user():
    async with started_rig() as rig:
        user = {"iss": IDP_ISSUER, "sub": "alice"}
        rig.provider.token_answers += [
            (200, answer(1, id_token=jwt(**user, email="a@x"))),
            (200, answer(2, access_token=jwt(**user, scope="openid"))),
        ]
        client_id = await register(rig)
        upstream = await at_provider(rig, client_id)
        back = audit.AuditRecord()
        query = urlencode({"state": upstream["state"], "code": "c-1", "iss": IDP_ISSUER})
        response = await rig.call("GET", CALLBACK, query=query.encode(), scope={AUDIT_KEY: back})
        code = redirected(response)[1]["code"]
        redeemed = audit.AuditRecord()
        form = {
            "grant_type": "authorization_code",
            "client_id": client_id,
            "code": code,
            "redirect_uri": REDIRECT,
            "code_verifier": VERIFIER,
        }
        tokens = await rig.post_form(TOKEN, form, scope={AUDIT_KEY: redeemed})
        assert tokens.status == 200, tokens.body
        refreshed = audit.AuditRecord()
        again = await refresh(rig, client_id, tokens.json()["refresh_token"], audited=refreshed)
        assert again.status == 200, again.body
        lines = (
            (back, "code-issued"),
            (redeemed, "token-issued"),
            (refreshed, "token-refreshed"),
        )
        for record, event in lines:
            assert record.event == event
            assert audit.caller_of(None, record.client_id, record.user) == {
                **user,
                "client_id": client_id,
            }


def test_a_token_response_without_a_jwt_names_no_user():
    record = audit.AuditRecord()
    scope = {AUDIT_KEY: record}
    audit.signed_in(scope, answer(1))
    audit.signed_in(scope, answer(1, id_token="not.a-jwt.at-all"))
    assert record.user is None


async def test_a_provider_refusal_quoting_its_refresh_token_never_passes_it_on():
    async with started_rig() as rig:
        client_id, tokens = await signed_in(rig)
        quoted = {"error": "invalid_grant", "error_description": "token provider-rt-1 is gone"}
        rig.provider.token_answers.append((400, quoted))
        record = audit.AuditRecord()
        refused = await refresh(rig, client_id, tokens["refresh_token"], audited=record)
        assert refused.status == 400
        assert rig.provider.last_token_form["refresh_token"] == "provider-rt-1"
        assert "provider-rt-1" not in refused.body.decode()
        assert record.reason is not None
        assert "provider-rt-1" not in record.reason
        assert record.reason == "invalid_grant: token [token] is gone"


def test_two_clients_registered_alike_are_told_apart_however_long_their_ids():
    # A DCR client id carries the name and redirect URIs before what sets it apart (a random
    # part and the signature): cut at its head alone, an impostor's id would read as yours.
    uris = [f"http://127.0.0.1:47001/callback/{'x' * 60}/{n}" for n in range(3)]
    ids = [issue_client_id(b"k" * 32, "Claude Desktop " + "y" * 80, uris, "r" * 32) for _ in "ab"]
    assert len(ids[0]) > audit.MAX_VALUE
    records = [audit.AuditRecord() for _ in ids]
    for record, client_id in zip(records, ids, strict=True):
        audit.client({AUDIT_KEY: record}, client_id)
    shown = [record.client_id for record in records]
    assert shown[0] != shown[1]
    for client_id, written in zip(ids, shown, strict=True):
        assert written is not None
        assert len(written) <= audit.MAX_VALUE
        assert written.startswith(client_id[:100])
        assert written.endswith(client_id[-60:])


async def test_a_broker_request_that_fails_inside_the_gateway_is_no_allow():
    async with started_rig() as rig:

        async def unavailable() -> bytes:
            raise ConnectionError("the broker store (Redis) is unreachable")

        rig.store.secret = unavailable  # type: ignore[method-assign]
        record = audit.AuditRecord()
        body = b'{"redirect_uris": ["http://127.0.0.1:47001/cb"]}'
        with pytest.raises(ConnectionError):
            await rig.call("POST", REGISTRATION, body=body, scope={AUDIT_KEY: record})
        assert (record.decision, record.stage) == ("deny", "oauth-endpoints")
        assert record.reason == ("the gateway failed to handle this request: ConnectionError")


async def signed_in_as(rig, user: dict[str, str]) -> tuple[str, dict[str, object]]:
    """A client through the whole flow, the provider's ID token naming `user`; its next refresh
    answered with opaque tokens that name nobody."""
    rig.provider.token_answers += [(200, answer(1, id_token=jwt(**user))), (200, answer(2))]
    return await signed_in(rig)


async def test_refresh_reuse_and_revocation_lines_name_the_user_of_the_stored_sign_in():
    async with started_rig() as rig:
        user = {"iss": IDP_ISSUER, "sub": "alice"}
        client_id, tokens = await signed_in_as(rig, user)
        first = tokens["refresh_token"]
        refreshed, reused, revoked = (audit.AuditRecord() for _ in range(3))
        again = await refresh(rig, client_id, first, audited=refreshed)
        assert again.status == 200, again.body
        # The provider's refresh answer names nobody: the line names the stored sign-in's user.
        assert (refreshed.event, refreshed.user) == ("token-refreshed", user)
        # The rotated-away token again: a reuse, naming whose sign-in it revoked.
        refused = await refresh(rig, client_id, first, audited=reused)
        assert refused.status == 400
        assert (reused.event, reused.user) == ("refresh-reuse-detected", user)
        # A second sign-in, revoked by its refresh token.
        client_id, tokens = await signed_in_as(rig, {**user, "sub": "bob"})
        form = {"client_id": client_id, "token": str(tokens["refresh_token"])}
        done = await rig.post_form(REVOKE, form, scope={AUDIT_KEY: revoked})
        assert done.status == 200, done.body
        assert (revoked.event, revoked.user) == ("token-revoked", {**user, "sub": "bob"})
        for record in (refreshed, reused, revoked):
            caller = audit.caller_of(None, record.client_id, record.user)
            assert caller is not None
            assert caller["sub"] in ("alice", "bob")


async def test_revoking_an_access_token_names_the_user_it_was_issued_for():
    async with started_rig() as rig:
        user = {"iss": IDP_ISSUER, "sub": "carol"}
        rig.provider.token_answers.append((200, answer(1, access_token=jwt(**user))))
        client_id, tokens = await signed_in(rig)
        record = audit.AuditRecord()
        form = {"client_id": client_id, "token": str(tokens["access_token"])}
        done = await rig.post_form(REVOKE, form, scope={AUDIT_KEY: record})
        assert done.status == 200, done.body
        assert (record.event, record.user) == ("token-revoked", user)


async def test_a_refresh_token_stored_before_users_were_kept_still_refreshes_naming_nobody():
    async with started_rig() as rig:
        client_id, tokens = await signed_in_as(rig, {"iss": IDP_ISSUER, "sub": "dan"})
        # As a record written by an earlier version: no `user` field.
        key = digest(str(tokens["refresh_token"]))
        records = rig.context().refresh.store  # the route's part of the store
        stored = await records.take("refresh", key)
        assert stored is not None
        assert stored.pop("user") == {"iss": IDP_ISSUER, "sub": "dan"}
        await records.put("refresh", key, stored, 3600)
        record = audit.AuditRecord()
        again = await refresh(rig, client_id, tokens["refresh_token"], audited=record)
        assert again.status == 200, again.body
        assert (record.event, record.user) == ("token-refreshed", None)


def test_a_stored_user_is_read_only_as_iss_and_sub_strings():
    assert user_of({"user": {"iss": "i", "sub": "s", "x": "y"}}) == {"iss": "i", "sub": "s"}
    assert user_of({"user": {"iss": 1, "sub": ["s"]}}) is None
    assert user_of({"user": "alice"}) is None
    assert user_of({}) is None
