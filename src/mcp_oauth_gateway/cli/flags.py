"""The command line: every command's flags, with their help."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..asgi import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_TOKEN_CACHE_ENTRIES,
)
from ..provider_kinds import FLAVOURS, ProviderKind
from .common import LOCAL_CIMD_ENV, TRUST_ENV, env_flag
from .user_token_flags import add_user_token_flags

if TYPE_CHECKING:
    # argparse names the type of `argparse.ArgumentParser.add_subparsers()`'s result only
    # privately.
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


class _Flavours:
    """`--flavour`'s choices: the words, in this order, in help and refusals; what they hold
    is the kinds the words parse to (`_flavour`)."""

    def __init__(self, *kinds: ProviderKind):
        self.kinds = kinds

    def __contains__(self, value: object) -> bool:
        # A kind is equal to its configuration spelling ("Keycloak"): that word is no flavour.
        return isinstance(value, ProviderKind) and value in self.kinds

    def __iter__(self) -> Iterator[str]:
        return (kind.flavour for kind in self.kinds)


def _flavour(word: str) -> ProviderKind | str:
    """The kind a `--flavour` word names; another word stays as it is, for `_Flavours` to refuse
    in argparse's own words."""
    return FLAVOURS.get(word, word)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-oauth-gateway",
        description="OAuth 2.0 gateway for MCP servers (resources: Gateway, HTTPRoute, "
        "GatewayBackend, GatewayPolicy, Service).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_parser(commands)
    _check_parser(commands)
    from ..idp.flags import add_parsers

    add_parsers(commands)
    from .grants import add_parsers as add_grants_parsers

    add_grants_parsers(commands)
    _demo_parser(commands)
    _dev_idp_parser(commands)
    return parser


def _resource_files_flag(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument(
        "-f",
        "--file",
        dest="files",
        action="append",
        required=required,
        metavar="PATH",
        help="YAML file or directory of resources (repeatable)",
    )


def _serve_parser(commands: Commands) -> None:
    from ..kube.options import add_flags

    serve = commands.add_parser(
        "serve",
        help="serve the gateway described by resource files (-f) or by a cluster's API "
        "server (--kubeconfig, --in-cluster)",
    )
    _resource_files_flag(serve, required=False)
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--trust-forwarded-headers",
        action="store_true",
        default=env_flag(TRUST_ENV),
        help="take scheme and host from X-Forwarded-Proto/X-Forwarded-Host "
        f"(only behind a proxy you control; env {TRUST_ENV}=1)",
    )
    serve.add_argument(
        "--allow-local-client-metadata",
        action="store_true",
        default=env_flag(LOCAL_CIMD_ENV),
        help="broker mode, local use only: allow client metadata documents on "
        f"http and private/loopback addresses (env {LOCAL_CIMD_ENV}=1)",
    )
    serve.add_argument(
        "--watch-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often to look for changed resource files inotify does not report "
        "(default 1; 0 turns watching off)",
    )
    _serve_operation_flags(serve)
    _serve_audit_flags(serve)
    _serve_limit_flags(serve)
    add_user_token_flags(serve)
    add_flags(serve)


def _serve_operation_flags(serve: argparse.ArgumentParser) -> None:
    _serve_admin_flags(serve)
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="processes accepting on the same sockets (default 1; use the "
        "number of cores to use every core)",
    )
    serve.add_argument(
        "--grace-period",
        default="30",
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests may run (default 30): readiness says "
        "draining at once, no new connection is taken, event streams end where clients resume "
        "them elsewhere (docs/operations/rolling-restarts.md)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument(
        "--tracing",
        default="off",
        choices=["off", "otlp"],
        help="otlp: one OpenTelemetry span per request, exported over OTLP/HTTP "
        "as set by the OTEL_EXPORTER_OTLP_* variables (needs the otel extra)",
    )
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one JSON object per line, each request with a request_id "
        "(the caller's X-Request-Id when well-formed, else a new one; with --audit-log, "
        "only a trusted proxy's; forwarded to the backend and returned in the response)",
    )


def _serve_admin_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--admin-port",
        "--status-port",
        dest="status_port",
        default=None,
        metavar="PORT",
        help="admin listener on --admin-host:PORT: /status (policy conditions, "
        "last reload error), /metrics (Prometheus), /config (every route and rule, secrets "
        "redacted), /healthz, /readyz",
    )
    serve.add_argument(
        "--admin-host",
        default=None,
        metavar="HOST",
        help="address of the admin listener (default 127.0.0.1: /config and /status describe "
        "every route; on a pod's address only behind a NetworkPolicy, see docs/kubernetes.md)",
    )
    serve.add_argument(
        "--health-port",
        default=None,
        metavar="PORT",
        help="health listener on --health-host:PORT: /healthz and /readyz only, which tell "
        "nothing of the configuration (for a pod's probes)",
    )
    serve.add_argument(
        "--health-host",
        default=None,
        metavar="HOST",
        help="address of the health listener (default 127.0.0.1; a pod's probes need the "
        "pod's address, e.g. 0.0.0.0)",
    )


def _serve_audit_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--audit-log",
        default=None,
        metavar="PATH",
        help="the audit trail: one JSON line per request (allow or deny, the stage and why, "
        "the caller, the MCP method and tool) and per Broker event, appended to PATH "
        "(reopened on SIGHUP, for log rotation) or - for standard output; each request "
        "gets an id of the gateway's own (X-Request-Id), a caller's kept only from a proxy "
        "trusted with --trust-forwarded-headers",
    )
    serve.add_argument(
        "--audit-required",
        action="store_true",
        help="with --audit-log: answer 503 while the audit log cannot be written, rather "
        "than serve requests unaudited (default: serve, and log and count the failure)",
    )


def _serve_limit_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--max-header-bytes",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        metavar="N",
        help=f"larger request headers get 431 (default {DEFAULT_MAX_HEADER_BYTES})",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"larger request bodies get 413 (default {DEFAULT_MAX_BODY_BYTES})",
    )
    # Read as text and checked in cmd_serve, so a bad value gets one line naming the flag.
    serve.add_argument(
        "--header-timeout",
        default=str(DEFAULT_HEADER_TIMEOUT),
        metavar="SECONDS",
        help="close a connection whose request head is not complete this long "
        "after it opened or the request began; 408 if part of one arrived "
        f"(default {DEFAULT_HEADER_TIMEOUT:g})",
    )
    serve.add_argument(
        "--idle-timeout",
        default=str(DEFAULT_IDLE_TIMEOUT),
        metavar="SECONDS",
        help="close a connection whose request body stops arriving for this "
        "long, or that waits this long for its next request (default "
        f"{DEFAULT_IDLE_TIMEOUT:g}; a streamed response is never cut)",
    )
    serve.add_argument(
        "--max-connections",
        default=None,
        metavar="N",
        help="open client connections per process; more are answered 503 and "
        "closed (default: what the file-descriptor limit leaves room for, "
        "after raising it to the hard limit)",
    )
    serve.add_argument(
        "--token-cache-entries",
        default=str(DEFAULT_TOKEN_CACHE_ENTRIES),
        metavar="N",
        help="verified tokens (and authorization decisions) the process remembers over all "
        "its routes, the least recently used forgotten first; about 2 KB an entry "
        f"(default {DEFAULT_TOKEN_CACHE_ENTRIES})",
    )


def _check_parser(commands: Commands) -> None:
    check = commands.add_parser(
        "check", help="validate resources, fetch keysets and discovery, print policy conditions"
    )
    _resource_files_flag(check)
    check.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="time limit for each fetch (default 10)",
    )
    check.add_argument("--output", choices=["text", "json"], default="text")
    add_user_token_flags(check)


def _demo_parser(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="run everything locally: dev identity provider, demo MCP servers, gateway",
        description="Starts the dev identity provider, provisions it, starts a demo MCP server, "
        "a third-party MCP server with its own authorization server (a second dev identity "
        "provider), and the gateway in Broker mode in front of both (the second through "
        "userOAuth), and prints the MCP URLs and a user to sign in with. For development "
        "only. Ctrl-C stops everything; a second run reuses the state in --dir.",
    )
    demo.add_argument(
        "--flavor",
        "--flavour",
        dest="kind",
        type=_flavour,
        default="authentik",
        choices=_Flavours(ProviderKind.AUTHENTIK, ProviderKind.KEYCLOAK),
    )
    demo.add_argument(
        "--dir",
        default=".mcp-oauth-gateway-demo",
        help="state, generated resources and logs (default ./.mcp-oauth-gateway-demo)",
    )
    demo.add_argument("--port", type=int, default=8080, help="gateway port (default 8080)")
    demo.add_argument("--idp-port", type=int, default=9000)
    demo.add_argument("--backend-port", type=int, default=8000)
    demo.add_argument(
        "--notes-port", type=int, default=8001, help="the notes MCP server (default 8001)"
    )
    demo.add_argument(
        "--notes-idp-port",
        type=int,
        default=9001,
        help="the notes server's own authorization server (default 9001)",
    )


def _dev_idp_parser(commands: Commands) -> None:
    dev = commands.add_parser(
        "dev-idp",
        help="run the embedded dev identity provider (development and tests only)",
        description="An OpenID provider that speaks the Keycloak or authentik admin API, for "
        "development and tests ONLY: weak default credentials, no hardening. "
        "Keycloak admin: admin / $DEV_IDP_ADMIN_PASSWORD (default admin); "
        "authentik bootstrap token: $DEV_IDP_BOOTSTRAP_TOKEN; authentik seed users' "
        "password: $DEV_IDP_USER_PASSWORD.",
    )
    dev.add_argument(
        "--flavor",
        "--flavour",
        dest="kind",
        type=_flavour,
        required=True,
        choices=_Flavours(ProviderKind.KEYCLOAK, ProviderKind.AUTHENTIK),
    )
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument(
        "--port", type=int, default=None, help="default 8180 (keycloak) or 9000 (authentik)"
    )
    dev.add_argument("--state", metavar="FILE", help="persist state to this JSON file")
    dev.add_argument(
        "--user",
        dest="seed_users",
        action="append",
        default=[],
        metavar="NAME",
        help="authentik: a user that exists before provisioning (repeatable)",
    )
    dev.add_argument(
        "--access-token-ttl",
        type=int,
        default=None,
        metavar="SECONDS",
        help="access-token lifetime (keycloak default 60, authentik 3600)",
    )
    dev.add_argument(
        "--migrations-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="authentik: answer 503 (Retry-After) this long after the first API request",
    )
    dev.add_argument(
        "--worker-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="authentik: lookups stay empty this long after migrations",
    )
