"""The vocabulary of the shared OpenID provider: a client as the flavour describes it, a subject
(a user or a client's service account), and the `Flavour` that decides what goes into tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from joserfc.jwk import RSAKey

from ..provider_kinds import ProviderKind


@dataclass(frozen=True)
class OAuthClient:
    client_id: str
    public: bool
    secret: str | None
    redirect_uris: tuple[tuple[str, str], ...]  # (matching mode, value)
    grant_types: frozenset[str]
    consent: bool
    name: str = ""
    context: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Subject:
    id: str
    username: str
    email: str | None = None
    name: str | None = None
    groups: tuple[str, ...] = ()
    service_account: bool = False


class Flavour(Protocol):
    kind: ProviderKind
    interaction_prefix: str
    grant_not_allowed_error: tuple[int, str]

    def token_exchange(
        self, base: str, client: OAuthClient, form: dict[str, str], audiences: list[str]
    ) -> dict[str, Any]:
        """RFC 8693, as this provider does it (its own rules and refusals)."""
        ...

    def issuer(self, base: str, client: OAuthClient) -> str:
        """The issuer for tokens of `client`."""
        ...

    def find_client(self, client_id: str) -> OAuthClient | None:
        """A registered client."""
        ...

    def authenticate(self, username: str, password: str) -> Subject | None:
        """A user whose credentials match."""
        ...

    def service_subject(self, client: OAuthClient) -> Subject:
        """The service account a client-credentials token stands for."""
        ...

    def token_claims(
        self, client: OAuthClient, subject: Subject, scopes: list[str], resource: str | None
    ) -> dict[str, Any]:
        """Claims of the access token (beyond iss, iat, exp, jti)."""
        ...

    def id_token_claims(
        self, client: OAuthClient, access: dict[str, Any], standard: dict[str, Any]
    ) -> dict[str, Any]:
        """Claims of the ID token, from the access token's and the standard OpenID ones."""
        ...

    def signing_key(self, client: OAuthClient) -> RSAKey:
        """The key that signs `client`'s tokens."""
        ...

    def access_token_ttl(self, client: OAuthClient) -> int:
        """Access-token lifetime in seconds."""
        ...

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a subject (for refresh tokens)."""
        ...

    def scope_tokens(self, text: str) -> list[str]:
        """The scopes of a `scope` parameter, split as this provider splits it."""
        ...
