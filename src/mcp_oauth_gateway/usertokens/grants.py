"""A user's grant at an upstream service: whose it is (`GrantKey`), what it holds (`Grant`) and
what may be shown of it (`GrantSummary`, never a token)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson

# The layout of a sealed grant's JSON; a record of another version is not read.
GRANT_FORMAT = 1


@dataclass(frozen=True, slots=True)
class GrantKey:
    """Whose grant: the caller (token `iss` and `sub`) and the backend the lead names."""

    issuer: str
    subject: str
    backend: str

    def __post_init__(self) -> None:
        for name in ("issuer", "subject", "backend"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"a grant's {name} is a non-empty string, not {value!r}")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"a grant's {name} holds a lone surrogate, which is no Unicode text"
                ) from None

    def text(self) -> str:
        """The canonical text of the key: a JSON array, so no two keys share one (the store's
        key and the associated data sealed with the grant)."""
        return orjson.dumps([self.issuer, self.subject, self.backend]).decode("utf-8")

    @classmethod
    def from_text(cls, text: str | bytes) -> GrantKey:
        """The key whose `text()` this is; ValueError when it is none."""
        try:
            parts = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not a grant key: {exc}") from None
        if not (isinstance(parts, list) and len(parts) == 3):
            raise ValueError("not a grant key: a JSON array of issuer, subject and backend")
        return cls(*parts)


@dataclass(frozen=True, slots=True)
class Grant:
    """The tokens an upstream authorization server issued for one user and backend. The
    tokens are left out of `repr`, so a log line or traceback never shows them."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    token_type: str
    expires_at: float | None
    scope: str | None
    upstream_issuer: str | None
    obtained_at: float
    refreshed_at: float | None = None

    def __post_init__(self) -> None:
        _checked(self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "refresh_token": self.refresh_token,
            "token_type": self.token_type,
            "expires_at": self.expires_at,
            "scope": self.scope,
            "upstream_issuer": self.upstream_issuer,
            "obtained_at": self.obtained_at,
            "refreshed_at": self.refreshed_at,
        }

    def to_json(self) -> bytes:
        """The grant as JSON, for sealing."""
        return orjson.dumps({"v": GRANT_FORMAT, **self._fields()})

    @classmethod
    def from_json(cls, raw: bytes) -> Grant:
        """The grant `to_json` wrote; ValueError naming the first field that is not right."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"a grant is JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("v") != GRANT_FORMAT:
            raise ValueError(f"not a grant of format {GRANT_FORMAT}")
        del data["v"]
        return cls(**_checked(data))


@dataclass(frozen=True, slots=True)
class GrantSummary:
    """What an operator or the user may see of a grant: never a token."""

    key: GrantKey
    scope: str | None
    obtained_at: float
    refreshed_at: float | None
    expires_at: float | None
    key_id: str


def summary(key: GrantKey, grant: Grant, key_id: str) -> GrantSummary:
    """The summary of `grant`, sealed with the key `key_id`."""
    return GrantSummary(
        key, grant.scope, grant.obtained_at, grant.refreshed_at, grant.expires_at, key_id
    )


_TEXTS = ("access_token", "token_type")
_OPTIONAL_TEXTS = ("refresh_token", "scope", "upstream_issuer")
_TIMES = ("obtained_at",)
_OPTIONAL_TIMES = ("expires_at", "refreshed_at")


def _checked(data: dict[str, Any]) -> dict[str, Any]:
    """The fields of a grant, each of its type; ValueError naming the first that is not."""
    unknown = set(data) - {*_TEXTS, *_OPTIONAL_TEXTS, *_TIMES, *_OPTIONAL_TIMES}
    if unknown:
        raise ValueError(f"a grant has no field {sorted(unknown)[0]!r}")
    checked: dict[str, Any] = {}
    for name in _TEXTS:
        checked[name] = _text(data, name)
    for name in _OPTIONAL_TEXTS:
        checked[name] = _optional_text(data, name)
    for name in _TIMES:
        checked[name] = _time(data, name)
    for name in _OPTIONAL_TIMES:
        checked[name] = _optional_time(data, name)
    return checked


def _text(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"a grant's {name} is a non-empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"a grant's {name} holds a lone surrogate") from None
    return value


def _optional_text(data: dict[str, Any], name: str) -> str | None:
    return None if data.get(name) is None else _text(data, name)


def _time(data: dict[str, Any], name: str) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"a grant's {name} is a number of seconds since the epoch")
    return float(value)


def _optional_time(data: dict[str, Any], name: str) -> float | None:
    return None if data.get(name) is None else _time(data, name)
