"""What the backend receives in place of the caller's token (`spec.backend.credentials`): the
last stage before the proxy, so only calls every other stage allowed get a credential.

The caller's token never reaches the backend here unless the mode is `Passthrough`; any copy of
a header this stage sets that arrived with the request is removed first, so a client cannot
pose as the gateway."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Protocol

from joserfc import jwt
from joserfc.jwk import OctKey

from .. import audit
from ..asgi import (
    CLAIMS_KEY,
    PROVIDER_TOKEN_KEY,
    TOKEN_KEY,
    ASGIApp,
    Headers,
    Receive,
    Scope,
    Send,
    send_error,
)
from ..controlplane.snapshot import CompiledCredentials, CompiledIdentity
from .token_exchange import ExchangeError, TokenExchanger

AUTHORIZATION = b"authorization"
IDENTITY_LIFETIME = 60


def identity_value(identity: CompiledIdentity, claims: dict[str, object], now: float) -> bytes:
    """The caller's claims for the backend: JSON, or a short-lived HS256 JWS when signed."""
    chosen = {name: claims[name] for name in identity.claims if name in claims}
    if identity.signing_key is None:
        # ASCII only (non-ASCII escaped): header values are not UTF-8.
        return json.dumps(chosen, ensure_ascii=True, separators=(",", ":")).encode()
    payload = {**chosen, "iat": int(now), "exp": int(now) + IDENTITY_LIFETIME}
    key = OctKey.import_key(identity.signing_key)
    return jwt.encode({"alg": "HS256", "typ": "JWT"}, payload, key).encode()


def owned_by(credentials: CompiledCredentials) -> set[bytes]:
    """The request headers a credential sets (a client's copies are removed first)."""
    owned = {AUTHORIZATION}
    secret = credentials.secret_header
    if secret is not None:
        owned.add(secret.header)
        if secret.identity is not None:
            owned.add(secret.identity.header)
    return owned


class Credential:
    """One credential mode applied to a request: the headers it gives the backend."""

    def __init__(self, credentials: CompiledCredentials, exchanger: TokenExchanger | None = None):
        self.credentials = credentials
        self.exchanger = exchanger
        self.owned = frozenset(owned_by(credentials))

    async def headers(self, scope: Scope) -> Headers:
        """The headers for the backend; ExchangeError when the exchange gave no token."""
        mode = self.credentials.mode
        # The provider's token a Broker-sealed one holds: the seal is the gateway's alone.
        token = scope.get(PROVIDER_TOKEN_KEY) or scope.get(TOKEN_KEY)
        claims = scope.get(CLAIMS_KEY)
        if mode == "SecretHeader":
            return self._secret_headers(claims)
        if token is None or not isinstance(claims, dict):
            return []  # an anonymous caller (Optional, Permissive) has no token to pass on
        if mode == "Passthrough":
            return [(AUTHORIZATION, b"Bearer " + token.encode())]
        assert self.exchanger is not None
        issuer = claims.get("iss")
        assert isinstance(issuer, str)  # verified tokens have their provider's issuer
        exchanged = await self.exchanger.token_for(token, issuer)
        return [(AUTHORIZATION, b"Bearer " + exchanged.encode())]

    def _secret_headers(self, claims: object) -> Headers:
        secret = self.credentials.secret_header
        assert secret is not None
        out: Headers = [(secret.header, secret.value)]
        identity = secret.identity
        if identity is not None and isinstance(claims, dict):
            out.append((identity.header, identity_value(identity, claims, time.time())))
        return out


class BackendCredentials:
    """Sets the backend's credential; answers 502/503 itself when it cannot get one."""

    def __init__(
        self,
        app: ASGIApp,
        credentials: CompiledCredentials,
        backend: str,
        exchanger: TokenExchanger | None = None,
    ):
        self.app = app
        self.credential = Credential(credentials, exchanger)
        self.backend = backend
        self.owned = self.credential.owned

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers: Headers = [h for h in scope["headers"] if h[0] not in self.owned]
        try:
            headers.extend(await self.credential.headers(scope))
        except ExchangeError as exc:
            why = f"no credential for the backend of route {self.backend}: {exc.description}"
            audit.deny(scope, "backend-credentials", why)
            await send_error(send, exc.status, "backend_credentials_unavailable", why)
            return
        scope["headers"] = headers
        await self.app(scope, receive, send)


class HeaderSource(Protocol):
    """What gives one target its credential headers (a Credential, or a user's own token)."""

    owned: frozenset[bytes]

    async def headers(self, scope: Scope) -> Headers:
        """The headers for the target."""
        ...


class TargetCredentials:
    """Each target's credential on a federated route with credentials per target, got when the
    gateway talks to that target (`TargetLink.send`): a target the request does not reach costs
    nothing. `owned`: every header any target's credential sets, removed from the client's
    request for every target, so a client poses as the gateway to none of them."""

    def __init__(self, by_target: Mapping[str, HeaderSource | None]):
        self.by_target = dict(by_target)
        owned = {AUTHORIZATION}
        for credential in self.by_target.values():
            if credential is not None:
                owned |= credential.owned
        self.owned = frozenset(owned)

    async def headers_for(self, scope: Scope, target: str) -> Headers:
        """The target's credential headers (none for a target without one); ExchangeError."""
        credential = self.by_target.get(target)
        return [] if credential is None else await credential.headers(scope)


class OwnedRemoved:
    """The `backend-credentials` stage of a federated route with credentials per target: it
    only removes the client's copies of the headers the targets' credentials set (each target's
    own are set as the gateway talks to it)."""

    def __init__(self, app: ASGIApp, owned: frozenset[bytes]):
        self.app = app
        self.owned = owned

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["headers"] = [h for h in scope["headers"] if h[0] not in self.owned]
        await self.app(scope, receive, send)
