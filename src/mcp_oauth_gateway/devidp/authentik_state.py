"""What every part of the authentik flavour shares: the stored objects and the lookups over them,
the clock the start-up phases and the application list cache read (tests replace it to skip
time), the key pairs as signing keys, users as subjects, and the application list cache itself
(see `authentik_applications` for how authentik keeps it)."""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from joserfc.jwk import RSAKey

from .oidc import Subject
from .settings import DevIdpSettings
from .store import Record, Store

# authentik caches each user's application list page for a day (`timeout=86400`).
APP_LIST_CACHE_SECONDS = 86400.0


def now() -> str:
    """A timestamp as authentik's API writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def generate_id(length: int = 40) -> str:
    """authentik's `generate_id`: letters and digits (client ids, client secrets)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


class AuthentikState:
    """The objects, clock and caches of one authentik instance."""

    def __init__(self, store: Store, settings: DevIdpSettings, clock: Callable[[], float]):
        self.store = store
        self.settings = settings
        self.clock = clock
        self.started = clock()
        # (user pk, page number) -> (expires at, application pks); in memory, as authentik's
        # cache is separate from the objects (a dev IdP restart empties it).
        self._app_lists: dict[tuple[int, int], tuple[float, list[str]]] = {}
        self._keys: dict[str, RSAKey] = {}

    def elapsed(self) -> float:
        """Seconds since the start-up phases began."""
        return self.clock() - self.started

    # --- lookups --------------------------------------------------------------------------

    def find(self, collection: str, **match: Any) -> Record | None:
        """The first object of a collection whose fields equal `match`."""
        for item in self.store.collection(collection):
            if all(item.get(k) == v for k, v in match.items()):
                return item
        return None

    def provider_by_client(self, client_id: str) -> Record | None:
        """The OAuth2 provider with this client id."""
        return self.find("ak_providers", client_id=client_id)

    def application_of(self, provider: Record) -> Record | None:
        """The application a provider is bound to."""
        return self.find("ak_applications", provider=provider["pk"])

    def key_for(self, keypair_pk: str | None) -> RSAKey | None:
        """The signing key of a certificate key pair (imported once)."""
        if keypair_pk is None:
            return None
        if keypair_pk not in self._keys:
            keypair = self.find("ak_keypairs", pk=keypair_pk)
            if keypair is None:
                return None
            self._keys[keypair_pk] = RSAKey.import_key(keypair["jwk"])
        return self._keys[keypair_pk]

    def subject(self, user: Record) -> Subject:
        """A user as the OpenID provider sees it (its groups by name)."""
        groups = tuple(
            g["name"] for g in self.store.collection("ak_groups") if user["pk"] in g["users"]
        )
        return Subject(
            id=str(user["pk"]),
            username=user["username"],
            email=user.get("email"),
            name=user.get("name"),
            groups=groups,
            service_account=user.get("type") == "service_account",
        )

    # --- the application list cache -------------------------------------------------------

    def forget_application_lists(self) -> None:
        """What authentik's `post_save` handlers do when an application is created or a user,
        group or policy is saved: drop every user's cached application list pages."""
        self._app_lists.clear()

    def cached_page(self, user_pk: int, page: int) -> list[str]:
        """The application pks cached for this user and page ([] when none or expired)."""
        expires, pks = self._app_lists.get((user_pk, page), (0.0, []))
        return pks if self.clock() < expires else []

    def cache_page(self, user_pk: int, page: int, pks: list[str]) -> None:
        """Cache a user's page of application pks for a day."""
        self._app_lists[(user_pk, page)] = (self.clock() + APP_LIST_CACHE_SECONDS, pks)
