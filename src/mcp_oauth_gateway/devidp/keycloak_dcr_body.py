"""Reading a registration request's body as Keycloak 26.7 reads it (probed on the real server).
Jackson maps the body onto `OIDCClientRepresentation`: a body that is not JSON gets 400
`invalid_request` "Cannot parse the JSON", JSON of the wrong shape 400 `unknown_error`, and a
field the representation lacks 400 `{"error": "Invalid json representation for
OIDCClientRepresentation. Unrecognized field "<name>" at line L column C."}`. Then Keycloak
refuses a redirect URI that is no URI or has a fragment, and an unknown
`token_endpoint_auth_method`."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.responses import Response

from .oidc_http import json_response

# OIDCClientRepresentation's fields (every one accepted by Keycloak 26.7.3).
FIELDS = frozenset(
    (
        "redirect_uris",
        "token_endpoint_auth_method",
        "token_endpoint_auth_signing_alg",
        "grant_types",
        "response_types",
        "application_type",
        "client_id",
        "client_secret",
        "client_name",
        "client_uri",
        "logo_uri",
        "scope",
        "contacts",
        "tos_uri",
        "policy_uri",
        "jwks_uri",
        "jwks",
        "sector_identifier_uri",
        "subject_type",
        "id_token_signed_response_alg",
        "id_token_encrypted_response_alg",
        "id_token_encrypted_response_enc",
        "userinfo_signed_response_alg",
        "userinfo_encrypted_response_alg",
        "userinfo_encrypted_response_enc",
        "request_object_signing_alg",
        "request_object_encryption_alg",
        "request_object_encryption_enc",
        "default_max_age",
        "require_auth_time",
        "default_acr_values",
        "initiate_login_uri",
        "request_uris",
        "tls_client_certificate_bound_access_tokens",
        "tls_client_auth_subject_dn",
        "post_logout_redirect_uris",
        "software_id",
        "software_version",
        "client_id_issued_at",
        "client_secret_expires_at",
        "registration_client_uri",
        "registration_access_token",
        "backchannel_logout_uri",
        "backchannel_logout_session_required",
        "backchannel_logout_revoke_offline_tokens",
        "backchannel_token_delivery_mode",
        "backchannel_client_notification_endpoint",
        "backchannel_authentication_request_signing_alg",
        "authorization_signed_response_alg",
        "authorization_encrypted_response_alg",
        "authorization_encrypted_response_enc",
        "require_pushed_authorization_requests",
        "frontchannel_logout_uri",
        "frontchannel_logout_session_required",
        "dpop_bound_access_tokens",
    )
)
AUTH_METHODS = frozenset(
    {
        "client_secret_basic",
        "client_secret_post",
        "client_secret_jwt",
        "private_key_jwt",
        "none",
        "tls_client_auth",
        "self_signed_tls_client_auth",
    }
)
GRANTS = frozenset(
    {
        "authorization_code",
        "implicit",
        "refresh_token",
        "password",
        "client_credentials",
        "urn:ietf:params:oauth:grant-type:token-exchange",
        "urn:ietf:params:oauth:grant-type:device_code",
        "urn:openid:params:grant-type:ciba",
    }
)
_LISTS = ("redirect_uris", "grant_types", "response_types", "contacts", "request_uris")


def _cannot_parse(error: str) -> Response:
    return json_response({"error": error, "error_description": "Cannot parse the JSON"}, 400)


def _position(text: str, name: str) -> tuple[int, int]:
    """Jackson's line and column for an unrecognized field: just after the first token of its
    value."""
    match = re.search(re.escape(json.dumps(name)) + r"\s*:\s*", text)
    if match is None:
        return 1, 1
    end = match.end()
    if text[end] in "[{":
        end += 1
    else:
        end = json.JSONDecoder().raw_decode(text, end)[1]
    line = text.count("\n", 0, end) + 1
    return line, end - (text.rfind("\n", 0, end) + 1) + 1


def _unrecognized(text: str, name: str) -> Response:
    line, column = _position(text, name)
    return json_response(
        {
            "error": "Invalid json representation for OIDCClientRepresentation. Unrecognized "
            f'field "{name}" at line {line} column {column}.'
        },
        400,
    )


def _bad_redirect(uri: str) -> str | None:
    # java.net.URI's syntax: relative references and any scheme pass.
    if re.search(r'[\s<>"{}|\\^`]|%(?![0-9A-Fa-f]{2})', uri):
        return "A redirect URI is not a valid URI"
    if "#" in uri:
        return "A redirect URI must not contain an URL fragment"
    return None


def read_registration(raw: bytes) -> dict[str, Any] | Response:
    """The registration body, or Keycloak's 400 for it."""
    text = raw.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return _cannot_parse("invalid_request")
    if not isinstance(body, dict):
        return _cannot_parse("unknown_error")
    for name in body:
        if name not in FIELDS:
            return _unrecognized(text, name)
    for name in _LISTS:
        value = body.get(name)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            return _cannot_parse("unknown_error")
    for uri in body.get("redirect_uris") or []:
        if (problem := _bad_redirect(uri)) is not None:
            return json_response(
                {"error": "invalid_redirect_uri", "error_description": problem}, 400
            )
    if (body.get("token_endpoint_auth_method") or "client_secret_basic") not in AUTH_METHODS:
        return json_response(
            {"error": "invalid_client_metadata", "error_description": "Client metadata invalid"},
            400,
        )
    return body


def grant_types(body: dict[str, Any]) -> list[str]:
    """The grants a registration gets: the known ones it asks for (unknown ones are dropped),
    `authorization_code` for an empty list, and code plus refresh tokens when it names none."""
    asked = body.get("grant_types")
    if asked is None:
        return ["authorization_code", "refresh_token"]
    return [g for g in asked if g in GRANTS] if asked else ["authorization_code"]


def response_types(grants: list[str]) -> list[str]:
    """The response types Keycloak derives from the grants."""
    if "authorization_code" in grants:
        return ["code", "none"]
    return ["id_token", "id_token token"] if "implicit" in grants else []
