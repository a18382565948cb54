"""The dev identity provider's state: plain JSON-able records in memory, optionally persisted.

Passwords are kept only as PBKDF2 hashes; signing keys are kept so `kid`s stay stable across
restarts when a state file is used.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
import uuid
from pathlib import Path
from typing import Any

from joserfc.jwk import RSAKey

Record = dict[str, Any]

_ITERATIONS = 100_000


def hash_password(password: str) -> str:
    """A salted PBKDF2-SHA256 hash, `pbkdf2$<salt hex>$<hash hex>`."""
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _ITERATIONS)
    return f"pbkdf2${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str | None) -> bool:
    """Constant-time check of `password` against a stored hash."""
    if not stored:
        return False
    try:
        _, salt, expected = stored.split("$")
    except ValueError:
        return False
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), _ITERATIONS)
    return hmac.compare_digest(digest.hex(), expected)


def new_signing_key(prefix: str) -> Record:
    """A fresh RS256 private JWK with a stable, unique `kid`."""
    kid = f"{prefix}-{secrets.token_hex(6)}"
    key = RSAKey.generate_key(2048, parameters={"kid": kid, "alg": "RS256", "use": "sig"})
    return key.as_dict(private=True)


def new_id() -> str:
    """A UUID string, the id format both providers use."""
    return str(uuid.uuid4())


class Store:
    """Collections of records by name; `save()` writes them to the state file, if any."""

    def __init__(self, path: Path | None):
        self.path = path
        self.data: dict[str, Any] = {}
        if path is not None and path.exists():
            self.data = json.loads(path.read_text())

    def ids(self, name: str) -> list[str]:
        """The named list of ids (created empty on first use)."""
        ids: list[str] = self.data.setdefault(name, [])
        return ids

    def collection(self, name: str) -> list[Record]:
        """The named list of records (created empty on first use)."""
        records: list[Record] = self.data.setdefault(name, [])
        return records

    def value(self, name: str, default: Any = None) -> Any:
        """A named single value."""
        return self.data.get(name, default)

    def set_value(self, name: str, value: Any) -> None:
        """Set a named single value and save."""
        self.data[name] = value
        self.save()

    def save(self) -> None:
        """Persist atomically (write a temporary file, then rename)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".devidp-")
        with os.fdopen(fd, "w") as handle:
            json.dump(self.data, handle, indent=1, sort_keys=True)
        os.replace(tmp, self.path)
