"""The audit trail's vocabulary (`serve --audit-log`): one record per request, carried in the
ASGI scope under `AUDIT_KEY`, filled in by the stage that decides and turned into one JSON
object by the entry point once the answer starts.

A stage calls one helper at its decision point (`deny`, `allow`, `mcp_request`, `event`,
`client`); each does nothing when the audit trail is off (no record in the scope), so the
stages cost one dict lookup more on the paths they decide on, and nothing else.

Decisions: `deny` names the stage that refused (a name of `serving.stages.ENTRY` or `PIPELINE`,
or `CONNECTION` or `GATEWAY` when none decided) and why; the first refusal recorded is the one
that answered. `allow` names the stage that answered: `reverse-proxy` when the request passed
every stage to the backend, or the stage that answered it itself (the OAuth endpoints, a CORS
preflight, the Broker's pages).
Nothing here ever holds a token, a code or a secret: stages hand over their reasons in words,
every value is capped in length, and a JWT's signature is removed wherever one appears."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

import orjson

from .asgi import AUDIT_KEY, ASGIApp, Receive, Scope, Send

ALLOW = "allow"
DENY = "deny"
# Lines no stage decided: the client went away first (`connection`), or the gateway answered
# without a stage's word (`gateway`: an error of its own).
CONNECTION = "connection"
GATEWAY = "gateway"
# Longest value written for a field taken from a request or a token (a reason: longer).
MAX_VALUE = 256
MAX_REASON = 1024
_MCP_KINDS = ("tool", "prompt", "resource")


# A JWS compact JWT: a base64url JSON header (`{"` is `eyJ`), payload and signature. The
# signature is what makes it a credential; without it the rest still says what was sent. Only
# where a run of base64url begins (the lookbehind), and each part taken whole (possessive): the
# search is linear, as it must be on what a request chose.
_JWT = re.compile(r"(?<![A-Za-z0-9_-])(eyJ[A-Za-z0-9_-]*+\.[A-Za-z0-9_-]*+)\.[A-Za-z0-9_-]++")
SIGNATURE_REMOVED = "[signature removed]"


def _unsigned(text: str) -> str:
    """`text` with the signature of any JWT in it removed."""
    return _JWT.sub(r"\1." + SIGNATURE_REMOVED, text) if "eyJ" in text else text


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def capped(value: object, limit: int = MAX_VALUE) -> str:
    """`value` as text of at most `limit` characters (cut ones end with "…"), with the
    signature of any JWT in it removed: a token sent where none belongs (a path, a tool name)
    or quoted in a refusal is never written whole. Cut before it is searched: a value can be
    as long as a request body."""
    text = value if isinstance(value, str) else str(value)
    return _cut(_unsigned(_cut(text, limit)), limit)


# What an identifier keeps of its end when cut: what sets two ids apart is often there (a DCR
# client id's random part and signature follow the name and redirect URIs it carries).
ID_TAIL = 64
TAIL_ROOM = 16384


def capped_id(value: object) -> str:
    """An identifier (a client id, `iss`, `sub`, a tool or resource) as text of at most
    MAX_VALUE characters: a longer one keeps its head and its last ID_TAIL characters, so two
    that differ only at the end are still told apart."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= MAX_VALUE:
        return capped(text)
    head = _unsigned(text[: MAX_VALUE - ID_TAIL - 1])[: MAX_VALUE - ID_TAIL - 1]
    # The end searched with room before it: a JWT the value ends in keeps no part of its
    # signature (a longer one than the room would have to be twice the longest we accept).
    tail = _unsigned(text[-TAIL_ROOM:])[-ID_TAIL:]
    return head + "…" + tail


@dataclass(slots=True)
class AuditRecord:
    """What the stages decided about one request (one per request, in its scope)."""

    decision: str | None = None
    stage: str | None = None
    reason: str | None = None
    # method, and tool / prompt / resource and target when the request names one.
    mcp: dict[str, str] | None = None
    # A Broker event (`client-registered`, `token-issued`, ...), and the OAuth client it is for.
    event: str | None = None
    client_id: str | None = None
    # What an `allow` line's reason adds to the stages passed (`note`): the rule that let the
    # item through, a token refused in Permissive mode.
    notes: list[str] | None = None
    # Who signed in (a Broker sign-in): `iss` and `sub` from the provider's token response.
    user: dict[str, str] | None = None
    # The thumbprint of the key a DPoP-bound call's proof was signed with (its token's cnf.jkt).
    dpop_jkt: str | None = None


def deny(scope: Scope, stage: str, reason: str) -> None:
    """Record that `stage` refused the request because of `reason` (the first refusal wins)."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None and record.decision != DENY:
        record.decision = DENY
        record.stage = stage
        record.reason = reason


def allow(scope: Scope, stage: str, reason: str | None = None) -> None:
    """Record that `stage` answered the request itself, or passed it to the backend (a refusal
    recorded before or after stands)."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None and record.decision is None:
        record.decision = ALLOW
        record.stage = stage
        record.reason = reason


def mcp_request(
    scope: Scope,
    method: str,
    kind: str | None = None,
    name: str | None = None,
    target: str | None = None,
) -> None:
    """Record the MCP message a request carries: its method, the item it names (`kind`: tool,
    prompt or resource) and, on a federated backend, the target it goes to."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is None:
        return
    mcp = {"method": capped(method)}
    if kind in _MCP_KINDS and name is not None:
        mcp[kind] = capped_id(name)  # resource URIs differ at their end, as often as not
    if target is not None:
        mcp["target"] = capped_id(target)
    record.mcp = mcp


def event(scope: Scope, name: str, client_id: str | None = None, detail: str | None = None) -> None:
    """Record a Broker event (the last one recorded names the request's line); `detail`
    becomes the reason of an answer no stage refused."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None:
        record.event = name
        if client_id:
            record.client_id = capped_id(client_id)
        if detail is not None and record.decision != DENY:
            record.reason = detail


def dpop_bound(scope: Scope, jkt: str) -> None:
    """Record that the call's token is DPoP-bound to key `jkt` and its proof held."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None:
        record.dpop_jkt = capped(jkt)


def client(scope: Scope, client_id: str) -> None:
    """Record the OAuth client a Broker request is made by (or for)."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None and client_id:
        record.client_id = capped_id(client_id)


def signed_in(scope: Scope, tokens: object) -> None:
    """Record who signed in (a Broker sign-in, a code redeemed, a refresh): `iss` and `sub` of
    the ID token in the provider's token response, else of its access token when that is a
    JWT. The gateway got the response from the provider itself, over its own connection (as
    OpenID Connect Core §3.1.3.7 allows for an ID token); the tokens are never written."""
    acting_user(scope, identity(tokens))


def identity(tokens: object) -> dict[str, str] | None:
    """`iss` and `sub` (capped) of the ID token in a provider's token response, else of its
    access token when that is a JWT; None when neither names a subject."""
    if not isinstance(tokens, dict):
        return None
    for name in ("id_token", "access_token"):
        claims = _payload(tokens.get(name))
        if claims is not None and claims.get("sub") is not None:
            return {k: capped_id(claims[k]) for k in ("iss", "sub") if claims.get(k)}
    return None


def acting_user(scope: Scope, who: dict[str, str] | None) -> None:
    """Record the user a Broker request acts for (a stored sign-in's, when the request itself
    carries no token that names one: a reused or revoked refresh token)."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None and who:
        record.user = dict(who)


def _payload(token: object) -> dict[str, object] | None:
    """The payload of a JWS compact token, undecoded nor checked beyond being a JSON object."""
    if not isinstance(token, str) or token.count(".") != 2:
        return None
    segment = token.split(".")[1]
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, binascii.Error):  # orjson.JSONDecodeError is a ValueError
        return None
    return claims if isinstance(claims, dict) else None


def failure(exc: BaseException) -> str:
    """The reason of a request the gateway failed to handle: the error's type, never its
    message (a connection error may quote a URL with its password)."""
    return f"the gateway failed to handle this request: {type(exc).__name__}"


def note(scope: Scope, text: str) -> None:
    """Add to what an `allow` line's reason says (which rule let the item through, say)."""
    record: AuditRecord | None = scope.get(AUDIT_KEY)
    if record is not None:
        if record.notes is None:
            record.notes = [text]
        else:
            record.notes.append(text)


def enabled(scope: Scope) -> bool:
    """Whether the request is audited (worth working out a reason that costs something)."""
    return AUDIT_KEY in scope


class Answering:
    """Wraps the stage that answers (the reverse proxy, fail-closed): reaching it is the
    pipeline's `allow`, unless that stage then refuses itself."""

    __slots__ = ("app", "name")

    def __init__(self, name: str, app: ASGIApp):
        self.name = name
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        record: AuditRecord | None = scope.get(AUDIT_KEY)
        if record is not None and record.decision is None:
            record.decision = ALLOW
            record.stage = self.name
        await self.app(scope, receive, send)


def caller_of(
    claims: object, client_id: str | None, user: dict[str, str] | None = None
) -> dict[str, str] | None:
    """`iss`, `sub` and `client_id` (the `azp` or `client_id` claim) of a verified token; for a
    Broker request without one, the user who signed in (`signed_in`) and the OAuth client.
    None: an anonymous caller."""
    out: dict[str, str] = dict(user) if user is not None else {}
    if isinstance(claims, dict):
        for field in ("iss", "sub"):
            value = claims.get(field)
            if value is not None:
                out[field] = capped_id(value)
        holder = claims.get("azp", claims.get("client_id"))
        if holder is not None:
            out["client_id"] = capped_id(holder)
    if client_id and "client_id" not in out:
        out["client_id"] = client_id
    return out or None


def decision_of(record: AuditRecord, status: int) -> tuple[str, str | None, str | None]:
    """(decision, stage, reason) of a request whose answer had `status` (0: none was sent).
    A request no stage spoke for is a refusal when the gateway refused it or answered nothing:
    a request is `allow` only when a stage said so."""
    if record.decision is not None:
        return record.decision, record.stage, record.reason
    if status == 0:
        return DENY, CONNECTION, "the client went away before the gateway answered"
    if status < 400:
        return ALLOW, GATEWAY, f"answered {status} by the gateway"
    return DENY, GATEWAY, f"answered {status} by the gateway"
