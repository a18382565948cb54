"""What the stores seal, with which associated data, and how a record that does not open reads:
as absent, said once per missing key in the log (which never holds a token or a value)."""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson

from .grants import Grant, GrantKey
from .keys import SealError, Tampered, TokenKeys, UnknownKey, sealed_key_id

log = logging.getLogger("mcp_oauth_gateway.usertokens")

# Pending kinds are the gateway's own names; ids come from URLs, so any text, within bounds.
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MAX_PENDING_ID = 512


def grant_aad(key: GrantKey) -> bytes:
    """The associated data of `key`'s grant: a grant opens only in its own row."""
    return b"grant\x00" + key.text().encode("utf-8")


def pending_aad(kind: str, id: str) -> bytes:
    """The associated data of a pending value: it opens only under its own kind and id."""
    return b"pending\x00" + orjson.dumps([kind, id])


def check_kind(kind: str) -> str:
    """`kind` when it is a pending kind's name; ValueError otherwise (a programming error)."""
    if not _KIND.fullmatch(kind):
        raise ValueError(f"pending kind {kind!r} is not a lower-case name")
    return kind


def usable_id(id: str) -> bool:
    """Whether `id` can name a pending value (any other is never stored, so never found)."""
    if not 0 < len(id) <= MAX_PENDING_ID:
        return False
    try:
        id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_id(id: str) -> str:
    """`id` when it can name a pending value; ValueError otherwise."""
    if not usable_id(id):
        raise ValueError(
            f"a pending id is 1 to {MAX_PENDING_ID} characters of Unicode text, not {id[:40]!r}"
        )
    return id


class Sealer:
    """Seals and opens one store's records with the key file's keys."""

    def __init__(self, keys: TokenKeys, where: str):
        self.keys = keys
        self.where = where
        self._said: set[str] = set()

    def seal_grant(self, key: GrantKey, grant: Grant) -> bytes:
        """`grant` sealed for `key`'s row."""
        return self.keys.seal(grant.to_json(), grant_aad(key))

    def open_grant(self, key: GrantKey, sealed: bytes) -> Grant | None:
        """The grant in `sealed`, or None (logged) when it does not open or read."""
        plain = self._open(sealed, grant_aad(key), f"the grant of {_owner(key)}")
        if plain is None:
            return None
        try:
            return Grant.from_json(plain)
        except ValueError as exc:
            log.warning(
                "user token store %s: the grant of %s reads as absent: %s",
                self.where,
                _owner(key),
                exc,
            )
            return None

    def seal_pending(self, kind: str, id: str, value: dict[str, Any]) -> bytes:
        """`value` sealed under its kind and id."""
        return self.keys.seal(orjson.dumps(value), pending_aad(kind, id))

    def open_pending(self, kind: str, id: str, sealed: bytes) -> dict[str, Any] | None:
        """The pending value in `sealed`, or None (logged) when it does not open."""
        plain = self._open(sealed, pending_aad(kind, id), f"a pending {kind} value")
        if plain is None:
            return None
        value = orjson.loads(plain)
        return value if isinstance(value, dict) else None

    def resealed(self, sealed: bytes, aad: bytes) -> bytes | None:
        """`sealed` sealed anew with the first key; None when it already is, or does not open."""
        try:
            if self.keys.sealing_id == sealed_key_id(sealed):
                return None
            return self.keys.seal(self.keys.open(sealed, aad), aad)
        except SealError:
            return None

    def _open(self, sealed: bytes, aad: bytes, what: str) -> bytes | None:
        try:
            return self.keys.open(sealed, aad)
        except UnknownKey as exc:
            if exc.key_id not in self._said:
                self._said.add(exc.key_id)
                log.warning(
                    "user token store %s: records sealed with key id %s read as absent: the key "
                    "file no longer holds that key (put it back to read them; without it their "
                    "users are asked to connect again)",
                    self.where,
                    exc.key_id,
                )
            return None
        except Tampered:
            log.warning(
                "user token store %s: %s does not open with its key (changed, cut, or copied "
                "from another row): it reads as absent",
                self.where,
                what,
            )
            return None


def _owner(key: GrantKey) -> str:
    return f"subject {key.subject!r} of issuer {key.issuer!r} at backend {key.backend!r}"
