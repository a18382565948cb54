"""The Broker's dynamic client registration (RFC 7591): public clients only, each given a
client id that carries its redirect URIs and the route it is valid at."""

from __future__ import annotations

import time

from .. import audit
from ..asgi import Receive, Scope, Send, send_json
from ..providers import RegistrationError
from ..registration import MAX_REGISTRATION_BODY, REGISTRATION_LIMIT, parse_registration
from .clients import issue_client_id
from .context import BrokerContext
from .errors import OAuthError, method_not_allowed
from .requests import read_limited


async def register(ctx: BrokerContext, scope: Scope, receive: Receive, send: Send) -> None:
    """DCR: a gateway client id bound to the submitted redirect URIs."""
    if scope["method"] != "POST":
        raise method_not_allowed("POST")
    raw = await read_limited(receive, MAX_REGISTRATION_BODY, REGISTRATION_LIMIT)
    try:
        metadata = parse_registration(raw or b"")
    except RegistrationError as exc:
        raise OAuthError(exc.status, exc.error, exc.description) from exc
    if metadata.get("token_endpoint_auth_method", "none") != "none":
        raise OAuthError(
            400,
            "invalid_client_metadata",
            "only public clients (token_endpoint_auth_method none) can "
            "register; they prove themselves with PKCE",
        )
    redirect_uris = metadata["redirect_uris"]
    uris = [str(u) for u in redirect_uris] if isinstance(redirect_uris, list) else []
    given = metadata.get("client_name")
    name = given if isinstance(given, str) else "MCP client"
    client_id = issue_client_id(await ctx.store.secret(), name, uris, ctx.route)
    audit.event(
        scope,
        "client-registered",
        client_id,
        f"registered client {name[:100]!r} with redirect URIs {', '.join(uris)[:500]}",
    )
    await send_json(
        send,
        201,
        {
            "client_id": client_id,
            "client_id_issued_at": int(time.time()),
            "client_name": name,
            "redirect_uris": uris,
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            **(
                {"application_type": metadata["application_type"]}
                if "application_type" in metadata
                else {}
            ),
        },
    )
