"""RFC 7591 registration requests: what the gateway accepts as client metadata."""

from __future__ import annotations

import orjson

from .oauth_scopes import scope_problem
from .providers.base import RegistrationError
from .urls import InvalidUri, parse_redirect_uri

# A registration body's size limit, the same at the Broker and at a provider's facade (fixed:
# client metadata is a few hundred bytes), and what a 413 says sets it.
MAX_REGISTRATION_BODY = 64 * 1024
REGISTRATION_LIMIT = "of a client registration (fixed)"


def validate_redirect_uri(uri: object) -> str | None:
    """Why `uri` is not an acceptable redirect URI, or None when it is (see `urls`)."""
    try:
        parse_redirect_uri(uri)
    except InvalidUri as exc:
        return str(exc)
    return None


APPLICATION_TYPES = ("native", "web")


def application_type_problem(kind: object, uris: list[object]) -> str | None:
    """Why redirect URIs do not suit the declared application type (OIDC Registration §2,
    RFC 8252 §7), or None. Without one (clients before MCP 2026-07-28), any valid URI will do."""
    if kind is None:
        return None
    if kind not in APPLICATION_TYPES:
        return f"application_type {str(kind)[:40]!r} is not one of native, web"
    for uri in uris:
        parsed = parse_redirect_uri(uri)  # each one was validated before
        if kind == "native" and parsed.scheme in ("http", "https") and not parsed.loopback:
            return (
                f"redirect URI {parsed.href!r} does not suit a native client, which redirects "
                "to a loopback http URL (http://127.0.0.1:PORT/…) or a private-use scheme "
                "(com.example.app:/…); register an https redirect as application_type web"
            )
        if kind == "web" and parsed.scheme != "https":
            return (
                f"redirect URI {parsed.href!r} does not suit a web client, which redirects to "
                "https URLs; a client with a loopback or private-use redirect registers as "
                "application_type native"
            )
    return None


def parse_registration(raw: bytes) -> dict[str, object]:
    """Validate an RFC 7591 registration body; raise RegistrationError (400) when it is not."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RegistrationError(
            400, "invalid_client_metadata", "the registration body is not valid JSON"
        ) from exc
    if not isinstance(body, dict):
        raise RegistrationError(
            400, "invalid_client_metadata", "the registration body must be a JSON object"
        )
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        raise RegistrationError(
            400, "invalid_redirect_uri", "redirect_uris must be a non-empty array of absolute URLs"
        )
    for uri in uris:
        problem = validate_redirect_uri(uri)
        if problem:
            raise RegistrationError(400, "invalid_redirect_uri", problem)
    for name in ("client_name", "scope", "token_endpoint_auth_method"):
        if name in body and not isinstance(body[name], str):
            raise RegistrationError(400, "invalid_client_metadata", f"{name} must be a string")
    # RFC 7591 §3.2.2 has no invalid_scope: a field's bad value is invalid_client_metadata.
    problem = scope_problem(body.get("scope") or "")
    if problem:
        raise RegistrationError(400, "invalid_client_metadata", problem)
    problem = application_type_problem(body.get("application_type"), uris)
    if problem:
        raise RegistrationError(400, "invalid_redirect_uri", problem)
    return body
