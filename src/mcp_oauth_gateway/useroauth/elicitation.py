"""What a caller without a usable upstream grant is answered, on each MCP wire (pure functions).

2025-11-25: the request's JSON-RPC error `-32042` with one URL-mode elicitation (HTTP 200), and
`notifications/elicitation/complete` later, on the client's GET stream. 2026-07-28, which has
neither: an `input_required` result carrying the URL and a `requestState` only this gateway can
have made (AEAD under the user-token key), bound to the caller, the backend, the method, the
params and a deadline; the client's retry with it reaches the backend once the user connected.
A state this gateway did not make is the backend's own (its own `input_required` round, say a
form it asks): it goes on to the backend untouched, with the caller's own token.
Requests that wire gives no `input_required` (lists, `server/discover`) are answered here: the
discovery with what the gateway knows, the others with an error that carries the same URL."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import orjson

from ..jsonrpc import CONNECT_FIRST, URL_ELICITATION_REQUIRED, error, result
from ..mcp_methods import CREATE_ELICITATION
from ..usertokens.keys import SealError

INPUT_KEY = "connect"
# The params the retry adds, which the backend never sees (it never saw the first request).
_RETRY_FIELDS = frozenset({"inputResponses", "requestState"})
_STATE_AAD = b"mcp-oauth-gateway/requestState/v1"
# Begins every state this gateway makes, so that one it must check (and refuse when forged) is
# told from the backend's own, which it must pass on: a backend's state never begins so.
STATE_PREFIX = "mcp-oauth-gateway.v1."
# How long a user has to connect before the client's retry is refused as stale.
STATE_LIFETIME = 15 * 60


@dataclass(frozen=True, slots=True)
class Elicitation:
    """One URL-mode elicitation: the id the pending connection is kept under, its URL (the
    gateway's connect page, never the upstream's) and what the user is told."""

    id: str
    url: str
    message: str


def connect_message(service: str) -> str:
    """What the user reads in their MCP client."""
    return (
        f"Connect your {service} account: open the link, sign in, and allow access. "
        "The gateway keeps the token; your MCP client never sees it."
    )


def url_request(elicitation: Elicitation, with_id: bool) -> dict[str, object]:
    """The elicitation's params (2025-11-25 carries its id; 2026-07-28 removed ids)."""
    params: dict[str, object] = {
        "mode": "url",
        "url": elicitation.url,
        "message": elicitation.message,
    }
    if with_id:
        params["elicitationId"] = elicitation.id
    return params


def required_error(request_id: object, elicitation: Elicitation) -> dict[str, object]:
    """2025-11-25: the JSON-RPC error asking the client to open the URL and retry."""
    text = f"{elicitation.message} Link: {elicitation.url}"
    data = {"elicitations": [url_request(elicitation, with_id=True)]}
    return error(request_id, URL_ELICITATION_REQUIRED, text, data)


def connect_first_error(request_id: object, elicitation: Elicitation) -> dict[str, object]:
    """2026-07-28, a method without `input_required`: an error naming the URL."""
    text = f"{elicitation.message} Link: {elicitation.url} (then try again)"
    data = {"elicitations": [url_request(elicitation, with_id=False)]}
    return error(request_id, CONNECT_FIRST, text, data)


def input_required(request_id: object, elicitation: Elicitation, state: str) -> dict[str, object]:
    """2026-07-28: the result asking the client to open the URL and retry with `state`."""
    request = {"method": CREATE_ELICITATION, "params": url_request(elicitation, False)}
    asked = {"resultType": "input_required", "inputRequests": {INPUT_KEY: request}}
    return result(request_id, {**asked, "requestState": state})


def discovered(service: str, elicitation_url: str) -> dict[str, object]:
    """`server/discover` answered before the user connected: tools only, nothing cached."""
    return {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}},
        "instructions": (
            f"This MCP server acts on your {service} account. Its first tool call asks you to "
            f"connect it ({elicitation_url})."
        ),
        "ttlMs": 0,
        "cacheScope": "private",
        "resultType": "complete",
    }


def declined(params: Mapping[str, object]) -> bool:
    """Whether the retry says the user declined (or cancelled) the connection."""
    responses = params.get("inputResponses")
    answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
    return isinstance(answer, dict) and answer.get("action") in ("decline", "cancel")


def without_retry_fields(params: Mapping[str, object]) -> dict[str, object]:
    """The params as the backend gets them: the retry's own fields removed."""
    return {k: v for k, v in params.items() if k not in _RETRY_FIELDS}


def params_digest(method: str, params: Mapping[str, object]) -> str:
    """What a request state is bound to: the method and the params a retry repeats."""
    kept = {k: v for k, v in params.items() if k not in _RETRY_FIELDS and k != "_meta"}
    body = orjson.dumps([method, kept], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True, slots=True)
class RequestState:
    """What a `requestState` binds: the elicitation, the caller, the backend, the request."""

    elicitation: str
    issuer: str
    subject: str
    backend: str
    digest: str
    expires: float

    def payload(self) -> bytes:
        """The fields, as sealed."""
        return orjson.dumps(
            {
                "e": self.elicitation,
                "i": self.issuer,
                "s": self.subject,
                "b": self.backend,
                "d": self.digest,
                "x": self.expires,
            }
        )


class BadState(ValueError):
    """A `requestState` this gateway did not make for this caller and request, or a stale one."""


Seal = Callable[[bytes, bytes], bytes]


def seal_state(state: RequestState, seal: Seal) -> str:
    """The opaque text the client echoes."""
    sealed = base64.urlsafe_b64encode(seal(state.payload(), _STATE_AAD)).decode("ascii")
    return STATE_PREFIX + sealed


def is_gateway_state(text: object) -> bool:
    """Whether a `requestState` says it is this gateway's (else it is the backend's own)."""
    return isinstance(text, str) and text.startswith(STATE_PREFIX)


def open_state(
    text: object,
    unseal: Seal,
    expected: RequestState,
    now: float,
    siblings: frozenset[str] = frozenset(),
) -> RequestState:
    """The state the client echoed, checked against what this request is; BadState otherwise.
    A state made for one of `siblings` (the other userOAuth targets of the route) is returned
    as it is, for that target's own check."""
    if not is_gateway_state(text) or len(str(text)) > 4096:
        raise BadState("requestState is not one this gateway issued")
    sealed = str(text).removeprefix(STATE_PREFIX)
    try:
        fields = orjson.loads(unseal(base64.urlsafe_b64decode(sealed.encode("ascii")), _STATE_AAD))
        state = RequestState(
            fields["e"], fields["i"], fields["s"], fields["b"], fields["d"], float(fields["x"])
        )
    except (SealError, ValueError, KeyError, TypeError, binascii.Error):
        raise BadState("requestState is not one this gateway issued") from None
    if (state.issuer, state.subject) != (expected.issuer, expected.subject):
        raise BadState("requestState was issued to another user")
    if state.backend in siblings and state.backend != expected.backend:
        return state
    if state.backend != expected.backend or state.digest != expected.digest:
        raise BadState("requestState was issued for another request; retry it as it was")
    if now > state.expires:
        raise BadState("requestState has expired; send the request again without it")
    return state
