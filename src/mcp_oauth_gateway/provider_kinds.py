"""The identity-provider products the gateway adapts to, as a type, and one profile per kind:
how configuration spells it, the word the tools name it by, how it registers MCP clients, and
what it needs at load time.

Every layer keys its per-kind behaviour by `ProviderKind` (the access-token rule and the adapter
in `providers/`); a new kind is a member, a profile here, and those two entries there. The tools
name kinds by their lower-case word (`flavour`): the dev identity provider and the provisioning
tools serve the kinds they have a flavour and a tool for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class ProviderKind(StrEnum):
    """A provider product. The value is how `/config` and messages name it."""

    KEYCLOAK = "Keycloak"
    # The specification calls authentik "provider B"; configuration takes both names.
    AUTHENTIK = "ProviderB"

    @property
    def flavour(self) -> str:
        """The lower-case word the tools name it by (`--flavour`, `idp keycloak|authentik`,
        the dev identity provider's flavours)."""
        return PROFILES[self].flavour

    @classmethod
    def from_flavour(cls, word: str) -> ProviderKind:
        """The kind a tool's word names; ValueError listing the words otherwise."""
        kind = FLAVOURS.get(word)
        if kind is None:
            raise ValueError(f"{word!r}; allowed values: {', '.join(FLAVOURS)}")
        return kind


@dataclass(frozen=True)
class ProviderFacts:
    """What load-time checks see of one configured provider."""

    path: str  # where it is in the resource, e.g. spec.traffic.jwtAuthentication.providers[0]
    mcp_path: str  # where its `mcp` block is
    issuer: str
    shown_issuer: str  # the issuer as messages may show it (no user information)
    audiences: tuple[str, ...] | None
    client_id: str | None
    client_id_field: str  # the field `client_id` came from, as messages name it


@dataclass(frozen=True)
class ProviderProfile:
    """One kind's behaviour, as data the layers above read."""

    kind: ProviderKind
    # Every spelling configuration accepts for it.
    aliases: tuple[str, ...]
    # The word the command line and the dev identity provider name it by.
    flavour: str
    # Registration: forwarded to the provider's own endpoint (its discovery document names it),
    # or answered by the gateway with the pre-registered public client.
    forwards_registration: bool
    # Whether the provider takes the RFC 8707 `resource` parameter on sign-in.
    forwards_resource: bool
    # Problems with a provider's configuration that only this kind has.
    problems: Callable[[ProviderFacts], list[str]]


def _no_problems(facts: ProviderFacts) -> list[str]:
    return []


def _authentik_problems(facts: ProviderFacts) -> list[str]:
    """authentik has no dynamic registration (the pre-registered client answers it), sets `aud`
    to the client id, and its issuers end with `/`."""
    problems = []
    if not facts.client_id:
        problems.append(
            f"{facts.mcp_path}.clientId is required when provider is ProviderB (the "
            f"pre-registered public client returned to MCP clients; or set {facts.path}.clientId)"
        )
    elif facts.audiences and facts.client_id not in facts.audiences:
        problems.append(
            f"{facts.path}.audiences must contain {facts.client_id_field} {facts.client_id!r}: "
            "provider B sets aud to the client id"
        )
    if not facts.issuer.endswith("/"):
        problems.append(
            f"{facts.path}.issuer {facts.shown_issuer!r} must end with '/': provider B "
            "issuers are <url>/application/o/<slug>/"
        )
    return problems


PROFILES: dict[ProviderKind, ProviderProfile] = {
    ProviderKind.AUTHENTIK: ProviderProfile(
        ProviderKind.AUTHENTIK,
        aliases=("ProviderB", "Authentik"),
        flavour="authentik",
        forwards_registration=False,
        forwards_resource=True,
        problems=_authentik_problems,
    ),
    ProviderKind.KEYCLOAK: ProviderProfile(
        ProviderKind.KEYCLOAK,
        aliases=("Keycloak",),
        flavour="keycloak",
        forwards_registration=True,
        forwards_resource=True,
        problems=_no_problems,
    ),
}

# Configuration spelling → kind, in the order messages list the allowed values.
ALIASES: dict[str, ProviderKind] = {
    alias: profile.kind for profile in PROFILES.values() for alias in profile.aliases
}

# The tools' word → kind.
FLAVOURS: dict[str, ProviderKind] = {profile.flavour: profile.kind for profile in PROFILES.values()}


def profile(kind: ProviderKind) -> ProviderProfile:
    """The profile of a kind."""
    return PROFILES[kind]


def parse_kind(value: str) -> ProviderKind:
    """The kind a configuration spelling names; ValueError listing the spellings otherwise."""
    kind = ALIASES.get(value)
    if kind is None:
        raise ValueError(f"{value!r}; allowed values: {', '.join(ALIASES)}")
    return kind
