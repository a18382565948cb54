"""What the gateway takes from an upstream's metadata documents, and the rules every URL in them
must pass: the protected resource metadata of an MCP server (RFC 9728) and the metadata of its
authorization server (RFC 8414, OpenID Connect Discovery), or the endpoints an operator names.

Pure functions: each refuses a document with `MetadataProblem`, whose message says what is wrong
in it; `discovery` adds which step, which URL and the fix."""

from __future__ import annotations

from dataclasses import dataclass, field

import ada_url

from ..urls import LOOPBACK_HOSTS, MAX_URI_LENGTH, navigable, shown_url

# RFC 8414 §2: when the list is absent, client_secret_basic is the default.
DEFAULT_AUTH_METHODS = ("client_secret_basic",)
# Parameters `oauth_client.authorization_url` sets: an authorization endpoint whose own query
# holds one of them would send the server two values, of which it may read the endpoint's.
RESERVED_PARAMETERS = frozenset(
    {
        "response_type",
        "client_id",
        "redirect_uri",
        "state",
        "code_challenge",
        "code_challenge_method",
        "scope",
        "resource",
    }
)


class MetadataProblem(ValueError):
    """A document or a URL the gateway will not use; the message says what and why."""


@dataclass(frozen=True, slots=True)
class Endpoints:
    """An upstream named by the operator instead of discovered (GitHub has no discovery):
    authorization and token endpoints together, revocation (RFC 7009) when it has one."""

    authorization_endpoint: str
    token_endpoint: str
    revocation_endpoint: str | None = None
    # How the client secret is sent without metadata to say: in the form, as GitHub reads it.
    auth_method: str = "client_secret_post"


@dataclass(frozen=True, slots=True)
class AuthServer:
    """The upstream authorization server, as the gateway's client of it needs it."""

    issuer: str | None  # None: explicit endpoints without an issuer (no RFC 9207 check)
    authorization_endpoint: str
    token_endpoint: str
    revocation_endpoint: str | None
    iss_parameter_supported: bool  # RFC 9207: then a response without `iss` is refused
    code_challenge_methods: tuple[str, ...]
    scopes_supported: tuple[str, ...]
    resource: str | None  # the backend's RFC 9728 `resource`, when its metadata was read
    # `token_endpoint_auth_methods_supported` (RFC 8414 default when absent).
    token_endpoint_auth_methods: tuple[str, ...] = DEFAULT_AUTH_METHODS
    # What the backend asks for (its 401's Bearer `scope`, else its metadata's
    # `scopes_supported`: the MCP client order), for when the operator names no scopes.
    resource_scopes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ResourceMetadata:
    """What the gateway reads of a protected resource metadata document."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...]


def is_loopback(href: str) -> bool:
    """Whether an http(s) URL's host is one the gateway treats as loopback everywhere else
    (the redirect URI rules of RFC 8252: 127.0.0.1, [::1], localhost)."""
    try:
        return ada_url.URL(href).hostname in LOOPBACK_HOSTS
    except ValueError:
        return False


def endpoint_url(value: object, what: str, allow_http: bool = False) -> str:
    """An endpoint URL as browsers and the gateway will use it (the WHATWG serialization):
    absolute http(s), no user information, no fragment, https unless the host is loopback (or
    `allow_http`); MetadataProblem naming `what` otherwise."""
    if not isinstance(value, str) or not value:
        raise MetadataProblem(f"{what} is {_shown_value(value)}, not a URL")
    shown = _shown_value(value)
    if len(value) > MAX_URI_LENGTH:
        raise MetadataProblem(f"{what} {shown}… is longer than {MAX_URI_LENGTH} characters")
    href = navigable(value)
    if href is None:
        raise MetadataProblem(
            f"{what} {shown} is not an absolute http(s) URL without user information or fragment"
        )
    if href.startswith("http:") and not (allow_http or is_loopback(href)):
        raise MetadataProblem(
            f"{what} {shown} uses http on a host that is not loopback: "
            "tokens and secrets would cross the network in clear; it must be https"
        )
    return href


def issuer_url(value: object, what: str, allow_http: bool = False) -> str:
    """An issuer identifier (RFC 8414 §2: https, no query, no fragment) as written."""
    endpoint_url(value, what, allow_http)
    assert isinstance(value, str)
    if ada_url.URL(value).search:
        raise MetadataProblem(
            f"{what} {_shown_value(value)} has a query, which an issuer may not have"
        )
    return value


def same_issuer(expected: str, found: object) -> bool:
    """Whether a metadata document's `issuer` is the one its URL was built from: identical, or a
    root issuer written without the trailing slash that URL libraries add to it (pydantic writes
    `https://as.example` as `https://as.example/`, so servers built on it list it so)."""
    if not isinstance(found, str):
        return False
    if found == expected:
        return True
    return expected == found + "/" and ada_url.URL(expected).pathname == "/"


def resource_matches(resource: str, backend_url: str) -> bool:
    """Whether RFC 9728 `resource` names the backend: the same origin and a path the backend's
    is at or under (segment by segment), the rule both MCP SDK clients apply; a resource with a
    query must be the backend URL itself."""
    try:
        have, want = ada_url.URL(resource), ada_url.URL(backend_url)
    except ValueError:
        return False
    if have.origin != want.origin or have.origin in ("", "null") or have.hash:
        return False
    if have.search:
        return have.href == want.href
    prefix = have.pathname.rstrip("/") + "/"
    return (want.pathname.rstrip("/") + "/").startswith(prefix)


def read_resource_metadata(document: dict[str, object], backend_url: str) -> ResourceMetadata:
    """The resource, authorization servers and scopes of an RFC 9728 document about
    `backend_url`; MetadataProblem when it is not one."""
    resource = document.get("resource")
    if not isinstance(resource, str) or not resource:
        raise MetadataProblem(f"it has no `resource` (it has {_shown_value(resource)})")
    if not resource_matches(resource, backend_url):
        raise MetadataProblem(
            f"its `resource` {_shown_value(resource)} is not the backend "
            f"{_shown_value(backend_url)} (nor a URL the backend's is under, on the same origin)"
        )
    servers = document.get("authorization_servers")
    if (
        not isinstance(servers, list)
        or not servers
        or not all(isinstance(s, str) and s for s in servers)
    ):
        raise MetadataProblem(
            "its `authorization_servers` is not a non-empty list of issuer URLs "
            f"(it is {_shown_value(servers)})"
        )
    return ResourceMetadata(resource, tuple(servers), _strings(document, "scopes_supported", "its"))


def read_server_metadata(
    document: dict[str, object], issuer: str, allow_http: bool = False
) -> AuthServer:
    """The authorization server an RFC 8414 / OpenID Connect document built from `issuer`
    describes; MetadataProblem when it is not usable."""
    found = document.get("issuer")
    if not same_issuer(issuer, found):
        shown, wanted = _shown_value(found), _shown_value(issuer)
        if shown == wanted:  # they differ where `shown_url` normalizes (the scheme's case)
            shown = repr(found)
        raise MetadataProblem(
            f"its `issuer` is {shown}, not {wanted}, the issuer its URL was built from "
            "(RFC 8414 §3.3: a client must not use it)"
        )
    assert isinstance(found, str)
    methods = _strings(document, "code_challenge_methods_supported", "its")
    if "code_challenge_methods_supported" in document and "S256" not in methods:
        raise MetadataProblem(
            f"its `code_challenge_methods_supported` is {list(methods)!r}: no S256, "
            "and the gateway uses PKCE with S256 only"
        )
    revocation = document.get("revocation_endpoint")
    auth_methods = _strings(document, "token_endpoint_auth_methods_supported", "its")
    return AuthServer(
        issuer=found,
        authorization_endpoint=authorization_endpoint(
            document.get("authorization_endpoint"), "its `authorization_endpoint`", allow_http
        ),
        token_endpoint=endpoint_url(
            document.get("token_endpoint"), "its `token_endpoint`", allow_http
        ),
        revocation_endpoint=None
        if revocation is None
        else endpoint_url(revocation, "its `revocation_endpoint`", allow_http),
        iss_parameter_supported=document.get("authorization_response_iss_parameter_supported")
        is True,
        # Absent: OAuth 2.1 makes S256 mandatory for every authorization server, and many
        # OAuth (not OpenID) servers do not publish the list; a server that lists methods
        # without S256 is refused above.
        code_challenge_methods=methods or ("S256",),
        scopes_supported=_strings(document, "scopes_supported", "its"),
        resource=None,
        token_endpoint_auth_methods=auth_methods or DEFAULT_AUTH_METHODS,
    )


def from_endpoints(explicit: Endpoints, issuer: str | None, allow_http: bool = False) -> AuthServer:
    """The authorization server the operator's endpoints describe (S256 assumed, as OAuth 2.1
    requires of every server); MetadataProblem naming the bad one."""
    if explicit.auth_method not in ("client_secret_post", "client_secret_basic"):
        raise MetadataProblem(
            f"the client authentication method {explicit.auth_method[:60]!r} is not "
            "client_secret_post or client_secret_basic"
        )
    revocation = explicit.revocation_endpoint
    return AuthServer(
        issuer=None if issuer is None else issuer_url(issuer, "the issuer", allow_http),
        authorization_endpoint=authorization_endpoint(
            explicit.authorization_endpoint, "the authorization endpoint", allow_http
        ),
        token_endpoint=endpoint_url(explicit.token_endpoint, "the token endpoint", allow_http),
        revocation_endpoint=None
        if revocation is None
        else endpoint_url(revocation, "the revocation endpoint", allow_http),
        iss_parameter_supported=False,
        code_challenge_methods=("S256",),
        scopes_supported=(),
        resource=None,
        token_endpoint_auth_methods=(explicit.auth_method,),
    )


def authorization_endpoint(value: object, what: str, allow_http: bool = False) -> str:
    """`endpoint_url`, and a query (kept, RFC 6749 §3.1) without the parameters the gateway
    sets itself."""
    href = endpoint_url(value, what, allow_http)
    taken = sorted(
        RESERVED_PARAMETERS & set(ada_url.URLSearchParams(ada_url.URL(href).search).keys())
    )
    if taken:
        raise MetadataProblem(
            f"{what} {_shown_value(href)} has {', '.join(taken)} in its query, which the gateway "
            "sets itself: the server could read the endpoint's value instead of the gateway's"
        )
    return href


def _strings(document: dict[str, object], name: str, whose: str) -> tuple[str, ...]:
    """An optional list of strings (absent or null: empty)."""
    value = document.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MetadataProblem(f"{whose} `{name}` is {_shown_value(value)}, not a list of strings")
    return tuple(value)


def _shown_value(value: object) -> str:
    """A JSON value as a message shows it: short, and a URL as `shown_url` writes it."""
    if value is None:
        return "missing"
    if isinstance(value, str):
        # URLs as messages may show them: no user information, no query values.
        return repr(shown_url(value[:200]))
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"
