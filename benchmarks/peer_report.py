"""The peers benchmark's Markdown report: the machine, the table (each proxy at each connection
count: req/s, p50, p99, CPU µs per request, errors), what each proxy refused, and how the three
differ."""

from __future__ import annotations

import argparse
import os
import platform
from datetime import UTC, datetime

from measurements import Result
from peer_servers import VARIANTS
from processes import LOAD_CORE, SERVER_CORE
from report import cpu_model, interpreter, versions

NAMES = {"gateway": "our gateway", "mcp-proxy": "mcp-proxy", "haproxy": "HAProxy"}

DIFFERENCES = {
    "gateway": (
        "**Our gateway** (one worker, its defaults but `--token-cache-entries`): the JWKS "
        'inline; the route rule `"mcp-agent" in jwt.groups` and the tool rule '
        '`mcp.tool.name == "add"` (`spec.backend.mcp.authorization`); a denied call is answered '
        "200 with JSON-RPC -32602 and never reaches the backend. It relays the backend's "
        "session and bytes. It remembers verified tokens, so one token costs a lookup after the "
        "first request: the row *a new token per request* (it remembers half the tokens it is "
        "sent, so every request is a miss) is the one that pays an RS256 check every time, as "
        "the other two always do. It writes an access log line per request (its default; the "
        "other two log nothing per request)."
    ),
    "mcp-proxy": (
        '**mcp-proxy** (`[auth] type = "jwt"`, RBAC): it fetches the keys from a JWKS URL (the '
        "backend serves it) and checks signature, `iss`, `aud` and `exp` on every request, with "
        "no cache; a token without `exp` passes. Besides the configured audience it requires "
        "its own URL (`http://127.0.0.1:PORT`, the MCP resource) in `aud`, so it is configured "
        "with that one audience and its tokens carry it instead of `mcp-bench` (the tokens "
        "differ in that claim only). It terminates MCP: it answers `initialize` with a "
        "session of its own, calls the backend in its own session, names tools `bench/add` "
        "(the prefix stripped before the backend) and re-encodes every answer. Its tool rule "
        "is a role (`allow_tools = "
        '["bench/add"]`) given by `[auth.role_mapping]` on the claim `groups`; the mapping reads '
        "a claim as one string (or space-separated words), so a list claim matches only as its "
        "whole JSON text: *a member of mcp-agent* cannot be said, and the mapping names this "
        'token\'s list, `["mcp-agent","users","admins"]`. A caller with any other list '
        "maps to no role and is refused (`default_deny = true`): stricter than a membership "
        "test, never looser. Metrics, audit and access logs are off (its defaults); "
        '`log_level = "info"`, its documented default, is written out: without an '
        "`[observability]` table 0.6.0 leaves the level empty and logs every backend request "
        "at DEBUG."
    ),
    "haproxy": (
        "**HAProxy** (`jwt_verify`, one thread; `benchmarks/configs.py`): the public key as a "
        "PEM file, `alg` RS256, signature, `iss`, `aud`, `exp` (required) on every request, "
        "the group as `$.groups[0]` (the first only), and the tool rule on the body read whole "
        "(`option http-buffer-request`, `json_query` of `$.method` and `$.params.name`). It "
        "relays the backend's session and bytes and knows nothing else of MCP: a body naming "
        "the tool twice passes its rule by the first name and reaches the backend by the "
        "second."
    ),
}


def _title(args: argparse.Namespace) -> str:
    mode = " (smoke run: numbers are meaningless)" if args.smoke else ""
    mode = mode or (" (quick run: one short round)" if args.quick else "")
    return f"# Beside the peers, {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}{mode}"


def _header(args: argparse.Namespace) -> list[str]:
    """The title, the machine, and what was measured how."""
    return [
        _title(args),
        "",
        f"Machine: {os.cpu_count()} cores, {cpu_model()}, Linux {platform.release()}, a shared "
        "VM: other work ran on it, so req/s and latencies move from run to run; the CPU time "
        "each proxy spends per request moves least, and is the figure to compare. Python "
        f"{platform.python_version()} ({interpreter()}) for the gateway and the backend. "
        f"Load average (1 min) at the start {args.load_start:.1f}, at the end "
        f"{os.getloadavg()[0]:.1f}.",
        "",
        f"Each proxy alone on core {SERVER_CORE} (the others idle beside it), wrk -t1 and the "
        f"MCP backend (`benchmarks/peers_backend.py`) on core {LOAD_CORE}; wrk "
        f"{args.duration:g} s after {args.warmup:g} s warm-up per cell; {args.rounds} "
        "interleaved round(s), the order shifted each round; the round of median req/s is "
        "shown (range over the rounds); CPU µs/req is the proxy process's user + system CPU "
        "time over the requests wrk counted, the median over the rounds (range). Errors: "
        "non-2xx answers, socket errors (an answer later than 10 s included) and 200s without "
        "a JSON-RPC result, over all rounds.",
        "",
        "The work, the same for every proxy: `POST` of a JSON-RPC `tools/call` of `add` with "
        "an 800-byte RS256 token, in an MCP session opened through the proxy beforehand "
        "(`initialize`, then `notifications/initialized`; every request carries its "
        "`Mcp-Session-Id`, all connections share it); a tool rule lets the caller's group "
        "call `add` and not `delete`. The backend gives sessions, as stateful MCP servers do "
        "(mcp-proxy's client sends a backend that gives none one request at a time).",
    ]


def _table(results: list[Result]) -> list[str]:
    """The results: one row per proxy and connection count."""
    lines = [
        "",
        "| proxy | connections | req/s (range) | p50 ms | p99 ms | CPU µs/req (range) "
        "| backend CPU µs/req | peak RSS MB | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = [v.label for variants in VARIANTS.values() for v in variants]
    order = sorted(
        results, key=lambda r: (labels.index(r.scenario.split("|")[0]), r.extra["conns"])
    )
    for r in order:
        x = r.extra
        lines.append(
            f"| {r.scenario.split('|')[0]} | {x['conns']:.0f} | {r.rps:,.0f} "
            f"({x.get('min_rps', r.rps):,.0f}-{x.get('max_rps', r.rps):,.0f}) | {r.p50:.2f} "
            f"| {r.p99:.2f} | **{x['median_cpu_us']:.0f}** ({x['min_cpu_us']:.0f}-"
            f"{x['max_cpu_us']:.0f}) | {x.get('backend_cpu_us', 0):.0f} | {r.rss:.0f} "
            f"| {x['all_errors']:.0f} |"
        )
    return lines


def _enforcement(cells: dict[str, dict[str, str]], names: list[str]) -> list[str]:
    """What each proxy did with each probe, checked before measuring."""
    lines = [
        "",
        "Checked before measuring, every round (`benchmarks/peer_checks.py`): a refused request "
        "must not reach the backend (its own count of calls says what arrived); the last two "
        "rows are reported, not required.",
        "",
        "| request | " + " | ".join(NAMES[n] for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for probe, by in cells.items():
        lines.append(f"| {probe} | " + " | ".join(by.get(n, "") for n in names) + " |")
    return lines


def peers_report(
    args: argparse.Namespace,
    results: list[Result],
    cells: dict[str, dict[str, str]],
    mcp_proxy_version: str | None,
) -> str:
    """The Markdown report."""
    lines = [*_header(args), *_table(results), *_enforcement(cells, args.proxies)]
    lines += ["", "How each is configured, and where they differ:", ""]
    lines += [f"- {DIFFERENCES[name]}" for name in args.proxies]
    found = versions()
    ran = {k: found[k] for k in ("python", "mcp-oauth-gateway", "uvloop", "httptools", "wrk")}
    if "haproxy" in args.proxies:
        ran["haproxy"] = found["haproxy"]
    if mcp_proxy_version:
        ran["mcp-proxy"] = mcp_proxy_version
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in ran.items()), ""]
    return "\n".join(lines)
