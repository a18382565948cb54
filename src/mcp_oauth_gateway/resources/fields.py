"""What the resources' fields share: API groups, the base model, and the field types and
checks several kinds use (durations, URLs, scopes, header names, provider kinds)."""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from ..provider_kinds import ALIASES, parse_kind
from ..redis_targets import REDIS_FORMS, parse_redis_url, shown_redis_url
from ..urls import navigable, origin_of, shown_url

POLICY_API_GROUP: Final = "mcp-oauth-gateway.dev"
POLICY_API_VERSION = f"{POLICY_API_GROUP}/v1alpha1"
GATEWAY_API_GROUP: Final = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = f"{GATEWAY_API_GROUP}/v1"

# fullmatch and [0-9]: `$` also matches before a final newline and `\d` any Unicode digit,
# neither of which the API server's (RE2) validation of the same field admits.
_DURATION = re.compile(
    r"(?:([0-9]{1,5})h)?(?:([0-9]{1,5})m(?!s))?(?:([0-9]{1,5})s)?(?:([0-9]{1,5})ms)?"
)


def parse_duration(text: str) -> float:
    """Parse a Gateway API duration such as `5m`, `1h30m`, `500ms` into seconds."""
    match = _DURATION.fullmatch(text)
    if not text or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration; write it like 30s, 5m, 1h30m or 500ms")
    hours, minutes, seconds, millis = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


# What the CRD schema can say of an http(s) URL, so the API server refuses what the gateway
# would (a refused policy fails its routes closed, but it should not be stored at all):
# `http(s)://`, a host without user information, no fragment, no ASCII space or backslash
# (explicit classes: `\s` is Unicode in Python, ASCII in the API server's RE2). The
# WHATWG parser then reads the rest (a host it refuses is the controller's to report).
HTTP_URL = re.compile(r"[Hh][Tt][Tt][Pp][Ss]?://[^\t\n\v\f\r /?#@\\]+(?:[/?][^\t\n\v\f\r #\\]*)?")
# And of a Redis URL: its scheme, as urllib reads it.
REDIS_URL = re.compile(
    r"(?:[Rr][Ee][Dd][Ii][Ss][Ss]?(?:\+(?:[Ss][Ee][Nn][Tt][Ii][Nn][Ee][Ll]|[Cc][Ll][Uu][Ss][Tt][Ee][Rr]))?"
    r"|[Uu][Nn][Ii][Xx]):[^\t\n\v\f\r ]*"
)


def absolute_http_url(value: str) -> str:
    # Read as browsers and MCP clients read it (WHATWG), not as urllib does, and written as the
    # CRD schema says (HTTP_URL).
    if navigable(value) is None or not HTTP_URL.fullmatch(value):
        raise ValueError(f"{shown_url(value)!r} is not an absolute http(s) URL")
    return value


def cors_origin(value: str) -> str:
    if value == "*":
        return value
    if "*" in value:
        raise ValueError(
            f"{shown_url(value)!r}: wildcard origins are not supported; list each origin, "
            "or use '*' alone"
        )
    origin = origin_of(value)
    if origin is None or value.rstrip("/") != origin:
        hint = f"; browsers send it as {origin!r}" if origin else ""
        raise ValueError(
            f"{shown_url(value)!r} is not an origin (scheme://host[:port], as browsers send "
            f"it in the Origin header; wildcards other than '*' are not "
            f"supported){hint}"
        )
    return value


def _starts_with_slash(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"path {value!r} must start with '/'")
    return value


AbsolutePath = Annotated[str, AfterValidator(_starts_with_slash)]


class StrictModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


NonEmpty = Annotated[str, Field(min_length=1)]
Port = Annotated[int, Field(ge=1, le=65535)]
Duration = Annotated[str, Field(min_length=1)]


# Every spelling of a provider kind configuration accepts (the CRDs' enum).
PROVIDER_ALIASES = tuple(ALIASES)


def provider_kind(value: object, noun: str) -> object:
    """A provider kind from any of its spellings (a non-string is left to the type check)."""
    if not isinstance(value, str):
        return value
    try:
        return parse_kind(value)
    except ValueError as exc:
        raise ValueError(f"unknown {noun} {exc}") from None


DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")


def domain(value: str) -> str:
    if not DOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a lowercase DNS domain such as corp.example")
    return value


# RFC 6749 §3.3 scope-token: printable ASCII without space, `"` or a backslash, so a scope can be
# written into a quoted WWW-Authenticate parameter as it is.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,256}")
REFRESH_SCOPE = "offline_access"


def _scope_token(value: str) -> str:
    if not _SCOPE_TOKEN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an OAuth scope (printable ASCII without spaces, quotes or "
            "backslashes, RFC 6749 §3.3)"
        )
    return value


ScopeToken = Annotated[str, AfterValidator(_scope_token)]


def not_refresh_scope(values: list[str], where: str) -> list[str]:
    """it asks for a refresh token, not for access to this resource; MCP 2026-07-28 clients add
    it themselves when the authorization server offers refresh tokens"""
    if REFRESH_SCOPE in values:
        reason = " ".join((not_refresh_scope.__doc__ or "").split())
        raise ValueError(f"{REFRESH_SCOPE} does not belong in {where}: {reason}")
    return values


def _redis_url(value: str) -> str:
    if not REDIS_URL.fullmatch(value):
        raise ValueError(f"{shown_redis_url(value)!r} is not a Redis URL: give {REDIS_FORMS}")
    parse_redis_url(value, "the URL")  # one server, a Sentinel set or a Cluster, checked whole
    return value


RedisUrl = Annotated[str, AfterValidator(_redis_url)]


ScopeList = Annotated[list[ScopeToken], Field(max_length=64)]


# RFC 9110 token; matched whole (a trailing newline would otherwise pass and end a header line).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_PROTECTED = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "authorization"}
)


def _header_name(value: str) -> str:
    if not _HEADER_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid HTTP header name")
    if value.lower() in _PROTECTED:
        raise ValueError(f"the gateway manages {value!r} itself; it cannot be set or removed")
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# A Kubernetes namespace name (an RFC 1123 label).
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _namespace_name(value: str) -> str:
    if len(value) > 63 or not NAMESPACE_NAME.fullmatch(value):
        raise ValueError(
            f"{value[:80]!r} is not a namespace name (at most 63 lowercase letters, digits or "
            "`-`, starting and ending with a letter or digit)"
        )
    return value


NamespaceName = Annotated[str, AfterValidator(_namespace_name)]
