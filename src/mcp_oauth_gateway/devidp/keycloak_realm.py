"""The Keycloak flavour's realm settings and sessions: `GET`/`PUT /admin/realms/master` (the
realm representation; `accessTokenLifespan` governs every token issued afterwards, admin-cli's
included) and `POST /admin/realms/master/logout-all` (every session ends: the access tokens
issued before are refused by the admin API with 401, their refresh tokens with `Session not
active`), answered as Keycloak 26 answers them."""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from .oidc import OpenIdProvider, json_response
from .store import Record, Store

_STATE = "kc_realm"
# The realm representation's settings the dev IdP keeps (values of a fresh Keycloak 26.7).
_DEFAULTS: dict[str, Any] = {
    "displayName": "Keycloak",
    "displayNameHtml": '<div class="kc-logo-text"><span>Keycloak</span></div>',
    "notBefore": 0,
    "enabled": True,
    "sslRequired": "external",
    "accessTokenLifespanForImplicitFlow": 900,
    "ssoSessionIdleTimeout": 1800,
    "ssoSessionMaxLifespan": 36000,
    "offlineSessionIdleTimeout": 2592000,
    "accessCodeLifespan": 60,
    "accessCodeLifespanUserAction": 300,
    "accessCodeLifespanLogin": 1800,
    "registrationAllowed": False,
    "loginWithEmailAllowed": True,
    "duplicateEmailsAllowed": False,
    "revokeRefreshToken": False,
    "refreshTokenMaxReuse": 0,
    "defaultSignatureAlgorithm": "RS256",
    "attributes": {},
}
# Fields Jackson reads as Java ints: a number (a fraction is cut off) or a numeric string.
_INTEGERS = frozenset(name for name, value in _DEFAULTS.items() if type(value) is int) | {
    "accessTokenLifespan"
}


def _unparsable(error: str) -> Response:
    """Keycloak's 400 for a body Jackson cannot read as a `RealmRepresentation`."""
    return json_response({"error": error, "error_description": "Cannot parse the JSON"}, 400)


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def read_update(raw: bytes) -> Record | Response:
    """The fields a realm PUT sets (`null` leaves a field as it is), or Keycloak's 400."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _unparsable("invalid_request")
    if not isinstance(body, dict):
        return _unparsable("unknown_error")
    if body.get("realm") not in (None, "master"):
        return json_response({"errorMessage": "Can't rename master realm"}, 400)
    update: Record = {}
    for name, value in body.items():
        if value is None or name in ("id", "realm"):
            continue
        if name in _INTEGERS:
            number = _as_int(value)
            if number is None:
                return _unparsable("unknown_error")
            value = number
        update[name] = value
    return update


class Realm:
    """The `master` realm's representation and the cut-off of its sessions."""

    def __init__(self, store: Store, provider: OpenIdProvider, realm_id: str, lifespan: int):
        self.store = store
        self.provider = provider
        self.realm_id = realm_id
        self.default_lifespan = lifespan
        # Access tokens issued before a logout-all, by jti (the same second as the cut-off
        # included): in memory, like the dev IdP's other tokens.
        self.ended: set[str] = set()

    def _settings(self) -> Record:
        settings: Record = self.store.data.setdefault(_STATE, {})
        return settings

    def access_token_lifespan(self) -> int:
        """Seconds an access token issued now lives (admin-cli's included)."""
        return int(self._settings().get("accessTokenLifespan", self.default_lifespan))

    def representation(self) -> Record:
        """`GET /admin/realms/master`."""
        return {
            "id": self.realm_id,
            "realm": "master",
            **_DEFAULTS,
            "accessTokenLifespan": self.access_token_lifespan(),
            **{k: v for k, v in self._settings().items() if k != "accessTokenLifespan"},
        }

    def revokes_refresh_tokens(self) -> bool:
        """The realm's `revokeRefreshToken`: each refresh token is good once (off by default,
        when a refresh token may be used again and again)."""
        return self._settings().get("revokeRefreshToken") is True

    def end_sessions(self, *, subject: str | None = None, sid: str | None = None) -> None:
        """End a user's sessions, or one session: their refresh tokens get `Session not
        active`, their access tokens 401."""

        def ends(record: dict[str, Any]) -> bool:
            return record.get("subject") == subject if subject else record.get("sid") == sid

        for record in self.provider.refresh_tokens.values():
            if ends(record):
                record["ended"] = True
        self.ended.update(j for j, r in self.provider.access_tokens.items() if ends(r))

    async def logout_user(self, request: Request, parts: list[str]) -> Response:
        """`POST /admin/realms/master/users/{id}/logout`: 204, every session of the user ends."""
        if not any(u["id"] == parts[0] for u in self.store.collection("kc_users")):
            return json_response({"error": "User not found"}, 404)
        self.end_sessions(subject=parts[0])
        return Response(status_code=204)

    def not_before(self) -> int:
        """The realm's `notBefore` (the last logout-all), 0 if none."""
        return int(self._settings().get("notBefore", 0))

    def refused(self, claims: dict[str, Any]) -> bool:
        """Whether a token belongs to a session a logout-all ended."""
        return int(claims.get("iat", 0)) < self.not_before() or claims.get("jti") in self.ended

    async def get(self, request: Request, parts: list[str]) -> Response:
        return json_response(self.representation())

    async def put(self, request: Request, parts: list[str]) -> Response:
        update = read_update(await request.body())
        if isinstance(update, Response):
            return update
        self._settings().update(update)
        self.store.save()
        return Response(status_code=204)

    async def logout_all(self, request: Request, parts: list[str]) -> Response:
        """End every session: Keycloak sets the realm's `notBefore` and removes the sessions,
        then answers 200 with the (empty) result of telling clients' admin URLs."""
        provider = self.provider
        self.ended.update(provider.access_tokens)
        provider.access_tokens.clear()
        for record in provider.refresh_tokens.values():
            record["ended"] = True
        provider.sessions.clear()
        self._settings()["notBefore"] = int(time.time())
        self.store.save()
        return json_response({})
