"""The pagination cursor of a merged list: where each target's list goes on (`target` → that
target's own cursor), opaque to the client and signed, so a client can neither forge a cursor
for a target nor replay one in another session (or at another gateway process: the key is the
process's own)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Collection, Mapping

import orjson


class BadCursor(ValueError):
    """A cursor this gateway did not issue for this session and list."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Cursors:
    """Issues and reads the cursors of one route's merged lists."""

    def __init__(self, key: bytes | None = None):
        self.key = key if key is not None else secrets.token_bytes(32)

    def _mac(self, session: str, method: str, payload: bytes) -> bytes:
        signed = b"\n".join((session.encode(), method.encode(), payload))
        return hmac.new(self.key, signed, hashlib.sha256).digest()

    def issue(self, session: str, method: str, positions: Mapping[str, str]) -> str | None:
        """The cursor of the next page (None when every target's list is done)."""
        if not positions:
            return None
        payload = orjson.dumps(dict(positions))
        return f"{_b64(payload)}.{_b64(self._mac(session, method, payload))}"

    def read(
        self, cursor: object, session: str, method: str, targets: Collection[str]
    ) -> dict[str, str]:
        """Each target's cursor from a cursor `issue` wrote; BadCursor otherwise."""
        if not isinstance(cursor, str) or cursor.count(".") != 1:
            raise BadCursor("the cursor is not one this gateway issued")
        encoded, signature = cursor.split(".")
        try:
            payload, mac = _unb64(encoded), _unb64(signature)
        except (binascii.Error, ValueError):
            raise BadCursor("the cursor is not one this gateway issued") from None
        # Base64's last character has spare bits: only the one spelling issued is read.
        if _b64(payload) != encoded or _b64(mac) != signature:
            raise BadCursor("the cursor is not one this gateway issued")
        if not hmac.compare_digest(mac, self._mac(session, method, payload)):
            raise BadCursor("the cursor is not one this gateway issued for this session and list")
        positions = orjson.loads(payload)
        # Signed by us, so well-formed; checked anyway, as everything read back is.
        if not isinstance(positions, dict) or not all(
            name in targets and isinstance(value, str) for name, value in positions.items()
        ):
            raise BadCursor("the cursor names a target this route does not have")
        return positions
