"""A Broker in process, and a client walking its OAuth flow one step at a time.

`Rig` is the Broker of one route (`/mcp` on http://gw.test, resource http://gw.test/mcp, policy
`default/unit`) with a memory store, driven through the stage harness: every request goes to the
handler its `routes()`/`pages()` table names for the path, as the serving pipeline would send it.
`Rig.beside` is another policy's Broker route on the same host and store (another tenant's). Its
identity providers are `Provider`, an aiohttp app on loopback in this process (token and
revocation endpoints that record each form and answer what a test queued), reached through a
real aiohttp session, and `Discovery`, their metadata. The helpers after it take one step of the
flow each and return what the Broker answered, so a test can stop at any step and change what is
sent."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import aiohttp
import orjson
from aiohttp import web

from mcp_oauth_gateway import pkce
from mcp_oauth_gateway.asgi import AUDIT_KEY
from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.broker import consent
from mcp_oauth_gateway.broker.clients import MetadataDocuments
from mcp_oauth_gateway.broker.context import BrokerContext
from mcp_oauth_gateway.broker.endpoints import Broker
from mcp_oauth_gateway.broker.identity import SignInProvider
from mcp_oauth_gateway.broker.store import MemoryStore
from mcp_oauth_gateway.controlplane.fetch import FetchError
from mcp_oauth_gateway.controlplane.snapshot import CompiledDpop
from unit.stages.harness import Response, drive
from unit.tokens_support import compiled_mcp

ORIGIN = "http://gw.test"
ISSUER = ORIGIN + "/mcp"  # the gateway's, as the Broker's clients see it
RESOURCE = ORIGIN + "/mcp"
ASM = "/.well-known/oauth-authorization-server/mcp"
REGISTRATION = ASM + "/client-registration"
AUTHORIZE = "/mcp/oauth/authorize"
CALLBACK = "/mcp/oauth/callback"
TOKEN = "/mcp/oauth/token"
REVOKE = "/mcp/oauth/revoke"
REDIRECT = "http://127.0.0.1:47001/cb"
# A redirect URI only the client receives (consent for it may be remembered).
WEB_REDIRECT = "https://client.example/cb"
POLICY = "default/unit"
VERIFIER = "v" * 64
IDP_ISSUER = "http://idp.test/realms/r"
FORM = (b"content-type", b"application/x-www-form-urlencoded")
SAME_ORIGIN = (b"origin", ORIGIN.encode())


class Discovery:
    """A provider's discovery cache: a fixed document, or FetchError while `document` is None."""

    def __init__(self, document: dict[str, Any] | None):
        self.document = document

    async def get(self) -> dict[str, Any]:
        if self.document is None:
            raise FetchError("GET http://idp.test/.well-known/openid-configuration: refused")
        return self.document


@dataclass
class Provider:
    """The providers' token and revocation endpoints: each form received is recorded in
    `tokens`/`revocations`; each answer is the next queued (status, JSON or raw bytes) or a
    success."""

    base: str = ""
    tokens: list[dict[str, str]] = field(default_factory=list)
    revocations: list[dict[str, str]] = field(default_factory=list)
    token_answers: list[tuple[int, Any]] = field(default_factory=list)
    revocation_answers: list[tuple[int, Any]] = field(default_factory=list)

    async def token(self, request: web.Request) -> web.Response:
        self.tokens.append(dict(parse_qsl(await request.text())))
        n = len(self.tokens)
        default = {
            "access_token": f"provider-at-{n}",
            "token_type": "Bearer",
            "expires_in": 300,
            "refresh_token": f"provider-rt-{n}",
        }
        status, body = self.token_answers.pop(0) if self.token_answers else (200, default)
        return answered(status, body)

    @property
    def document_client(self) -> str:
        """The client id of the Client ID Metadata Document served beside the endpoints."""
        return self.base + "/client.json"

    async def document(self, request: web.Request) -> web.Response:
        """A client's metadata document (valid at every route, unlike a registered client)."""
        return web.json_response(
            {
                "client_id": self.document_client,
                "client_name": "Document client",
                "redirect_uris": [REDIRECT, WEB_REDIRECT],
            }
        )

    async def revoke(self, request: web.Request) -> web.Response:
        self.revocations.append(dict(parse_qsl(await request.text())))
        status, body = self.revocation_answers.pop(0) if self.revocation_answers else (200, {})
        return answered(status, body)

    @property
    def last_token_form(self) -> dict[str, str]:
        assert self.tokens, "the provider's token endpoint was never called"
        return self.tokens[-1]


def answered(status: int, body: Any) -> web.Response:
    """A provider's answer: `body` as JSON, or as sent when it is bytes."""
    if isinstance(body, bytes):
        return web.Response(body=body, status=status, content_type="text/plain")
    return web.json_response(body, status=status)


def provider_issuer(index: int) -> str:
    """Provider `index`'s issuer."""
    return IDP_ISSUER if index == 0 else f"http://idp{index}.test"


def provider_document(index: int, base: str) -> dict[str, Any]:
    """Provider `index`'s metadata: its own sign-in page, the shared loopback endpoints."""
    return {
        "issuer": provider_issuer(index),
        "authorization_endpoint": f"http://idp{index}.test/authorize",
        "token_endpoint": base + "/token",
        "revocation_endpoint": base + "/revoke",
    }


@dataclass
class Rig:
    """A Broker, its store and its providers' stand-ins."""

    broker: Broker
    store: MemoryStore
    provider: Provider
    discoveries: list[Discovery]

    async def call(self, method: str, path: str, **request: Any) -> Response:
        """One request to the handler the Broker's tables give `path`."""
        table = {**self.broker.routes(), **self.broker.pages()}
        return await drive(table[path], method, path, **request)

    @property
    def paths(self) -> Any:
        """The Broker's context, for its paths (`authorize_path`, `token_path`…)."""
        return self.broker.context

    @property
    def resource(self) -> str:
        """The route's resource."""
        return self.broker.context.mcp.resource or ORIGIN + self.broker.context.mcp.mcp_path

    def context(self) -> BrokerContext:
        """The Broker's context bound to a request of this rig's route, as handlers get it."""
        return self.broker.context.at({"headers": [(b"host", b"gw.test")], "scheme": "http"})

    def beside(self, policy: str, mcp_path: str = "/mcp", resource: str | None = None) -> Rig:
        """Another Broker route on the same host, store and providers: policy `policy` serving
        `mcp_path` (its resource `resource`, or the route's own URL when None)."""
        context = self.broker.context
        mcp = dataclasses.replace(context.mcp, mcp_path=mcp_path, resource=resource)
        broker = Broker(
            mcp, context.providers, context.store, context.documents, context.session, policy
        )
        return dataclasses.replace(self, broker=broker)

    async def post_form(self, path: str, form: dict[str, str], **request: Any) -> Response:
        """A form POST (what clients send to the token and revocation endpoints)."""
        headers = [FORM, *request.pop("headers", ())]
        body = urlencode(form).encode()
        return await self.call("POST", path, body=body, headers=headers, **request)


@asynccontextmanager
async def started_rig(
    names: Sequence[str] = ("Provider",),
    forwards_resource: bool = True,
    domains: Sequence[tuple[str, ...]] = (),
    local_documents: bool = False,
    dpop: Sequence[CompiledDpop] = (),
) -> AsyncIterator[Rig]:
    """A Broker signing users in at one provider per name (`domains` their login_hint
    domains, `dpop` their DPoP settings: `Allowed` where none is given), with the stand-in
    provider listening on loopback until the block ends. `local_documents`: client metadata
    documents may be fetched from loopback (the stand-in serves one,
    `Provider.document_client`)."""
    provider = Provider()
    app = web.Application()
    app.router.add_get("/client.json", provider.document)
    app.router.add_post("/token", provider.token)
    app.router.add_post("/revoke", provider.revoke)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    provider.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    discoveries = [Discovery(provider_document(i, provider.base)) for i in range(len(names))]
    signins = tuple(
        SignInProvider(
            index=i,
            name=name,
            client_id=f"gateway-at-{i}",
            discovery=discoveries[i],  # type: ignore[arg-type]
            forwards_resource=forwards_resource,
            login_hint_domains=domains[i] if i < len(domains) else (),
            issuer=provider_issuer(i),
            dpop=dpop[i] if i < len(dpop) else CompiledDpop(),
        )
        for i, name in enumerate(names)
    )
    store = MemoryStore()
    documents = MetadataDocuments(allow_private=local_documents)
    mcp = dataclasses.replace(
        compiled_mcp("Keycloak"),
        mode=AuthorizationServerMode.BROKER,
        scopes_supported=("openid", "profile"),
    )
    session = aiohttp.ClientSession()
    try:
        broker = Broker(mcp, signins, store, documents, lambda: session, POLICY)
        yield Rig(broker, store, provider, discoveries)
    finally:
        await session.close()
        await documents.close()
        await runner.cleanup()


# --- reading answers -------------------------------------------------------------------------


def error_of(response: Response) -> tuple[int, str, str]:
    """(status, error, error_description) of a JSON error answer."""
    assert response.header(b"content-type") == b"application/json", response.headers
    body = response.json()
    assert set(body) == {"error", "error_description"}, body
    return response.status, body["error"], body["error_description"]


def redirected(response: Response) -> tuple[str, dict[str, str]]:
    """(where, query parameters) of a 302."""
    assert response.status == 302, (response.status, response.body)
    assert response.header(b"cache-control") == b"no-store"
    location = (response.header(b"location") or b"").decode()
    parts = urlsplit(location)
    return parts._replace(query="").geturl(), dict(parse_qsl(parts.query))


def consent_cookie(rig: Rig) -> str:
    """The name of the rig's route's consent cookie."""
    return consent.cookie_names(ORIGIN, rig.context().route)[0]


def cookie_value(response: Response, name: str) -> str:
    """The value the response sets for cookie `name`."""
    for value in (v.decode() for k, v in response.headers if k == b"set-cookie"):
        if value.startswith(name + "="):
            return value.partition("=")[2].partition(";")[0]
    raise AssertionError(f"no {name} cookie set: {response.headers}")


# --- one step of the flow each ---------------------------------------------------------------


async def register(
    rig: Rig, redirect: str | list[str] = REDIRECT, name: str = "Unit client"
) -> str:
    """A client registered through the Broker's DCR endpoint (with one redirect URI or a
    list): its client id."""
    uris = [redirect] if isinstance(redirect, str) else redirect
    body = orjson.dumps({"client_name": name, "redirect_uris": uris})
    response = await rig.call("POST", rig.paths.mcp.registration_path, body=body)
    assert response.status == 201, response.body
    return str(response.json()["client_id"])


def authorize_query(client_id: str, **changes: str | None) -> bytes:
    """A valid authorization request's query; a change to None leaves the parameter out."""
    params: dict[str, str | None] = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "state": "client-state",
        "code_challenge": pkce.s256(VERIFIER),
        "code_challenge_method": "S256",
        "scope": "openid profile",
        "resource": RESOURCE,
        **changes,
    }
    return urlencode({k: v for k, v in params.items() if v is not None}).encode()


async def authorize(rig: Rig, client_id: str, cookie: str = "", **changes: str | None) -> Response:
    """The browser opening the client's authorization URL (with `cookie`, if any)."""
    headers = [(b"cookie", cookie.encode())] if cookie else []
    changes.setdefault("resource", rig.resource)
    query = authorize_query(client_id, **changes)
    return await rig.call("GET", rig.paths.authorize_path, query=query, headers=headers)


def request_id(consent_page: Response) -> str:
    """The pending request a consent page's form answers."""
    found = re.search(rb'name="request" value="([^"]+)"', consent_page.body)
    assert found, consent_page.body
    return found.group(1).decode()


async def consent_page(rig: Rig, client_id: str, **changes: str | None) -> tuple[str, str]:
    """(request id, browser cookie) of the consent page for a valid request."""
    page = await authorize(rig, client_id, **changes)
    assert page.status == 200, page.body
    return request_id(page), cookie_value(page, "mcp-authz")


async def answer(
    rig: Rig,
    request: str,
    browser: str,
    decision: str = "allow",
    headers: Sequence[tuple[bytes, bytes]] = (SAME_ORIGIN,),
) -> Response:
    """The consent form posted from the gateway's page in the browser holding `browser`."""
    cookie = (b"cookie", f"mcp-authz={browser}".encode())
    return await rig.post_form(
        rig.paths.authorize_path,
        {"request": request, "decision": decision},
        headers=[*headers, cookie],
    )


async def at_provider(rig: Rig, client_id: str, **changes: str | None) -> dict[str, str]:
    """The query the browser takes to the provider once the user allowed the client."""
    request, browser = await consent_page(rig, client_id, **changes)
    _, params = redirected(await answer(rig, request, browser))
    return params


async def come_back(rig: Rig, **params: str) -> Response:
    """The provider sending the browser back to the gateway with `params`."""
    return await rig.call("GET", rig.paths.callback_path, query=urlencode(params).encode())


async def client_code(rig: Rig, client_id: str, **changes: str | None) -> str:
    """The gateway's one-time code for a complete, allowed sign-in (`changes` to its
    authorization request)."""
    upstream = await at_provider(rig, client_id, **changes)
    response = await come_back(rig, state=upstream["state"], code="upstream-code", iss=IDP_ISSUER)
    _, params = redirected(response)
    return params["code"]


async def redeem(
    rig: Rig,
    client_id: str,
    code: str,
    /,
    proofs: Sequence[bytes] = (),
    audited: object = None,
    **changes: str,
) -> Response:
    """The client redeeming `code` at the token endpoint (with a `DPoP` header per proof);
    `audited`: the request's audit record, when the test reads what its line would say."""
    form = {
        "grant_type": "authorization_code",
        "client_id": client_id,
        "code": code,
        "redirect_uri": REDIRECT,
        "code_verifier": VERIFIER,
        "resource": rig.resource,
        **changes,
    }
    headers = [(b"dpop", proof) for proof in proofs]
    request: dict[str, Any] = {} if audited is None else {"scope": {AUDIT_KEY: audited}}
    return await rig.post_form(rig.paths.token_path, form, headers=headers, **request)


async def signed_in(rig: Rig) -> tuple[str, dict[str, Any]]:
    """(client id, token response) of a client that went through the whole flow."""
    client_id = await register(rig)
    response = await redeem(rig, client_id, await client_code(rig, client_id))
    assert response.status == 200, response.body
    return client_id, response.json()


async def refresh(
    rig: Rig,
    client_id: str,
    token: str,
    /,
    audited: object = None,
    proofs: Sequence[bytes] = (),
    **changes: str,
) -> Response:
    """The client exchanging its gateway refresh token (with a `DPoP` header per proof);
    `audited`: the request's audit record, when the test reads what its line would say."""
    form = {"grant_type": "refresh_token", "client_id": client_id, "refresh_token": token}
    request: dict[str, Any] = {} if audited is None else {"scope": {AUDIT_KEY: audited}}
    headers = [(b"dpop", proof) for proof in proofs]
    return await rig.post_form(
        rig.paths.token_path, {**form, **changes}, headers=headers, **request
    )


async def revoke(rig: Rig, client_id: str, token: str, **changes: str) -> Response:
    """The client revoking `token` (RFC 7009)."""
    form = {"client_id": client_id, "token": token, **changes}
    return await rig.post_form(rig.paths.revoke_path, form)
