"""`serve --user-token-key FILE --user-token-store URL`: where users' upstream tokens (userOAuth)
are kept, always encrypted. Without a key the feature is off and userOAuth policies are
refused; a bad key file or store URL stops the gateway before it serves."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..redis_targets import parse_redis_url
from .common import Refused

if TYPE_CHECKING:
    from ..serving.process_state import UserTokenSettings

STATE_DIR_ENV = "XDG_STATE_HOME"


def add_user_token_flags(serve: argparse.ArgumentParser) -> None:
    """The flags, on `serve`."""
    serve.add_argument(
        "--user-token-key",
        metavar="FILE",
        help="userOAuth: the key file users' upstream tokens are encrypted with (AES-256-GCM): "
        "one base64 key of 32 random bytes per line (`mcp-oauth-gateway grants new-key`); the "
        "first encrypts, every line decrypts (add a new first line to rotate). Unset: "
        "userOAuth policies are refused",
    )
    serve.add_argument(
        "--user-token-store",
        metavar="URL",
        help="userOAuth: where users' encrypted grants are kept: sqlite:///PATH (default "
        "$XDG_STATE_HOME/mcp-oauth-gateway/user-tokens.db, one host) or redis://, rediss://, "
        "unix:// (several replicas)",
    )


def default_store() -> str:
    """The SQLite file of a gateway given no store: under the user's state directory."""
    base = os.environ.get(STATE_DIR_ENV) or str(Path.home() / ".local" / "state")
    path = (Path(base) / "mcp-oauth-gateway" / "user-tokens.db").absolute()
    return f"sqlite://{path}"  # the path's own leading slash is the URL's third


def user_token_settings(args: argparse.Namespace) -> UserTokenSettings | None:
    """The flags as settings (None: no key); Refused naming the flag and the fix."""
    from ..serving.process_state import UserTokenSettings
    from ..usertokens.keys import KeyFileError, load_keys
    from ..usertokens.store import sqlite_path

    key_file: str | None = args.user_token_key
    store: str | None = args.user_token_store
    if key_file is None:
        if store is not None:
            raise Refused(
                "--user-token-store needs --user-token-key FILE: tokens are only ever kept "
                "encrypted (make a key with `mcp-oauth-gateway grants new-key > FILE`)"
            )
        return None
    try:
        keys = load_keys(Path(key_file))
    except (KeyFileError, OSError) as exc:
        raise Refused(f"--user-token-key {key_file}: {exc}") from exc
    url = store or default_store()
    if store_kind(url) == "sqlite":
        try:
            path = Path(sqlite_path(url, "--user-token-store"))
        except ValueError as exc:
            raise Refused(str(exc)) from exc
        if store is None:
            # The default's directory is the gateway's to make; a given path's is the operator's.
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not path.parent.is_dir():
            raise Refused(
                f"--user-token-store {url}: the directory {path.parent} does not exist; create "
                "it (owned by the gateway's user) or give another path"
            )
    return UserTokenSettings(url, keys)


def store_kind(url: str) -> str:
    """ "sqlite" or "redis"; Refused for any other URL."""
    if url.startswith("sqlite:///"):
        return "sqlite"
    try:
        parse_redis_url(url, "--user-token-store")  # one server, a Sentinel set or a Cluster
    except ValueError as exc:
        raise Refused(f"{exc}; or give sqlite:///ABSOLUTE/PATH (one machine)") from None
    return "redis"
