"""A merged list (`tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`):
one page asked of every target in parallel, their items renamed for their target and joined in
the backend's order, and one cursor holding where each target's list goes on."""

from __future__ import annotations

from collections.abc import Collection

from ... import jsonrpc
from ...asgi import Scope
from ...jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Malformed
from ...mcp_methods import LISTS
from . import merge
from .cursor import BadCursor, Cursors
from .fanout import Fanout
from .session import ClientSession, TargetSession
from .target import ErrorAnswer


class NotOffered(ErrorAnswer):
    """The target has no such list (it answered Method not found)."""


async def merged_list(
    fan: Fanout,
    cursors: Cursors,
    names: Collection[str],
    scope: Scope,
    session: ClientSession,
    message: dict[str, object],
) -> dict[str, object]:
    """The merged page the list request `message` asks for; Malformed for a bad cursor, or as
    Method not found when no target has the list. A target that fails is left out of this
    page."""
    method = str(message["method"])
    params = jsonrpc.params_of(message)
    if "cursor" in params:
        try:
            positions: dict[str, str | None] = dict(
                cursors.read(params["cursor"], session.id, method, names)
            )
        except BadCursor as exc:
            raise Malformed(INVALID_PARAMS, str(exc)) from None
    else:
        positions = {name: None for name in session.targets}
    pages: dict[str, tuple[list[object], object]] = {}

    async def page(target: TargetSession) -> None:
        name = target.target.name
        own = {k: v for k, v in params.items() if k != "cursor"}
        if positions[name] is not None:
            own["cursor"] = positions[name]
        answer = await fan.ask(scope, session, target, {**message, "params": own})
        result = answer.get("result")
        if not isinstance(result, dict):
            error = answer.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            kind = NotOffered if code == METHOD_NOT_FOUND else ErrorAnswer
            raise kind(f"it answered {method} with an error: {error}")
        pages[name] = (merge.offered_items(method, name, result), result.get("nextCursor"))

    failures = await fan.each(session, page, every=True, only=positions)
    if not pages and failures and all(isinstance(f, NotOffered) for f in failures.values()):
        # No target has such a list: answered as a server without it answers.
        raise Malformed(METHOD_NOT_FOUND, f"Method not found: {method}")
    field = LISTS[method][0]
    result: dict[str, object] = {
        field: [item for name in positions if name in pages for item in pages[name][0]]
    }
    following = {n: c for n, (_, c) in pages.items() if isinstance(c, str) and c}
    cursor = cursors.issue(session.id, method, following)
    if cursor is not None:
        result["nextCursor"] = cursor
    return result
