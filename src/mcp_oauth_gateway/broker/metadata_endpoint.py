"""The Broker's authorization server metadata (RFC 8414): the gateway's own endpoints; the
algorithms its token endpoint takes DPoP proofs in (RFC 9449 §5.1: every algorithm of every
provider whose tokens it binds, and the workloads'; absent when none is bound); and, with
workloadIdentity, the key of the tokens it issues to workloads (its `jwks_uri`)."""

from __future__ import annotations

from typing import Any

from ..asgi import Receive, Scope, Send, request_origin, send_json
from ..dpop import offered_algorithms
from .context import BrokerContext
from .errors import method_not_allowed
from .workload_grant import JWT_BEARER


async def metadata(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """RFC 8414 metadata of the gateway as authorization server."""
    if scope["method"] not in ("GET", "HEAD"):
        raise method_not_allowed("GET")
    origin = request_origin(scope)
    document: dict[str, Any] = {
        "issuer": origin + ctx.mcp.mcp_path,
        "authorization_endpoint": origin + ctx.authorize_path,
        "token_endpoint": origin + ctx.token_path,
        "revocation_endpoint": origin + ctx.revoke_path,
        "revocation_endpoint_auth_methods_supported": ["none"],
        "registration_endpoint": origin + ctx.mcp.registration_path,
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        "client_id_metadata_document_supported": True,
    }
    if ctx.mcp.scopes_supported:
        document["scopes_supported"] = list(ctx.mcp.scopes_supported)
    algorithms = offered_algorithms(ctx.proofs.settings)
    if algorithms:
        document["dpop_signing_alg_values_supported"] = list(algorithms)
    if ctx.workload is not None:
        document["grant_types_supported"].append(JWT_BEARER)
        document["jwks_uri"] = origin + ctx.jwks_path
    await send_json(send, 200, document)


async def jwks(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """The public key of the access tokens the gateway issues to workloads (RFC 7517)."""
    if scope["method"] not in ("GET", "HEAD"):
        raise method_not_allowed("GET")
    assert ctx.workload is not None  # served only with workloadIdentity
    await send_json(send, 200, await ctx.workload.keys.jwks())
