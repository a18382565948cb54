"""The Broker's token endpoint: the gateway's one-time code redeemed (PKCE checked) for the
provider's tokens, a gateway refresh token rotated through a refresh at the provider, or (with
workloadIdentity) a workload's assertion for a token of the gateway's own (`workload_grant`).

With a DPoP proof (`grant_proofs`) the access token is handed out bound to its key
(`bound_tokens`: `token_type: DPoP`), and so is the gateway refresh token."""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass
from typing import Any

from .. import audit, pkce
from ..asgi import Headers, Receive, Scope, Send, send_json
from ..dpop import Proof
from ..redis_clients import RedisUnavailable
from .bound_tokens import bound_answer
from .context import BrokerContext
from .errors import OAuthError, method_not_allowed
from .grant_proofs import binds, grant_proof, record_proof
from .refresh import RefreshGrant, RefreshReused
from .requests import read_form, scope_param
from .store import give_back
from .upstream import post_token
from .workload_grant import JWT_BEARER, issue

log = logging.getLogger("mcp_oauth_gateway.broker")
NO_CACHE = (b"pragma", b"no-cache")


@dataclass(frozen=True, slots=True)
class Granted:
    """A grant's outcome: the provider's tokens (with the gateway's refresh token), the
    provider, the request's proof (None: none, or not read) and a nonce to hand out."""

    tokens: dict[str, Any]
    idp: int
    proof: Proof | None = None
    fresh_nonce: str | None = None


async def token(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """Redeem the gateway's one-time code (PKCE checked) or rotate a refresh token."""
    if scope["method"] != "POST":
        raise method_not_allowed("POST")
    form = await read_form(receive)
    audit.event(scope, "token-request", form.get("client_id"))
    ctx.target(scope, form.get("resource"))
    grant = form.get("grant_type")
    if grant == JWT_BEARER and ctx.workload is not None:
        # The workload's own identity is recorded (`issue`), not the issued token's.
        answer = await issue(ctx.workload, ctx.store, scope, form, ctx.proofs, ctx.workload_index)
        await send_json(send, 200, answer, [NO_CACHE])
        return
    if grant == "authorization_code":
        granted = await _redeem(ctx, scope, form)
        event, detail = "token-issued", "authorization code redeemed (PKCE checked)"
    elif grant == "refresh_token":
        granted = await _refresh(ctx, scope, form)
        event, detail = "token-refreshed", "refresh token rotated"
    else:
        supported = "authorization_code, refresh_token"
        if ctx.workload is not None:
            supported += ", " + JWT_BEARER
        raise OAuthError(
            400, "unsupported_grant_type", f"grant_type {grant!r} is not supported ({supported})"
        )
    audit.signed_in(scope, granted.tokens)
    answer = granted.tokens
    if granted.proof is not None:
        # Both tokens are bound to the key (the refresh token whatever the provider's mode).
        audit.dpop_bound(scope, granted.proof.jkt)
        if binds(ctx.proofs, granted.proof, granted.idp):
            answer = await bound_answer(ctx, answer, granted.idp, granted.proof.jkt)
            detail += "; the access token is DPoP-bound"
    audit.event(scope, event, detail=detail)
    headers: Headers = [NO_CACHE]
    if granted.fresh_nonce is not None:
        headers.append((b"dpop-nonce", granted.fresh_nonce.encode("ascii")))
    await send_json(send, 200, answer, headers)


async def _redeem(ctx: BrokerContext, scope: Scope, form: dict[str, str]) -> Granted:
    # A client of this route's (invalid_client naming the fix for one registered elsewhere),
    # checked before the code is used up.
    await ctx.client(form.get("client_id", ""))
    code = form.get("code", "")
    issued = await ctx.state.take_code(code)
    if issued is None:
        raise OAuthError(
            400, "invalid_grant", "unknown, expired or already used authorization code"
        )
    if not hmac.compare_digest(form.get("client_id", ""), issued.client_id):
        raise OAuthError(400, "invalid_grant", "the code was issued to another client")
    if not hmac.compare_digest(form.get("redirect_uri", ""), issued.redirect_uri):
        raise OAuthError(
            400, "invalid_grant", "redirect_uri does not match the authorization request"
        )
    if not pkce.verify(form.get("code_verifier", ""), issued.challenge):
        raise OAuthError(
            400,
            "invalid_grant",
            "PKCE verification failed (code_verifier does not match the code_challenge)",
        )
    index = issued.provider
    try:
        proof, fresh = await grant_proof(ctx.proofs, scope, index, dpop_jkt=issued.dpop_jkt)
        if proof is not None:
            await record_proof(ctx.proofs, proof, index)
        # The access token's holder bound before the client can have it (it is revocable).
        await ctx.revocation.bind(issued.client_id, issued.tokens, index)
        tokens = await ctx.refresh.issue(
            issued.client_id, issued.tokens, idp=index, jkt=proof.jkt if proof else None
        )
    except (OAuthError, RedisUnavailable) as exc:
        # Not acknowledged, or a proof to make again: the code stands again, so that the
        # client's next try (a new proof, a nonce) loses nothing.
        if not await give_back(lambda: ctx.state.put_code(code, issued), "an authorization code"):
            raise lost("authorization code") from exc
        raise
    return Granted(tokens, index, proof, fresh)


async def _refresh(ctx: BrokerContext, scope: Scope, form: dict[str, str]) -> Granted:
    client_id = form.get("client_id", "")
    if not client_id:
        raise OAuthError(
            400,
            "invalid_client",
            "client_id is required: a refresh token "
            "can only be used by the client it was issued to",
        )
    await ctx.client(client_id)
    if not form.get("refresh_token"):
        raise OAuthError(400, "invalid_request", "refresh_token is required")
    narrowed = scope_param(form.get("scope"))  # refused before the refresh token is taken
    grant = await _claim(ctx, scope, form["refresh_token"], client_id)
    try:
        proof, fresh = await grant_proof(ctx.proofs, scope, grant.idp, refresh_jkt=grant.jkt)
        if proof is not None:
            await record_proof(ctx.proofs, proof, grant.idp)
        provider = await ctx.provider(grant.idp)
    except (OAuthError, RedisUnavailable):
        # Not the holder's fault (the provider's), or a proof to make again: the token stays.
        await ctx.refresh.put_back(grant)
        raise
    upstream = {"grant_type": "refresh_token", "refresh_token": grant.provider_token}
    if narrowed:
        upstream["scope"] = narrowed
    status, body = await post_token(ctx, grant.idp, provider, upstream)
    if body is None or status >= 500:
        await ctx.refresh.put_back(grant)
        raise OAuthError(
            502,
            "temporarily_unavailable",
            "the identity provider's token "
            "endpoint did not answer; the refresh token is still valid, try "
            "again",
        )
    if status != 200 or not isinstance(body, dict) or "access_token" not in body:
        raise await _refused_refresh(ctx, grant, status, body)
    try:
        await ctx.revocation.bind(client_id, body, grant.idp)
        tokens = await ctx.refresh.rotate(grant, body, proof.jkt if proof else None)
    except RedisUnavailable as exc:
        # The provider refreshed, the store did not take the new token: the client's token
        # goes on standing for the provider's newest, so trying again loses nothing.
        if not await ctx.refresh.restore(grant, body):
            raise lost("refresh token") from exc
        raise
    return Granted(tokens, grant.idp, proof, fresh)


def lost(what: str) -> OAuthError:
    """The answer when what a request claimed could not be given back (Redis did not come
    back in time): the client's grant is gone, and it is told so rather than to try again."""
    return OAuthError(
        400,
        "invalid_grant",
        f"the gateway's shared store (Redis) failed over while this {what} was being used "
        "and it could not be kept; sign in again",
    )


async def _claim(
    ctx: BrokerContext, scope: Scope, refresh_token: str, client_id: str
) -> RefreshGrant:
    """The refresh token's grant, taken for this refresh if `client_id` holds it."""
    try:
        grant = await ctx.refresh.take(refresh_token)
    except RefreshReused as exc:
        audit.event(scope, "refresh-reuse-detected")
        audit.acting_user(scope, exc.user)
        log.warning(
            "a rotated-away refresh token was presented for client %s; its sign-in was revoked",
            client_id[:80],
        )
        raise OAuthError(
            400,
            "invalid_grant",
            "this refresh token was already exchanged "
            "once; using it again revokes the sign-in (sign in again)",
        ) from exc
    if grant is None:
        raise OAuthError(
            400,
            "invalid_grant",
            "unknown, expired or revoked refresh token (a refresh token is used at the token "
            "endpoint of the MCP server that issued it); sign in again",
        )
    audit.acting_user(scope, grant.user)  # the provider's answer may name them again
    if not hmac.compare_digest(grant.client_id, client_id):
        await ctx.refresh.put_back(grant)
        raise OAuthError(400, "invalid_grant", "the refresh token was issued to another client")
    return grant


async def _refused_refresh(
    ctx: BrokerContext, grant: RefreshGrant, status: int, body: object
) -> OAuthError:
    """The provider's refusal, passed on. invalid_grant means its token is gone; anything
    else (a scope it will not grant, say) leaves it valid, and so the client's."""
    error = body.get("error") if isinstance(body, dict) else None
    if error != "invalid_grant":
        await ctx.refresh.put_back(grant)
    description = body.get("error_description") if isinstance(body, dict) else None
    return OAuthError(
        status if 400 <= status < 500 else 502,
        error if isinstance(error, str) else "invalid_grant",
        # The provider's refresh token is the gateway's, never the client's (nor the audit
        # trail's): a description that quotes it has it replaced.
        _without(description, grant.provider_token)
        if isinstance(description, str)
        else "the identity provider refused the refresh",
    )


def _without(text: str, secret: str) -> str:
    """`text` with `secret` (when there is one) replaced by `[token]`."""
    return text.replace(secret, "[token]") if secret else text
