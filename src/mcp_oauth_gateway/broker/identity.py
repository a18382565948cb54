"""The identity providers a Broker signs users in at, and how one is picked for a sign-in: the
only one, the one whose domains a `login_hint` names, or the one the user chooses on the
consent page."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..controlplane.discovery import DiscoveryCache
from ..controlplane.snapshot import CompiledDpop


@dataclass(frozen=True, slots=True)
class SignInProvider:
    """One provider as the Broker uses it."""

    index: int  # its place in the policy's providers[]: what records and forms carry
    name: str  # shown on the consent page
    client_id: str  # the client the gateway signs users in as there
    discovery: DiscoveryCache | None
    # RFC 8707 `resource` goes on to the provider only if it accepts the parameter.
    forwards_resource: bool = True
    login_hint_domains: tuple[str, ...] = ()
    issuer: str = ""  # its `iss`: remembered consent names it beside the index
    # Whether the tokens of a sign-in here are bound to the client's DPoP key, and the proofs
    # the token endpoint takes for them (the provider's `dpop`, `dpopProofs`).
    dpop: CompiledDpop = field(default_factory=CompiledDpop)

    @property
    def identity(self) -> tuple[int, str]:
        """What remembered consent names this provider by: its place and its issuer (a policy
        that reorders its providers does not hand consent given at one to another)."""
        return self.index, self.issuer


def pick_by_hint(providers: tuple[SignInProvider, ...], login_hint: str | None) -> int | None:
    """The provider a sign-in goes to without asking: the only one, or the one whose
    `loginHintDomains` has the domain of a `user@domain` hint; None when the user chooses."""
    if len(providers) == 1:
        return 0
    if login_hint is None or "@" not in login_hint:
        return None
    domain = login_hint.rpartition("@")[2].lower()
    matches = [p.index for p in providers if domain in p.login_hint_domains]
    return matches[0] if len(matches) == 1 else None
