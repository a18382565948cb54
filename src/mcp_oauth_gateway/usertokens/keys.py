"""The keys sealing users' upstream tokens at rest (`serve --user-token-key FILE`).

The key file holds one key a line: 32 random bytes in base64 (`mcp-oauth-gateway grants
new-key`). Blank lines and `#` comments are allowed. The first key seals, every key opens: to
rotate, put a new key on the first line, run `grants reseal`, then drop the old line.

A sealed record is `version | key id | nonce | AES-256-GCM ciphertext and tag`. The key id (a
hash of the key, never the key) says which key opens it; the caller's associated data (what the
record is for: the grant's owner and backend) is authenticated with it, so a record copied to
another user's row does not open. There is no unsealed form: without keys nothing is stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .filemode import exposure

KEY_BYTES = 32
NONCE_BYTES = 12
KEY_ID_BYTES = 8
TAG_BYTES = 16
VERSION = 1
# Far more than any key file needs; a mistaken path (a log, a device) is not read whole.
MAX_KEY_FILE_BYTES = 64 * 1024
_HEADER_BYTES = 1 + KEY_ID_BYTES
_KEY_ID_LABEL = b"mcp-oauth-gateway usertokens key id v1\x00"
# 32 random bytes hold about 30 distinct values; fewer than this is a placeholder someone typed.
_MIN_DISTINCT_BYTES = 16
NEW_KEY_HINT = "make one with `mcp-oauth-gateway grants new-key` (or `openssl rand -base64 32`)"


class KeyFileError(ValueError):
    """The key file cannot be used; the message names the file, the line and the fix."""


class SealError(Exception):
    """A sealed record does not open."""


class UnknownKey(SealError):
    """Sealed with a key the key file no longer holds."""

    def __init__(self, key_id: str):
        super().__init__(f"sealed with key id {key_id}, which the key file does not hold")
        self.key_id = key_id


class Tampered(SealError):
    """Not a record these keys sealed for this associated data: changed, cut or moved."""


def key_id(key: bytes) -> str:
    """The short public name of `key`: a hash of it, from which the key cannot be found."""
    return hashlib.sha256(_KEY_ID_LABEL + key).digest()[:KEY_ID_BYTES].hex()


@dataclass(frozen=True)
class TokenKeys:
    """The keys of a key file: the first seals, all open."""

    ids: tuple[str, ...]
    _ciphers: dict[str, AESGCM] = field(repr=False, compare=False)

    @classmethod
    def of(cls, keys: list[bytes]) -> TokenKeys:
        """Keys from raw 32-byte values, the sealing one first."""
        if not keys:
            raise ValueError("at least one key is needed")
        for key in keys:
            if len(key) != KEY_BYTES:
                raise ValueError(f"a key is {KEY_BYTES} bytes, not {len(key)}")
        ids = tuple(key_id(key) for key in keys)
        if len(set(ids)) != len(ids):
            raise ValueError("the same key is given twice")
        return cls(ids, {kid: AESGCM(key) for kid, key in zip(ids, keys, strict=True)})

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The keys' ids, the sealing key's first."""
        return self.ids

    @property
    def sealing_id(self) -> str:
        """The id of the key new records are sealed with."""
        return self.ids[0]

    def seal(self, plaintext: bytes, aad: bytes) -> bytes:
        """`plaintext` sealed with the first key, bound to `aad`."""
        kid = self.ids[0]
        header = bytes([VERSION]) + bytes.fromhex(kid)
        nonce = secrets.token_bytes(NONCE_BYTES)
        return header + nonce + self._ciphers[kid].encrypt(nonce, plaintext, header + aad)

    def open(self, sealed: bytes, aad: bytes) -> bytes:
        """The plaintext of `sealed`; UnknownKey or Tampered when it does not open."""
        kid = sealed_key_id(sealed)
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise UnknownKey(kid)
        header, nonce = sealed[:_HEADER_BYTES], sealed[_HEADER_BYTES : _HEADER_BYTES + NONCE_BYTES]
        try:
            return cipher.decrypt(nonce, sealed[_HEADER_BYTES + NONCE_BYTES :], header + aad)
        except InvalidTag:
            raise Tampered("the sealed record does not open with its associated data") from None


def sealed_key_id(sealed: bytes) -> str:
    """The id of the key that sealed `sealed`; Tampered when it is no sealed record."""
    if len(sealed) < _HEADER_BYTES + NONCE_BYTES + TAG_BYTES or sealed[0] != VERSION:
        raise Tampered("not a sealed record of this version")
    return sealed[1:_HEADER_BYTES].hex()


def new_key_line() -> str:
    """A fresh key, as a line of a key file."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def parse_keys(text: str, where: str) -> TokenKeys:
    """The keys in a key file's `text`; KeyFileError naming `where`, the line and the fix."""
    keys: list[bytes] = []
    lines: dict[bytes, int] = {}
    # A byte order mark some editors write first is no part of the first key.
    text = text.removeprefix("\ufeff")
    for number, line in enumerate(text.split("\n"), start=1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        key = _key(content, f"{where}:{number}")
        if key in lines:
            raise KeyFileError(
                f"{where}:{number}: the same key as line {lines[key]}; remove one of the two"
            )
        lines[key] = number
        keys.append(key)
    if not keys:
        raise KeyFileError(f"{where}: holds no key; {NEW_KEY_HINT} and add it as a line")
    return TokenKeys.of(keys)


def _key(content: str, where: str) -> bytes:
    try:
        key = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(
            f"{where}: not base64 (one key a line, nothing else but `#` comments); {NEW_KEY_HINT}"
        ) from None
    if len(key) != KEY_BYTES:
        raise KeyFileError(
            f"{where}: a key of {len(key)} bytes; a key is {KEY_BYTES} random bytes in base64, "
            f"{NEW_KEY_HINT}"
        )
    if len(set(key)) < _MIN_DISTINCT_BYTES:
        raise KeyFileError(f"{where}: not random bytes (a placeholder?); {NEW_KEY_HINT}")
    return key


def load_keys(path: Path) -> TokenKeys:
    """The keys in the key file at `path`; KeyFileError saying what is wrong and the fix."""
    return parse_keys(_read(path), str(path))


def _read(path: Path) -> str:
    """The text of a regular file only its owner (and group) may read, at most
    MAX_KEY_FILE_BYTES (a FIFO or device never blocks or floods the start)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyFileError(
            f"{path}: no such file; create it with `mcp-oauth-gateway grants new-key > {path}` "
            f"and `chmod 600 {path}`"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise KeyFileError(f"{path}: not a regular file; give the key file's path")
        too_open = exposure(found.st_mode)
        if too_open is not None:
            raise KeyFileError(
                f"{path}: {too_open}; chmod 600 {path} (a Kubernetes Secret volume: "
                "defaultMode: 0440 with the pod's fsGroup)"
            )
        raw = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{path}: larger than {MAX_KEY_FILE_BYTES} bytes; is it the key file?")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError(f"{path}: not text; a key file holds base64 lines") from None
