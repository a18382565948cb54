"""What authentik puts in its tokens and who it issues them to: a provider bound to an
application as a client, the client-credentials service account authentik upserts, the access
token's claims (`aud` = client id, `sub` by the provider's `sub_mode`, scope claims from its
mappings, `groups` from `profile`) and the ID token made from them."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from .authentik_state import AuthentikState, now
from .oidc import OAuthClient, Subject
from .store import Record, new_id


def oauth_client(state: AuthentikState, client_id: str) -> OAuthClient | None:
    """The provider with this client id, if an application uses it."""
    provider = state.provider_by_client(client_id)
    if provider is None:
        return None
    application = state.application_of(provider)
    if application is None:
        return None
    flow = state.find("ak_flows", pk=provider["authorization_flow"])
    return OAuthClient(
        client_id=provider["client_id"],
        public=provider["client_type"] == "public",
        secret=provider["client_secret"],
        redirect_uris=tuple(
            (r["matching_mode"], r["url"])
            for r in provider["redirect_uris"]
            if r.get("redirect_uri_type", "authorization") == "authorization"
        ),
        grant_types=frozenset(provider["grant_types"]),
        consent=bool(flow and flow["slug"].endswith("explicit-consent")),
        name=application["name"],
        context={"slug": application["slug"], "provider": provider["pk"]},
    )


def service_user(state: AuthentikState, client: OAuthClient) -> Record:
    """`ak-<provider name>-client_credentials`, upserted as authentik does (a user save: every
    cached application list goes)."""
    provider = state.find("ak_providers", pk=client.context["provider"])
    assert provider is not None
    username = f"ak-{provider['name']}-client_credentials"
    user = state.find("ak_users", username=username)
    if user is None:
        users = state.store.collection("ak_users")
        user = {
            "pk": max((u["pk"] for u in users), default=0) + 1,
            "username": username,
            "name": username,
            "uuid": new_id(),
            "type": "service_account",
            "is_active": True,
            "date_joined": now(),
            "path": f"goauthentik.io/apps/{client.context['slug']}",
        }
        users.append(user)
        state.store.save()
        state.forget_application_lists()
    return user


def _sub(provider: Record, subject: Subject, user: Record) -> Any:
    """The `sub` claim by the provider's `sub_mode` (hashed user id unless told)."""
    return {
        "user_username": subject.username,
        "user_id": subject.id,
        "user_uuid": user.get("uuid", subject.id),
        "user_email": subject.email or subject.username,
    }.get(provider["sub_mode"], hashlib.sha256(subject.username.encode()).hexdigest())


def access_claims(
    state: AuthentikState, client: OAuthClient, subject: Subject, scopes: list[str]
) -> dict[str, Any]:
    """`aud` = client id, `sub` by `sub_mode`, scope claims from the provider's mappings."""
    provider = state.find("ak_providers", pk=client.context["provider"])
    assert provider is not None
    user = state.find("ak_users", username=subject.username) or {}
    sub = _sub(provider, subject, user)
    mapped = {
        m["scope_name"]
        for m in state.store.collection("ak_mappings")
        if m["pk"] in provider["property_mappings"]
    }
    granted = [s for s in scopes if s in mapped]
    claims: dict[str, Any] = {
        "sub": sub,
        "aud": client.client_id,
        "azp": client.client_id,
        "uid": secrets.token_hex(16),
        "scope": " ".join(granted),
        "acr": "goauthentik.io/providers/oauth2/default",
    }
    if provider.get("include_claims_in_id_token", True):
        if "email" in granted:
            claims["email"] = subject.email
            claims["email_verified"] = False
        if "profile" in granted:
            claims.update(
                {
                    "name": subject.name,
                    "given_name": subject.name,
                    "preferred_username": subject.username,
                    "nickname": subject.username,
                    "groups": list(subject.groups),
                }
            )
    return claims


def id_claims(access: dict[str, Any], standard: dict[str, Any]) -> dict[str, Any]:
    """authentik's ID token: the access token is the ID token plus `azp` and `uid`
    (IDToken.to_access_token), so the ID token is the access token's claims without them.
    `jti` is the dev IdP's own bookkeeping of access tokens, not an authentik claim."""
    claims = {name: value for name, value in access.items() if name not in ("azp", "uid", "jti")}
    claims["auth_time"] = standard["auth_time"]
    return claims
