"""What every Broker endpoint shares: the route's MCP settings, the providers users sign in at,
the store and the records kept in it, the HTTP session to the providers, and the lookups built
on them (the issuer, a provider and its metadata, a client, the resource a request is for).

A request's handler gets the context bound to the request's route (`at`): its records are the
route's alone, and its clients are those registered there (see `binding`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import aiohttp

from ..asgi import Scope, request_origin
from ..controlplane.fetch import FetchError
from ..controlplane.snapshot import CompiledMcp
from ..dpop import MemoryReplayCache, ProofCheck, ReplayCache, TokenSeal, nonce_context
from .binding import RouteStore, route_key
from .clients import BrokerClient, ClientError, MetadataDocuments, read_client_id
from .errors import OAuthError
from .identity import SignInProvider
from .refresh import RefreshTokens
from .revocation import Revocation
from .state import BrokerState
from .store import BrokerStore
from .workload_grant import WorkloadGrant


@dataclass(frozen=True, slots=True)
class BrokerContext:
    """The Broker of one policy's route; stateless apart from `store`. `route` is the route key
    of the request it was bound to (`at`), and its records are kept under it."""

    mcp: CompiledMcp
    providers: tuple[SignInProvider, ...]
    store: BrokerStore  # shared with other routes: only its secret is used directly
    state: BrokerState
    refresh: RefreshTokens
    revocation: Revocation
    documents: MetadataDocuments
    session: Callable[[], aiohttp.ClientSession | None]
    policy: str  # the policy's key (`namespace/name`)
    # The token endpoint's DPoP proofs: one rule set per provider, then the workloads'.
    proofs: ProofCheck
    # Seals the access tokens bound to a client's key (the store's secret, the route's key).
    seal: TokenSeal
    route: str = ""
    origin: str = ""  # the gateway's origin as the bound request's client sees it
    # The `jwt-bearer` grant of workloadIdentity (None: not configured).
    workload: WorkloadGrant | None = None

    @classmethod
    def create(
        cls,
        mcp: CompiledMcp,
        providers: tuple[SignInProvider, ...],
        store: BrokerStore,
        documents: MetadataDocuments,
        session: Callable[[], aiohttp.ClientSession | None],
        policy: str,
        workload: WorkloadGrant | None = None,
        replay: Callable[[], ReplayCache] = MemoryReplayCache,
    ) -> BrokerContext:
        """A context for `at` to bind to requests: bound to its route already when the policy
        names its resource (the key is then known at load time, as workloadIdentity needs).
        `replay`: where the token endpoint's proofs are remembered (the route's resource
        server's cache: their `htu` tells them apart)."""
        route = route_key(policy, mcp.resource) if mcp.resource else ""
        settings = [p.dpop for p in providers]
        if workload is not None:
            settings.append(workload.spec.token_provider.dpop)
        # Nonces keyed as the route's resource server's: one server, one origin, one nonce.
        proofs = ProofCheck(settings, replay, store.secret, nonce_context(policy))
        refresh = RefreshTokens(RouteStore(store, route))
        state = BrokerState(refresh.store)
        revocation = Revocation(refresh.store, refresh)
        return cls(
            mcp,
            providers,
            store,
            state,
            refresh,
            revocation,
            documents,
            session,
            policy,
            proofs,
            TokenSeal(store.secret),
            route,
            workload=workload,
        )

    def at(self, scope: Scope) -> BrokerContext:
        """This context bound to the request: to its route's key (its records, its clients)
        and to the origin its client sees."""
        origin = request_origin(scope)
        if self.mcp.resource:
            return replace(self, origin=origin)
        route = self.route_for(scope)
        records = RouteStore(self.store, route)
        refresh = RefreshTokens(records)
        return replace(
            self,
            state=BrokerState(records),
            refresh=refresh,
            revocation=Revocation(records, refresh),
            route=route,
            origin=origin,
        )

    def route_for(self, scope: Scope) -> str:
        """The route key of a request of this route (`binding`)."""
        if self.mcp.resource:
            return self.route
        return route_key(self.policy, request_origin(scope) + self.mcp.mcp_path)

    @property
    def workload_index(self) -> int:
        """Where the workloads' proof rules are among `proofs` (after the providers')."""
        return len(self.providers)

    @property
    def authorize_path(self) -> str:
        """Where clients send the browser to sign in (and the consent form posts)."""
        return self.mcp.mcp_path + "/oauth/authorize"

    @property
    def token_path(self) -> str:
        """Where clients redeem codes and refresh tokens."""
        return self.mcp.mcp_path + "/oauth/token"

    @property
    def callback_path(self) -> str:
        """Where the provider sends the browser back to the gateway."""
        return self.mcp.mcp_path + "/oauth/callback"

    @property
    def jwks_path(self) -> str:
        """Where the key of the tokens issued to workloads is published."""
        return self.mcp.mcp_path + "/oauth/jwks"

    @property
    def revoke_path(self) -> str:
        """Where clients revoke tokens (RFC 7009)."""
        return self.mcp.mcp_path + "/oauth/revoke"

    @property
    def scopes(self) -> str:
        """The scope a request that names none asks for: every supported one."""
        return " ".join(self.mcp.scopes_supported)

    def issuer(self, scope: Scope) -> str:
        """The gateway's issuer as the client of this request sees it."""
        return request_origin(scope) + self.mcp.mcp_path

    def signin(self, index: int) -> SignInProvider:
        """A provider by its providers[] index (records written by another configuration may
        name one that is gone)."""
        if not 0 <= index < len(self.providers):
            raise OAuthError(
                400,
                "invalid_grant",
                "the identity provider this sign-in went through is no longer configured; "
                "sign in again",
            )
        return self.providers[index]

    async def provider(self, index: int = 0) -> dict[str, Any]:
        """A provider's metadata (502 when it cannot be had)."""
        discovery = self.signin(index).discovery
        try:
            if discovery is None:
                raise FetchError("no discovery document is configured for this provider")
            return await discovery.get()
        except FetchError as exc:
            raise OAuthError(
                502,
                "temporarily_unavailable",
                f"the identity provider's metadata is unavailable: {exc}",
            ) from exc

    async def client(self, client_id: str) -> BrokerClient:
        """The client behind a client id: registered at this route (DCR) or a metadata document
        URL."""
        client = read_client_id(await self.store.secret(), client_id)
        if client is not None:
            if client.route != self.route:
                raise ClientError("invalid_client", self._elsewhere(client_id, client.route))
            return client
        if client_id.startswith(("https://", "http://")):
            return await self.documents.resolve(client_id)
        raise ClientError(
            "invalid_client",
            f"client_id {client_id[:80]!r} is not registered "
            "with this gateway (register through the registration_endpoint or "
            "use a client metadata document URL)",
        )

    def _elsewhere(self, client_id: str, route: str | None) -> str:
        """Why a client id this gateway signed is not one of this route's, and the fix."""
        where = (
            "was issued by an earlier version of this gateway, before client ids were bound "
            "to one MCP server"
            if route is None
            else "was registered with another MCP server of this gateway, not "
            f"{self.resource_shown}"
        )
        return (
            f"client_id {client_id[:80]!r} {where}; register again through this server's "
            f"registration_endpoint {self.origin + self.mcp.registration_path}"
        )

    @property
    def resource_shown(self) -> str:
        """This route's resource, as messages name it."""
        return self.mcp.resource or self.origin + self.mcp.mcp_path

    def resource(self, scope: Scope) -> str:
        """The resource this route serves, as the client of this request reads it."""
        return self.mcp.resource or request_origin(scope) + self.mcp.mcp_path

    def target(
        self,
        scope: Scope,
        given: str | None,
        redirect_href: str | None = None,
        state: str | None = None,
    ) -> str:
        """The resource a request is for: this route's (RFC 8707; MCP clients MUST send it on
        authorization and token requests, as the protected resource metadata names it)."""
        expected = self.resource(scope)
        if given is not None and given.rstrip("/") != expected.rstrip("/"):
            raise OAuthError(
                400,
                "invalid_target",
                f"resource {given[:200]!r} is not served here; this authorization server "
                f"issues tokens for {expected!r} only",
                redirect_href=redirect_href,
                state=state,
            )
        return expected
