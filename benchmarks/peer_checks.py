"""What every proxy of `benchmarks/peers.py` must do before it is measured: serve the allowed call,
and refuse a request with no token, each kind of bad token, a caller outside the group and the
tool the rule forbids, without any refused request reaching the backend (the backend's own count
of `tools/call`s says what arrived). A probe marked not required is reported, not enforced.

Also the MCP session every load runs in: `initialize` through the proxy, its `Mcp-Session-Id`
kept, `notifications/initialized` sent, as an MCP client does."""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from configs import AUDIENCE, ISSUER
from joserfc import jwt
from joserfc.jwk import RSAKey
from servers import Servers

ALLOWED, FORBIDDEN = "add", "delete"
HEADER = {"alg": "RS256", "kid": "bench", "typ": "at+jwt"}
# A tools/call naming the allowed tool, then the forbidden one: parsers differ on which counts.
REPEATED_NAME = (
    '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "{prefix}add", '
    '"name": "{prefix}delete", "arguments": {"a": 2, "b": 3}}}'
)


@dataclass(frozen=True)
class Target:
    """A proxy as the checks and the load reach it: its port, MCP path, tool namespace, the
    audience its tokens carry and the load's token."""

    name: str
    port: int
    path: str
    token: str
    prefix: str = ""
    audience: str = AUDIENCE


@dataclass(frozen=True)
class Probe:
    """One request: its token, the tool it calls (or a whole body, `{prefix}` filled in), and
    whether it must be served or refused; `required=False` is reported only."""

    name: str
    token: str | None
    tool: str = ALLOWED
    serve: bool = False
    required: bool = True
    body: str | None = None


def call_body(tool: str, request_id: int = 1) -> str:
    """A JSON-RPC `tools/call` of `tool`, as the load sends it."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": {"a": 2, "b": 3}},
        }
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _segments(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"


def probes(servers: Servers, audience: str = AUDIENCE) -> list[Probe]:
    """Every probe for a proxy whose tokens carry `audience`, the bad tokens signed (or not) as
    each name says."""
    good = {**servers.claims(0), "aud": audience}
    now = int(time.time())
    other = RSAKey.generate_key(2048, parameters={"kid": "bench", "alg": "RS256"})

    def signed(claims: dict[str, Any], key: RSAKey = servers.key) -> str:
        return jwt.encode(HEADER, claims, key)

    hs_input = _segments({**HEADER, "alg": "HS256"}, good)
    secret = servers.key.as_pem(private=False)
    hs256 = f"{hs_input}.{_b64(hmac.new(secret, hs_input.encode(), hashlib.sha256).digest())}"
    no_exp = {k: v for k, v in good.items() if k != "exp"}
    return [
        Probe("the allowed call: a member of mcp-agent calls `add`", signed(good), serve=True),
        Probe("no token", None),
        Probe("bad signature (another key, same kid)", signed(good, other)),
        Probe("expired an hour ago", signed({**good, "exp": now - 3600, "nbf": now - 7200})),
        Probe("wrong audience", signed({**good, "aud": "another-client"})),
        Probe("wrong issuer (no trailing slash)", signed({**good, "iss": ISSUER.rstrip("/")})),
        Probe("unsigned (alg none)", _segments({**HEADER, "alg": "none"}, good) + "."),
        Probe("HS256 keyed with the RSA public key", hs256),
        Probe("caller outside the group (groups: users)", signed({**good, "groups": ["users"]})),
        Probe(f"the tool the rule forbids (`{FORBIDDEN}`)", signed(good), tool=FORBIDDEN),
        Probe("a token without exp", signed(no_exp), required=False),
        Probe(
            f"`{FORBIDDEN}` behind a repeated key (name: {ALLOWED}, then {FORBIDDEN})",
            signed(good),
            required=False,
            body=REPEATED_NAME,
        ),
    ]


def post(
    target: Target, body: str, token: str | None, session: str | None = None
) -> tuple[int, dict[str, str], dict[str, Any] | None]:
    """POST one JSON-RPC message to the proxy: the status, the headers (lower-case names) and
    the JSON-RPC answer (from a JSON body or the last event of an SSE one), if any."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["Mcp-Session-Id"] = session
    conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=10)
    try:
        conn.request("POST", target.path, body.encode(), headers)
        response = conn.getresponse()
        raw = response.read().decode(errors="replace")
        found = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    lines = [line[5:] for line in raw.splitlines() if line.startswith("data:")]
    try:
        message = json.loads(lines[-1] if lines else raw)
    except ValueError:
        message = None
    return response.status, found, message if isinstance(message, dict) else None


def open_session(target: Target, token: str) -> str:
    """An MCP session through the proxy (initialize, then notifications/initialized): its id."""
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "peers-bench", "version": "1"},
        },
    }
    status, headers, message = post(target, json.dumps(hello), token)
    session = headers.get("mcp-session-id")
    if status != 200 or not message or "result" not in message or not session:
        raise RuntimeError(
            f"{target.name}: initialize answered {status} {message} without a session id"
        )
    done = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    status, _, _ = post(target, done, token, session)
    if status not in (200, 202):
        raise RuntimeError(f"{target.name}: notifications/initialized answered {status}")
    return session


def backend_calls(backend_port: int) -> Counter[str]:
    """The backend's count of `tools/call`s per tool."""
    conn = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=10)
    try:
        conn.request("GET", "/calls")
        return Counter(json.loads(conn.getresponse().read()))
    finally:
        conn.close()


def judge(
    probe: Probe, status: int, message: dict[str, Any] | None, reached: Counter[str]
) -> tuple[bool, str]:
    """Whether the proxy did what the probe requires, and the report's words for what it did."""
    result = (message or {}).get("result")
    if probe.serve:
        text = (result or {}).get("content", [{}])[0].get("text") if result else None
        ok = status == 200 and text == "5" and reached == Counter({probe.tool: 1})
        return ok, "served" if ok else f"NOT served: {status} {message}, backend got {reached}"
    if not reached and result is None:
        error = (message or {}).get("error")
        code = f" JSON-RPC {error.get('code')}" if status == 200 and error else ""
        return True, f"refused ({status}{code})"
    got = ", ".join(f"`{k}`" for k in reached) or "nothing"
    return False, f"NOT refused: {status}, the backend got {got}"


def enforce(
    targets: list[Target], servers: Servers, sessions: dict[str, str], backend_port: int
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Every probe against every proxy: the report's cells (probe → proxy → what it did), and
    the required probes a proxy failed."""
    cells: dict[str, dict[str, str]] = {}
    failures = []
    for target in targets:
        for probe in probes(servers, target.audience):
            body = (probe.body or call_body("{prefix}" + probe.tool)).replace(
                "{prefix}", target.prefix
            )
            before = backend_calls(backend_port)
            status, _, message = post(target, body, probe.token, sessions[target.name])
            reached = backend_calls(backend_port) - before
            ok, cell = judge(probe, status, message, reached)
            cells.setdefault(probe.name, {})[target.name] = cell if ok else f"**{cell}**"
            if not ok and probe.required:
                failures.append(f"{target.name}, {probe.name}: {cell}")
    return cells, failures
