"""The names of the grant store's keys in Redis. Under the prefix `mcp-oauth-gateway:usertokens:`:
`grant:<key text>` a hash (the sealed grant, its key id, and what a summary shows),
`user:<[issuer, subject]>` the set of a user's grant key texts, `pending:<kind>:<id>` a sealed
value with its expiry (PX), `lock:<name>` a holder's random token with its expiry, `schema` the
layout's version.

In a Redis Cluster a user's grants and their set are written in one step, so they must share a
slot: there the names of both carry the user's hash tag, `{<digest of [issuer, subject]>}:grant:…`
and `{…}:user` (one server and Sentinel keep the names above, which stores written before
Cluster support hold)."""

from __future__ import annotations

import hashlib

import orjson

from .grants import GrantKey

PREFIX = "mcp-oauth-gateway:usertokens:"
SCHEMA = PREFIX + "schema"
_GRANT_MARK = b"}:grant:"


def _user_json(issuer: str, subject: str) -> str:
    return orjson.dumps([issuer, subject]).decode("utf-8")


class KeyNames:
    """The names of one store's keys: tagged by user in a Cluster, as before elsewhere."""

    def __init__(self, tagged: bool):
        self.tagged = tagged

    def _tag(self, issuer: str, subject: str) -> str:
        digest = hashlib.sha256(_user_json(issuer, subject).encode("utf-8")).hexdigest()[:32]
        return PREFIX + "{" + digest + "}:"

    def grants_of(self, issuer: str, subject: str) -> str:
        """What every grant name of this user starts with."""
        return self._tag(issuer, subject) + "grant:" if self.tagged else PREFIX + "grant:"

    def grant(self, key: GrantKey) -> str:
        """The hash holding `key`'s grant."""
        return self.grants_of(key.issuer, key.subject) + key.text()

    def user(self, issuer: str, subject: str) -> str:
        """The set of one user's grant key texts."""
        if self.tagged:
            return self._tag(issuer, subject) + "user"
        return PREFIX + "user:" + _user_json(issuer, subject)

    @property
    def every_grant(self) -> str:
        """The SCAN pattern of every grant's name."""
        return PREFIX + "{*}:grant:*" if self.tagged else PREFIX + "grant:*"

    def key_text(self, name: bytes) -> bytes:
        """The key text of grant name `name` (as SCAN returned it)."""
        if self.tagged:
            return name.partition(_GRANT_MARK)[2]
        return name[len(PREFIX + "grant:") :]


def pending(kind: str, id: str) -> str:
    """A pending value's name."""
    return f"{PREFIX}pending:{kind}:{id}"


def lock(name: str) -> str:
    """A lock's name."""
    return f"{PREFIX}lock:{name}"
