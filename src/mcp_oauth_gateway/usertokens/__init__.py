"""Users' own grants at third-party MCP servers' authorization servers, kept sealed: the keys
(`keys`), the records (`grants`), the stores (`store`: SQLite or Redis) and the refresh that
runs once (`refresh`). Imports only the shared vocabulary below it."""

from .grants import Grant, GrantKey, GrantSummary
from .keys import (
    KeyFileError,
    SealError,
    Tampered,
    TokenKeys,
    UnknownKey,
    load_keys,
    new_key_line,
    parse_keys,
)
from .locking import LockTimeout, StoreError
from .refresh import SingleFlight
from .store import GrantStore, open_store, reseal_all

__all__ = [
    "Grant",
    "GrantKey",
    "GrantStore",
    "GrantSummary",
    "KeyFileError",
    "LockTimeout",
    "SealError",
    "SingleFlight",
    "StoreError",
    "Tampered",
    "TokenKeys",
    "UnknownKey",
    "load_keys",
    "new_key_line",
    "open_store",
    "parse_keys",
    "reseal_all",
]
