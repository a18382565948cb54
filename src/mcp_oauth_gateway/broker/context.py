"""What every Broker endpoint shares: the route's MCP settings, the providers users sign in at,
the store and the records kept in it, the HTTP session to the providers, and the lookups built
on them (the issuer, a provider and its metadata, a client, the resource a request is for)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..asgi import Scope, request_origin
from ..controlplane.fetch import FetchError
from ..controlplane.snapshot import CompiledMcp
from .clients import BrokerClient, ClientError, MetadataDocuments, read_client_id
from .errors import OAuthError
from .identity import SignInProvider
from .refresh import RefreshTokens
from .revocation import Revocation
from .state import BrokerState
from .store import BrokerStore


@dataclass(frozen=True, slots=True)
class BrokerContext:
    """The Broker of one policy; stateless apart from `store`."""

    mcp: CompiledMcp
    providers: tuple[SignInProvider, ...]
    store: BrokerStore
    state: BrokerState
    refresh: RefreshTokens
    revocation: Revocation
    documents: MetadataDocuments
    session: Callable[[], aiohttp.ClientSession | None]

    @classmethod
    def create(
        cls,
        mcp: CompiledMcp,
        providers: tuple[SignInProvider, ...],
        store: BrokerStore,
        documents: MetadataDocuments,
        session: Callable[[], aiohttp.ClientSession | None],
    ) -> BrokerContext:
        """A context whose records all live in `store`."""
        refresh = RefreshTokens(store)
        return cls(
            mcp,
            providers,
            store,
            BrokerState(store),
            refresh,
            Revocation(store, refresh),
            documents,
            session,
        )

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
        """The client behind a client id: registered here (DCR) or a metadata document URL."""
        client = read_client_id(await self.store.secret(), client_id)
        if client is not None:
            return client
        if client_id.startswith(("https://", "http://")):
            return await self.documents.resolve(client_id)
        raise ClientError(
            "invalid_client",
            f"client_id {client_id[:80]!r} is not registered "
            "with this gateway (register through the registration_endpoint or "
            "use a client metadata document URL)",
        )

    def target(
        self,
        scope: Scope,
        given: str | None,
        redirect_href: str | None = None,
        state: str | None = None,
    ) -> str:
        """The resource a request is for: this route's (RFC 8707; MCP clients MUST send it on
        authorization and token requests, as the protected resource metadata names it)."""
        expected = self.mcp.resource or request_origin(scope) + self.mcp.mcp_path
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
