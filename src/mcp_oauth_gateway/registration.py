"""RFC 7591 registration requests: what the gateway accepts as client metadata."""

from __future__ import annotations

from urllib.parse import urlsplit

import orjson

from .providers.base import RegistrationError

_FORBIDDEN_SCHEMES = frozenset({"javascript", "data", "file", "vbscript", "about", "blob"})


def validate_redirect_uri(uri: object) -> str | None:
    """Why `uri` is not an acceptable absolute redirect URI, or None when it is."""
    if not isinstance(uri, str) or not uri:
        return "redirect_uris entries must be non-empty strings"
    parts = urlsplit(uri)
    if not parts.scheme:
        return f"redirect URI {uri!r} is not an absolute URL"
    if parts.scheme.lower() in _FORBIDDEN_SCHEMES:
        return f"redirect URI {uri!r} uses the forbidden scheme {parts.scheme}:"
    if parts.scheme.lower() in ("http", "https") and not parts.hostname:
        return f"redirect URI {uri!r} has no host"
    if parts.fragment:
        return f"redirect URI {uri!r} must not contain a fragment"
    return None


def parse_registration(raw: bytes) -> dict[str, object]:
    """Validate an RFC 7591 registration body; raise RegistrationError (400) when it is not."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RegistrationError(400, "invalid_client_metadata",
                                "the registration body is not valid JSON") from exc
    if not isinstance(body, dict):
        raise RegistrationError(400, "invalid_client_metadata",
                                "the registration body must be a JSON object")
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        raise RegistrationError(400, "invalid_redirect_uri",
                                "redirect_uris must be a non-empty array of absolute URLs")
    for uri in uris:
        problem = validate_redirect_uri(uri)
        if problem:
            raise RegistrationError(400, "invalid_redirect_uri", problem)
    for name in ("client_name", "scope", "token_endpoint_auth_method"):
        if name in body and not isinstance(body[name], str):
            raise RegistrationError(400, "invalid_client_metadata", f"{name} must be a string")
    return body
