"""What a route's stages are built from: the compiled route, the process's shared parts, and what
more than one stage needs (the Broker, the headers the stages own), each made once per route."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from .. import audit
from ..asgi import ASGIApp, Headers, Limits, Receive, Scope, Send, send_error
from ..authorization_server_modes import AuthorizationServerMode
from ..broker.binding import route_key
from ..broker.endpoints import Broker
from ..broker.identity import SignInProvider
from ..broker.workload_grant import WorkloadGrant
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import (
    CompiledCredentials,
    CompiledPolicy,
    CompiledRoute,
    CompiledTokenExchange,
)
from ..dataplane.bounded import CacheCounts
from ..dataplane.credentials import Credential, HeaderSource, TargetCredentials, owned_by
from ..dataplane.metrics import Metrics
from ..dataplane.token_exchange import ExchangeError, TokenExchanger
from ..provider_kinds import profile
from ..proxy.federation.target import CredentialHeaders, NoCredential
from ..proxy.upstream import Upstream
from ..useroauth.target_credential import NotConnected, UserOAuthCredential
from .process_state import ProcessState
from .user_oauth_targets import by_target
from .workload import WorkloadAssertions


@dataclass(frozen=True)
class Shared:
    """What every route's pipeline is built from, besides the route itself."""

    control: ControlPlane
    upstream: Upstream
    trust_forwarded: bool
    process_state: ProcessState
    limits: Limits
    metrics: Metrics | None = None
    # The process-wide budgets of the verified-token cache and the authorization memos, shared
    # by every route's copy (whatever the number of routes, at most --token-cache-entries).
    token_cache: CacheCounts = field(default_factory=CacheCounts)
    authorization_cache: CacheCounts = field(default_factory=CacheCounts)


@dataclass(frozen=True)
class Failure:
    """Why a route cannot be served safely: every request gets this error."""

    status: int
    error: str
    description: str


class FailClosed:
    """Answers every request with an error: the route cannot be served safely."""

    def __init__(self, status: int, error: str, description: str):
        self.status = status
        self.error = error
        self.description = description

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The entry point's own refusals (entry rules, routing) name themselves first.
        audit.deny(scope, "fail-closed", self.description)
        await send_error(send, self.status, self.error, self.description)


class RouteContext:
    """One route rule being assembled. `shared_with`: the other protected resources on a host
    the route serves (then its OAuth endpoints do not answer the root forms)."""

    def __init__(self, route: CompiledRoute, shared: Shared, shared_with: tuple[str, ...] = ()):
        self.route = route
        self.shared = shared
        self.shared_with = shared_with
        self.policy: CompiledPolicy | None = route.policy
        self._exchangers: dict[CompiledTokenExchange, TokenExchanger] = {}

    @cached_property
    def failure(self) -> Failure | None:
        """Set when the route must fail closed (see `failure_of`)."""
        return failure_of(self.route)

    @cached_property
    def owned_headers(self) -> tuple[frozenset[bytes], frozenset[bytes]]:
        """The request headers the stages set for the backend, and those they remove."""
        return set_headers(self.policy)

    @cached_property
    def broker(self) -> Broker | None:
        """The policy's Broker (Broker mode only): its endpoints and its browser pages."""
        policy = self.policy
        if policy is None or policy.provider is None or policy.mcp is None:
            return None
        if not is_broker(self.route):
            return None
        control, process_state = self.shared.control, self.shared.process_state
        mcp = policy.mcp
        # What the Broker keeps must not hold this context: the context keeps the Broker
        # (cached), and the cycle would keep the route's pipeline after a reload.
        return Broker(
            mcp,
            self.sign_in_providers(policy),
            process_state.store(policy.mcp.redis_url),
            process_state.documents,
            lambda: control.session,
            policy.key,
            self.workload_grant(policy),
            # The route's resource server's cache: a proof is accepted once, wherever.
            lambda: process_state.dpop_replay(policy.key, mcp.redis_url),
        )

    def workload_grant(self, policy: CompiledPolicy) -> WorkloadGrant | None:
        """The policy's jwt-bearer grant: its assertions checked by the data plane's JWT
        verification, its tokens signed with the route's key (kept by the process, so derived
        once however often the configuration is reloaded)."""
        mcp = policy.mcp
        if mcp is None or mcp.workload is None or mcp.resource is None:
            return None
        route = route_key(policy.key, mcp.resource)
        keys = self.shared.process_state.workload_keys(mcp.redis_url, route)
        judge = WorkloadAssertions(mcp.workload, self.shared.control.keysets)
        return WorkloadGrant(mcp.workload, judge, keys)

    def sign_in_providers(self, policy: CompiledPolicy) -> tuple[SignInProvider, ...]:
        """What the Broker needs of each provider: its metadata, client, name and adapter."""
        out = []
        for provider in policy.providers:
            out.append(
                SignInProvider(
                    index=provider.index,
                    name=provider.name,
                    client_id=provider.client_id or "",
                    discovery=self.shared.control.discoveries.get(provider.discovery_url),
                    # A generic provider gets `resource` too: ignored or honoured, never harmful.
                    forwards_resource=profile(provider.kind).forwards_resource
                    if provider.kind
                    else True,
                    login_hint_domains=provider.login_hint_domains,
                    issuer=provider.issuer,
                    dpop=provider.dpop,
                )
            )
        return tuple(out)

    def exchanger(self, policy: CompiledPolicy) -> TokenExchanger | None:
        """The token exchanger of a TokenExchange backend (its default credential)."""
        credentials = policy.credentials
        if credentials is None or credentials.token_exchange is None:
            return None
        return self.exchanger_for(policy, credentials.token_exchange)

    def exchanger_for(self, policy: CompiledPolicy, spec: CompiledTokenExchange) -> TokenExchanger:
        """The route's exchanger for one exchange (audience, resource, scope, client): each
        provider's token endpoint (from its metadata) and keyset version, by issuer. One per
        distinct exchange, each with its own cache: targets exchanging alike share one."""
        made = self._exchangers.get(spec)
        if made is not None:
            return made
        control = self.shared.control
        metrics = self.shared.metrics
        providers = {
            p.issuer: (
                control.discoveries.get(p.discovery_url),
                _version_of(control, p.keyset.url),
            )
            for p in policy.providers
        }
        made = self._exchangers[spec] = TokenExchanger(
            spec,
            providers,
            lambda: control.session,
            metrics.exchange_counter(self.route.route) if metrics else None,
        )
        return made

    def credential_headers(self) -> tuple[CredentialHeaders, frozenset[bytes]] | None:
        """The federation's way to each target's credential, and the headers they set (None:
        no credentials per target); a failed exchange is the target's NoCredential."""
        credentials = self.target_credentials
        if credentials is None:
            return None

        async def headers(scope: Scope, name: str) -> Headers:
            try:
                return await credentials.headers_for(scope, name)
            except ExchangeError as exc:
                raise NoCredential(f"no credential for it: {exc.description}") from None
            except NotConnected as exc:
                raise NoCredential(f"no credential for it: {exc}") from None

        return headers, credentials.owned

    @cached_property
    def target_credentials(self) -> TargetCredentials | None:
        """Each target's credential on a federated route with credentials per target (None
        otherwise: every target gets the backend-credentials stage's)."""
        policy = self.policy
        if policy is None or not self.route.federated:
            return None
        users = by_target(self.route)
        if not policy.target_credentials and not users:
            return None
        listed = dict(policy.target_credentials)
        sources: dict[str, HeaderSource | None] = {}
        control = self.shared.control
        for target in self.route.targets:
            chosen = listed.get(target.name, policy.credentials)
            if target.name in users:
                key, upstream = users[target.name]
                # The process keeps what it is given: the control plane, not this route's
                # context (which would keep the first configuration's route alive for good).
                runtime = self.shared.process_state.user_oauth(lambda: control.session)
                assert runtime is not None, "userOAuth policies are refused without a key"
                sources[target.name] = UserOAuthCredential(upstream, key, runtime)
            else:
                sources[target.name] = None if chosen is None else self._credential(policy, chosen)
        return TargetCredentials(sources)

    def _credential(self, policy: CompiledPolicy, credentials: CompiledCredentials) -> Credential:
        exchange = credentials.token_exchange
        exchanger = None if exchange is None else self.exchanger_for(policy, exchange)
        return Credential(credentials, exchanger)

    def pages(self) -> dict[str, ASGIApp]:
        """The Broker's browser pages (none outside Broker mode)."""
        return self.broker.pages() if self.broker is not None else {}


def failure_of(route: CompiledRoute) -> Failure | None:
    """Why a route cannot be served safely: no backend, or an invalid policy (else None)."""
    if route.broken is not None or route.target is None:
        return Failure(503, "backend_unavailable", route.broken or "route has no backend")
    if route.policy is not None and route.policy.invalid is not None:
        return Failure(503, "policy_invalid", route.policy.invalid)
    return None


def is_broker(route: CompiledRoute) -> bool:
    """A servable route whose policy makes the gateway the authorization server (Broker)."""
    policy = route.policy
    if policy is None or policy.provider is None or policy.mcp is None:
        return False
    return policy.mcp.mode is AuthorizationServerMode.BROKER and failure_of(route) is None


def set_headers(policy: CompiledPolicy | None) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """The request headers a route's stages set for the backend, and those they remove."""
    sets: set[bytes] = set()
    removes: frozenset[bytes] = frozenset()
    if policy is None:
        return frozenset(), removes
    if policy.forward_token:
        sets.add(b"authorization")
    for credentials in policy.every_credential():
        sets |= owned_by(credentials)
    if policy.transformation is not None:
        sets.update(name for name, _ in policy.transformation.set)
        removes = policy.transformation.remove
    return frozenset(sets), removes


def _version_of(control: ControlPlane, url: str) -> Callable[[], int]:
    """The current version of a keyset (0 while none was fetched)."""

    def version() -> int:
        holder = control.keysets.get(url)
        keyset = holder.keyset if holder is not None else None
        return keyset.version if keyset is not None else 0

    return version
