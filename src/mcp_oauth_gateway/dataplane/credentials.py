"""What the backend receives in place of the caller's token (`spec.backend.credentials`): the
last stage before the proxy, so only calls every other stage allowed get a credential.

The caller's token never reaches the backend here unless the mode is `Passthrough`; any copy of
a header this stage sets that arrived with the request is removed first, so a client cannot
pose as the gateway."""

from __future__ import annotations

import json
import time

from joserfc import jwt
from joserfc.jwk import OctKey

from .. import audit
from ..asgi import CLAIMS_KEY, TOKEN_KEY, ASGIApp, Headers, Receive, Scope, Send, send_error
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
        self.credentials = credentials
        self.backend = backend
        self.exchanger = exchanger
        owned = {AUTHORIZATION}
        secret = credentials.secret_header
        if secret is not None:
            owned.add(secret.header)
            if secret.identity is not None:
                owned.add(secret.identity.header)
        self.owned = frozenset(owned)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers: Headers = [h for h in scope["headers"] if h[0] not in self.owned]
        try:
            headers.extend(await self._credential(scope))
        except ExchangeError as exc:
            why = f"no credential for the backend of route {self.backend}: {exc.description}"
            audit.deny(scope, "backend-credentials", why)
            await send_error(send, exc.status, "backend_credentials_unavailable", why)
            return
        scope["headers"] = headers
        await self.app(scope, receive, send)

    async def _credential(self, scope: Scope) -> Headers:
        mode = self.credentials.mode
        token = scope.get(TOKEN_KEY)
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
