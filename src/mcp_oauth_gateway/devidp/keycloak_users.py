"""The realm's users as the OpenID provider sees them: looked up case-insensitively, signed in by
password (enabled users only), and each client's service-account user, created on first use as
Keycloak does."""

from __future__ import annotations

import time

from .oidc import OAuthClient, Subject
from .store import Record, Store, check_password, new_id


class Users:
    """Lookups over the realm's users and groups, and users as subjects."""

    def __init__(self, store: Store):
        self.store = store

    def find(self, **match: str) -> Record | None:
        """The first user whose fields equal `match`, ignoring case."""
        for user in self.store.collection("kc_users"):
            if all(str(user.get(k, "")).lower() == v.lower() for k, v in match.items()):
                return user
        return None

    def group(self, group_id: str) -> Record | None:
        """The group with this id."""
        return next((g for g in self.store.collection("kc_groups") if g["id"] == group_id), None)

    def subject(self, user: Record) -> Subject:
        """A user as the OpenID provider sees it (its groups by name)."""
        names = [g["name"] for gid in user.get("groups", []) if (g := self.group(gid))]
        full = " ".join(filter(None, [user.get("firstName"), user.get("lastName")])) or None
        return Subject(
            id=user["id"],
            username=user["username"],
            email=user.get("email"),
            name=full,
            groups=tuple(names),
            service_account=user.get("serviceAccountClientId") is not None,
        )

    def authenticate(self, username: str, password: str) -> Subject | None:
        """The enabled user with these credentials."""
        user = self.find(username=username)
        if user is None or not user.get("enabled", True):
            return None
        if not check_password(password, user.get("password")):
            return None
        return self.subject(user)

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a user."""
        user = self.find(id=subject_id)
        return self.subject(user) if user else None

    def service_subject(self, client: OAuthClient) -> Subject:
        """The client's service-account user (created on first use, as Keycloak does)."""
        username = f"service-account-{client.client_id}".lower()
        user = self.find(username=username)
        if user is None:
            user = {
                "id": new_id(),
                "username": username,
                "enabled": True,
                "groups": [],
                "serviceAccountClientId": client.client_id,
                "createdTimestamp": int(time.time() * 1000),
            }
            self.store.collection("kc_users").append(user)
            self.store.save()
        return self.subject(user)
