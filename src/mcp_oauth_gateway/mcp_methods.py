"""MCP's methods as the gateway reads them: their names, and which item each names or lists.

One table for every stage that reads MCP messages (tool authorization in `dataplane`, federation
in `proxy`, users' upstream tokens in `useroauth`), so that a method they judge, route or answer
is the same method to all of them. A leaf, like `mcp_headers`."""

from __future__ import annotations

INITIALIZE = "initialize"
INITIALIZED = "notifications/initialized"
PING = "ping"
SET_LOG_LEVEL = "logging/setLevel"
CALL_TOOL = "tools/call"
GET_PROMPT = "prompts/get"
READ_RESOURCE = "resources/read"
SUBSCRIBE = "resources/subscribe"
UNSUBSCRIBE = "resources/unsubscribe"
COMPLETION = "completion/complete"
# 2026-07-28: what a server offers, asked without a session.
DISCOVER = "server/discover"
# 2026-07-28: a stream of the notifications (resource updates among them) a client asks for.
LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
UPDATED = "notifications/resources/updated"
CANCELLED = "notifications/cancelled"
PROGRESS = "notifications/progress"
CREATE_ELICITATION = "elicitation/create"
ELICITATION_COMPLETE = "notifications/elicitation/complete"
# What every notification's method begins with.
NOTIFICATIONS = "notifications/"

# method -> (the kind of item it names, as CEL sees it: mcp.<kind>.…, the params field naming it)
ITEMS: dict[str, tuple[str, str]] = {
    CALL_TOOL: ("tool", "name"),
    GET_PROMPT: ("prompt", "name"),
    READ_RESOURCE: ("resource", "uri"),
    # A subscription delivers the resource's updates.
    SUBSCRIBE: ("resource", "uri"),
    UNSUBSCRIBE: ("resource", "uri"),
}
# `completion/complete` names its item in `params.ref`: ref type -> (kind, the ref field naming it)
REFERENCES: dict[str, tuple[str, str]] = {
    "ref/prompt": ("prompt", "name"),
    "ref/resource": ("resource", "uri"),
}
# list method -> (result field holding the items, their kind, the item field naming each)
LISTS: dict[str, tuple[str, str, str]] = {
    "tools/list": ("tools", "tool", "name"),
    "prompts/list": ("prompts", "prompt", "name"),
    "resources/list": ("resources", "resource", "uri"),
    "resources/templates/list": ("resourceTemplates", "resource", "uriTemplate"),
}
# 2026-07-28: method -> the params field the `Mcp-Name` header mirrors.
NAMED_BY: dict[str, str] = {
    method: ITEMS[method][1] for method in (CALL_TOOL, GET_PROMPT, READ_RESOURCE)
}
# 2026-07-28: the methods a server may answer with `input_required` (a request for input first).
INPUT_METHODS = frozenset({CALL_TOOL, GET_PROMPT, READ_RESOURCE})
# Methods of the session era the 2026-07-28 wire removed: a server answers them as unknown.
SESSION_ONLY = frozenset({INITIALIZE, PING, SET_LOG_LEVEL, SUBSCRIBE, UNSUBSCRIBE})
