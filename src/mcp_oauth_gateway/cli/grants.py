"""`grants`: the operator's hand on users' grants at upstream MCP servers' authorization
servers: a fresh key line, the grants listed (never a token), a user's removed, every grant
resealed under the key file's first key (rotation)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..logs import escape_field
from ..usertokens import (
    GrantKey,
    GrantStore,
    GrantSummary,
    KeyFileError,
    StoreError,
    TokenKeys,
    load_keys,
    new_key_line,
    open_store,
    reseal_all,
)
from .common import EXIT_INVALID

if TYPE_CHECKING:
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

STORE_FLAG = "--user-token-store"
KEY_FLAG = "--user-token-key"
_COLUMNS = ("ISSUER", "SUBJECT", "BACKEND", "SCOPE", "OBTAINED", "REFRESHED", "EXPIRES", "KEY ID")
_MISSING_KEY = "*"


def add_parsers(commands: Commands) -> None:
    """Register `grants new-key`, `grants list`, `grants remove` and `grants reseal`."""
    grants = commands.add_parser(
        "grants",
        help="users' grants at upstream MCP servers (userOAuth): new-key, list, remove, reseal",
        description="Users' grants at upstream MCP servers' authorization servers, as the "
        "gateway keeps them: sealed with the keys of --user-token-key in the store of "
        "--user-token-store. No command shows a token.",
    )
    actions = grants.add_subparsers(dest="grants_command", required=True)
    actions.add_parser("new-key", help="print a fresh key: a line for the --user-token-key file")
    listing = actions.add_parser("list", help="list grants (whose, at which backend, until when)")
    user_token_flags(listing)
    listing.add_argument("--issuer", metavar="ISS", help="only the users of this issuer")
    listing.add_argument("--subject", metavar="SUB", help="only the users with this subject")
    listing.add_argument("--output", choices=["text", "json"], default="text")
    remove = actions.add_parser("remove", help="remove a user's grants (the user connects again)")
    user_token_flags(remove)
    remove.add_argument("--issuer", metavar="ISS", required=True, help="the user's issuer")
    remove.add_argument("--subject", metavar="SUB", required=True, help="the user's subject")
    remove.add_argument("--backend", metavar="KEY", help="only the grant at this backend")
    reseal = actions.add_parser(
        "reseal",
        help="seal every grant anew with the key file's first key (rotation)",
        description="Key rotation: give every replica a key file with the new key added as "
        "its last line, then moved to the first; run `grants reseal`; then drop the old key.",
    )
    user_token_flags(reseal)


def user_token_flags(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--user-token-store and --user-token-key."""
    parser.add_argument(
        STORE_FLAG,
        dest="user_token_store",
        required=required,
        metavar="URL",
        help="where users' grants are kept: sqlite:///ABSOLUTE/PATH (the gateway's processes "
        "on one machine) or redis://HOST:PORT/DB, rediss://…, unix:/PATH (several replicas)",
    )
    parser.add_argument(
        KEY_FLAG,
        dest="user_token_key",
        required=required,
        metavar="FILE",
        help="the keys sealing the grants: one line each, 32 random bytes in base64 (`grants "
        "new-key`); the first seals, all open; readable by its owner (and group) only",
    )


def cmd_grants(args: argparse.Namespace) -> int:
    """Run one `grants` command; exit 2 naming the flag when a flag is wrong."""
    if args.grants_command == "new-key":
        print(new_key_line())
        return 0
    try:
        keys = load_keys(Path(args.user_token_key))
    except KeyFileError as exc:
        print(f"error: {KEY_FLAG} {exc}", file=sys.stderr)
        return EXIT_INVALID
    try:
        # The operator's commands read a store the gateway made: a mistyped path is no store.
        store = open_store(args.user_token_store, keys, STORE_FLAG, create=False)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return asyncio.run(_run(_ACTIONS[args.grants_command], args, store, keys))


Action = Callable[[argparse.Namespace, GrantStore, TokenKeys], Awaitable[int]]


async def _run(action: Action, args: argparse.Namespace, store: GrantStore, keys: TokenKeys) -> int:
    try:
        await store.ping()
        return await action(args, store, keys)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()


async def _list(args: argparse.Namespace, store: GrantStore, keys: TokenKeys) -> int:
    if args.issuer is not None and args.subject is not None:
        found = await store.list_user(args.issuer, args.subject)
    else:
        found = [
            s
            for s in await store.list_all()
            if args.issuer in (None, s.key.issuer) and args.subject in (None, s.key.subject)
        ]
    if args.output == "json":
        print(json.dumps([_json(s, keys) for s in found], indent=2))
        return 0
    _table([_row(s, keys) for s in found])
    unreadable = sum(s.key_id not in keys.key_ids for s in found)
    if unreadable:
        print(
            f"{_MISSING_KEY} {unreadable} sealed with a key {KEY_FLAG} does not hold: they read "
            "as absent (their users are asked to connect again) until that key is back",
        )
    if not found:
        print(f"no grants in {store.where}", file=sys.stderr)
    return 0


async def _remove(args: argparse.Namespace, store: GrantStore, keys: TokenKeys) -> int:
    try:
        GrantKey(args.issuer, args.subject, args.backend or "-")
    except ValueError as exc:
        print(f"error: --issuer/--subject/--backend: {exc}", file=sys.stderr)
        return EXIT_INVALID
    removed = await store.delete_user(args.issuer, args.subject, args.backend)
    whose = f"subject {args.subject!r} of issuer {args.issuer!r}"
    at = "" if args.backend is None else f" at backend {args.backend!r}"
    if not removed:
        print(
            f"error: no grant of {whose}{at} in {store.where}; `grants list` shows whose "
            "grants there are",
            file=sys.stderr,
        )
        return 1
    print(f"removed {removed} grant{'s' * (removed != 1)} of {whose}{at}")
    return 0


async def _reseal(args: argparse.Namespace, store: GrantStore, keys: TokenKeys) -> int:
    count = await reseal_all(store)
    print(f"resealed {count} grant{'s' * (count != 1)} with key id {keys.sealing_id}")
    left = [s for s in await store.list_all() if s.key_id not in keys.key_ids]
    if left:
        ids = ", ".join(sorted({s.key_id for s in left}))
        print(
            f"warning: {len(left)} grant{'s' * (len(left) != 1)} sealed with keys {KEY_FLAG} "
            f"does not hold ({ids}) stay as they are: unreadable until that key is back",
            file=sys.stderr,
        )
    return 0


_ACTIONS: dict[str, Action] = {"list": _list, "remove": _remove, "reseal": _reseal}


def _when(moment: float | None) -> str:
    if moment is None:
        return "-"
    try:
        return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{moment:g}"


def _row(s: GrantSummary, keys: TokenKeys) -> list[str]:
    kid = s.key_id if s.key_id in keys.key_ids else s.key_id + _MISSING_KEY
    texts = (s.key.issuer, s.key.subject, s.key.backend, s.scope or "-")
    times = (s.obtained_at, s.refreshed_at, s.expires_at)
    return [*(escape_field(t) for t in texts), *(_when(t) for t in times), kid]


def _json(s: GrantSummary, keys: TokenKeys) -> dict[str, Any]:
    return {
        "issuer": s.key.issuer,
        "subject": s.key.subject,
        "backend": s.key.backend,
        "scope": s.scope,
        "obtained": _when(s.obtained_at),
        "refreshed": None if s.refreshed_at is None else _when(s.refreshed_at),
        "expires": None if s.expires_at is None else _when(s.expires_at),
        "key_id": s.key_id,
        "key_held": s.key_id in keys.key_ids,
    }


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(c) for c in column) for column in zip(_COLUMNS, *rows, strict=True)]
    for row in [list(_COLUMNS), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
