"""The start-up phases of a fresh authentik install: 503 (`Retry-After`) to everything but
liveness while the migrations run, then the web process creates its self-signed certificate key
pair and the worker applies its blueprints in two steps (the flows and the `openid` mapping, then
the other scope mappings), so a client sees partial results; and the users that exist before
provisioning."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .authentik_state import AuthentikState, now
from .oidc import json_response
from .store import hash_password, new_id, new_signing_key

FLOWS = [  # slug, name, designation, authentication
    (
        "default-provider-authorization-implicit-consent",
        "Authorize Application",
        "authorization",
        "require_authenticated",
    ),
    (
        "default-provider-authorization-explicit-consent",
        "Authorize Application",
        "authorization",
        "require_authenticated",
    ),
    ("default-provider-invalidation-flow", "Logged out of application", "invalidation", "none"),
    ("default-invalidation-flow", "Default Invalidation Flow", "invalidation", "none"),
    ("default-authentication-flow", "Welcome to authentik!", "authentication", "none"),
]
SCOPES = [  # scope_name, managed suffix, name
    ("openid", "scope-openid", "authentik default OAuth Mapping: OpenID 'openid'"),
    ("email", "scope-email", "authentik default OAuth Mapping: OpenID 'email'"),
    ("profile", "scope-profile", "authentik default OAuth Mapping: OpenID 'profile'"),
    (
        "entitlements",
        "scope-entitlements",
        "authentik default OAuth Mapping: Application Entitlements",
    ),
    (
        "offline_access",
        "scope-offline_access",
        "authentik default OAuth Mapping: OpenID 'offline_access'",
    ),
    (
        "goauthentik.io/api",
        "scope-authentik_api",
        "authentik default OAuth Mapping: authentik API access",
    ),
]


class Startup:
    """The phases of a fresh install, timed by the instance's clock."""

    def __init__(self, state: AuthentikState):
        self.state = state
        self._phases_begun = False

    def migrating(self) -> bool:
        """Whether the server still runs its database migrations (answers 503)."""
        state = self.state
        if not self._phases_begun:
            # Timed from the first request that is not a liveness probe, not from process
            # start: a client that comes late (a busy machine) still meets every phase.
            self._phases_begun = True
            state.started = state.clock()
        return state.elapsed() < state.settings.migrations_seconds

    def reconcile(self) -> None:
        """Create what the web process and the worker create, once their time has come."""
        state = self.state
        worker = state.elapsed() - state.settings.migrations_seconds
        if worker < 0:
            return
        changed = False
        if not state.store.collection("ak_keypairs"):
            state.store.collection("ak_keypairs").append(
                {
                    "pk": new_id(),
                    "name": "authentik Self-signed Certificate",
                    "managed": None,
                    "jwk": new_signing_key("ak"),
                    "created": now(),
                }
            )
            changed = True
        # The worker applies blueprints in two steps, so a client sees partial results.
        if worker >= state.settings.worker_seconds / 2:
            changed |= self._ensure_flows()
            changed |= self._ensure_mappings(SCOPES[:1])
        if worker >= state.settings.worker_seconds:
            changed |= self._ensure_mappings(SCOPES)
        if changed:
            state.store.save()

    def _ensure_flows(self) -> bool:
        flows = self.state.store.collection("ak_flows")
        if flows:
            return False
        for slug, name, designation, authentication in FLOWS:
            flows.append(
                {
                    "pk": new_id(),
                    "slug": slug,
                    "name": name,
                    "title": name,
                    "designation": designation,
                    "authentication": authentication,
                }
            )
        return True

    def _ensure_mappings(self, wanted: list[tuple[str, str, str]]) -> bool:
        mappings = self.state.store.collection("ak_mappings")
        present = {m["managed"] for m in mappings}
        changed = False
        for scope_name, suffix, name in wanted:
            managed = f"goauthentik.io/providers/oauth2/{suffix}"
            if managed not in present:
                mappings.append(
                    {
                        "pk": new_id(),
                        "managed": managed,
                        "name": name,
                        "scope_name": scope_name,
                        "expression": "return {}",
                        "description": "",
                    }
                )
                changed = True
        return changed

    def seed_users(self) -> None:
        """`akadmin` and the configured seed users, each once."""
        store, settings = self.state.store, self.state.settings
        users = store.collection("ak_users")
        names = ["akadmin", *settings.seed_users]
        for username in names:
            if any(u["username"] == username for u in users):
                continue
            users.append(
                {
                    "pk": len(users) + 1,
                    "username": username,
                    "name": "authentik Default Admin"
                    if username == "akadmin"
                    else username.title(),
                    "email": f"{username}@example.com",
                    "uuid": new_id(),
                    "type": "internal",
                    "is_active": True,
                    "password": hash_password(settings.seed_password),
                    "date_joined": now(),
                }
            )
        store.save()


def starting_response(request: Request) -> Response:
    """What authentik's router answers while migrations run: 503 with `Retry-After: 5`."""
    accept = request.headers.get("accept", "")
    headers = {"Retry-After": "5"}
    if "application/json" in accept:
        return json_response({"error": "authentik starting"}, 503, headers)
    if "text/html" in accept:
        return Response(
            "<html><body><h1>authentik is starting…</h1></body></html>",
            503,
            headers,
            media_type="text/html",
        )
    return Response("authentik starting", 503, headers, media_type="text/plain")
