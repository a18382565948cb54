"""RFC 7591 registration requests: what the gateway accepts as client metadata."""

from __future__ import annotations

import orjson

from .providers.base import RegistrationError
from .urls import InvalidUri, parse_redirect_uri


def validate_redirect_uri(uri: object) -> str | None:
    """Why `uri` is not an acceptable redirect URI, or None when it is (see `urls`)."""
    try:
        parse_redirect_uri(uri)
    except InvalidUri as exc:
        return str(exc)
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
    return body
