"""The `mcp-oauth-gateway` command: `serve` and `check`."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from .asgi import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
    Limits,
)
from .controlplane import ControlPlane, Deployment, Snapshot, build_snapshot
from .controlplane.fetch import FetchError
from .controlplane.jwks import RemoteKeyset
from .idp.cli import FACADE_CLIENTS
from .resources import load_paths
from .serving.options import ServeOptions, Watch
from .urls import shown_url

EXIT_INVALID = 2
TRUST_ENV = "MCP_OAUTH_GATEWAY_TRUST_FORWARDED"
LOCAL_CIMD_ENV = "MCP_OAUTH_GATEWAY_ALLOW_LOCAL_CLIENT_METADATA"
REDIS_ENV = "MCP_OAUTH_GATEWAY_REDIS_URL"
FACADE_HINT = (
    f"Facade mode serves only {FACADE_CLIENTS}; set mcp.authorizationServerMode: Broker to "
    "serve them all"
)


if TYPE_CHECKING:
    from .kube.controller import ControllerOptions

    # argparse names the type of `add_subparsers()`'s result only privately.
    Commands = argparse._SubParsersAction[argparse.ArgumentParser]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-oauth-gateway",
        description="OAuth 2.0 gateway for MCP servers (resources: Gateway, HTTPRoute, "
        "GatewayBackend, GatewayPolicy, Service).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_parser(commands)
    _check_parser(commands)
    from .idp.cli import add_parsers

    add_parsers(commands)
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
    from .kube.options import add_flags

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
        default=_env_flag(TRUST_ENV),
        help="take scheme and host from X-Forwarded-Proto/X-Forwarded-Host "
        f"(only behind a proxy you control; env {TRUST_ENV}=1)",
    )
    serve.add_argument(
        "--allow-local-client-metadata",
        action="store_true",
        default=_env_flag(LOCAL_CIMD_ENV),
        help="broker mode, local use only: allow client metadata documents on "
        f"http and private/loopback addresses (env {LOCAL_CIMD_ENV}=1)",
    )
    serve.add_argument(
        "--watch-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="how often to look for changed resource files (default 1; 0 turns watching off)",
    )
    _serve_operation_flags(serve)
    _serve_limit_flags(serve)
    add_flags(serve)


def _serve_operation_flags(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--admin-port",
        "--status-port",
        dest="status_port",
        type=int,
        default=None,
        metavar="PORT",
        help="admin listener on --admin-host:PORT: /status (policy conditions, "
        "last reload error), /metrics (Prometheus), /healthz, /readyz, "
        "/config (secrets redacted)",
    )
    serve.add_argument(
        "--admin-host",
        default="127.0.0.1",
        help="address of the admin listener (default 127.0.0.1; a pod's probes need the "
        "pod's address, e.g. 0.0.0.0: then keep the port out of every Service)",
    )
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
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests may run (default 30)",
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
        "(the caller's X-Request-Id when well-formed, else a new one; "
        "forwarded to the backend and returned in the response)",
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


def _demo_parser(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="run everything locally: dev identity provider, demo MCP server, gateway",
        description="Starts the dev identity provider, provisions it, starts a demo MCP server "
        "and the gateway in Broker mode, and prints the MCP URL and a user to sign "
        "in with. For development only. Ctrl-C stops everything; a second run "
        "reuses the state in --dir.",
    )
    demo.add_argument(
        "--flavor",
        "--flavour",
        dest="flavour",
        default="authentik",
        choices=["authentik", "keycloak"],
    )
    demo.add_argument(
        "--dir",
        default=".mcp-oauth-gateway-demo",
        help="state, generated resources and logs (default ./.mcp-oauth-gateway-demo)",
    )
    demo.add_argument("--port", type=int, default=8080, help="gateway port (default 8080)")
    demo.add_argument("--idp-port", type=int, default=9000)
    demo.add_argument("--backend-port", type=int, default=8000)


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
        "--flavor", "--flavour", dest="flavour", required=True, choices=["keycloak", "authentik"]
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


def _load(files: Sequence[str], deployment: Deployment | None = None) -> Snapshot:
    return build_snapshot(load_paths(files), deployment)


def _print_problems(snapshot: Snapshot, stream: TextIO = sys.stderr) -> None:
    for error in snapshot.errors:
        print(f"error: {error}", file=stream)
    for report in snapshot.policies:
        for condition in report.conditions:
            if not condition.status:
                print(
                    f"error: {report.source}: GatewayPolicy {report.key}: {condition.type}="
                    f"False ({condition.reason}): {condition.message}",
                    file=stream,
                )


class _Refused(Exception):
    """`serve` cannot start; the message is the one line to print."""


def _serve_options(args: argparse.Namespace) -> ServeOptions:
    """The `serve` flags as ServeOptions; _Refused naming a bad flag."""
    from .connections import parse_count, parse_seconds

    try:
        limits = Limits(
            max_header_bytes=args.max_header_bytes,
            max_body_bytes=args.max_body_bytes,
            header_timeout=parse_seconds("--header-timeout", args.header_timeout),
            idle_timeout=parse_seconds("--idle-timeout", args.idle_timeout),
            max_connections=None
            if args.max_connections is None
            else parse_count("--max-connections", args.max_connections),
        )
    except ValueError as exc:
        raise _Refused(str(exc)) from exc
    return ServeOptions(
        host=args.host,
        trust_forwarded=args.trust_forwarded_headers,
        grace_period=args.grace_period,
        workers=args.workers,
        log_level=args.log_level,
        log_format=args.log_format,
        limits=limits,
        status_port=args.status_port,
        admin_host=args.admin_host,
        tracing=args.tracing == "otlp",
        watch=Watch(tuple(args.files), args.watch_interval)
        if args.files and args.watch_interval > 0
        else None,
        deployment=Deployment(
            processes=args.workers,
            default_redis_url=os.environ.get(REDIS_ENV) or None,
            default_redis_hint=f"set {REDIS_ENV}",
        ),
    )


def _servable(files: Sequence[str], options: ServeOptions) -> Snapshot:
    """The resources as a snapshot that can be served; _Refused (after printing every problem)
    when they cannot."""
    snapshot = _load(files, options.deployment)
    if not snapshot.ok:
        _print_problems(snapshot)
        raise _Refused("not starting: fix the resources above and run again")
    if not snapshot.listeners:
        raise _Refused("no Gateway listener to serve; add a Gateway with spec.listeners")
    unprotected = sorted(
        {
            route.route
            for routes in snapshot.listeners.values()
            for route in routes
            if route.policy is None
        }
    )
    for route in unprotected:
        logging.getLogger("mcp_oauth_gateway").warning(
            "HTTPRoute %s is served without authentication: no GatewayPolicy targets it", route
        )
    return snapshot


def _require_tracing(options: ServeOptions) -> None:
    if options.tracing:
        from .dataplane import tracing

        try:
            tracing.require()
        except tracing.TracingUnavailable as exc:
            raise _Refused(str(exc)) from exc


def _cluster_options(
    args: argparse.Namespace, options: ServeOptions
) -> tuple[ServeOptions, ControllerOptions]:
    """Controller mode's settings; _Refused naming a bad flag."""
    from .controlplane.cluster import Cluster
    from .kube.client import ConnectError, check_kubeconfig
    from .kube.options import controller_options, replicas

    try:
        controller = controller_options(args)
        count = replicas(args)
        if controller.kubeconfig is not None:
            check_kubeconfig(controller.kubeconfig)
    except (ValueError, ConnectError) as exc:
        raise _Refused(str(exc)) from exc
    deployment = replace(
        options.deployment,
        # Unknown means several: Broker mode then needs Redis (fail closed).
        processes=count or 2,
        processes_label=None
        if count
        else "several replicas (controller mode; give --replicas 1 if only one serves)",
        default_redis_hint=f"set {REDIS_ENV}",
        cluster=Cluster(controller.controller_name, controller.cluster_domain),
    )
    return replace(options, deployment=deployment, watch=None), controller


def cmd_serve(args: argparse.Namespace) -> int:
    """Validate, then serve until SIGTERM."""
    from . import logs, server
    from .kube.options import in_cluster_mode
    from .serving.runtime import BrokerRuntime

    cluster: ControllerOptions | None = None
    try:
        options = _serve_options(args)
        logs.configure(args.log_level, args.log_format)
        _require_tracing(options)
        if in_cluster_mode(args):
            options, cluster = _cluster_options(args, options)
            snapshot = None
        elif not args.files:
            raise _Refused(
                "nothing to serve: give resource files with -f PATH, or read a cluster with "
                "--kubeconfig PATH (or --in-cluster in a pod)"
            )
        else:
            snapshot = _servable(args.files, options)
    except _Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    brokers = BrokerRuntime(args.allow_local_client_metadata, os.environ.get(REDIS_ENV) or None)
    try:
        if cluster is not None:
            return server.serve_cluster(options, cluster, brokers)
        assert snapshot is not None
        return server.serve(snapshot, options, brokers)
    except OSError as exc:
        print(
            f"error: {exc} (is another process using the port? change the Gateway listener port)",
            file=sys.stderr,
        )
        return 1


async def _check_fetches(control: ControlPlane, limit: float) -> dict[str, str | None]:
    await control.start()
    results: dict[str, str | None] = {}

    async def fetch(url: str, coro: Awaitable[object]) -> None:
        try:
            await asyncio.wait_for(coro, limit + 1)
            results[url] = None
        except (FetchError, TimeoutError) as exc:
            results[url] = str(exc) or "timed out"

    session = control.session
    assert session is not None, "ControlPlane.start() opens the session"
    try:
        jobs = [
            fetch(url, h.fetch_once(session))
            for url, h in control.keysets.items()
            if isinstance(h, RemoteKeyset)
        ]
        jobs += [fetch(url, d.fetch_now()) for url, d in control.discoveries.items()]
        await asyncio.gather(*jobs)
    finally:
        await control.stop()
    return results


def _facade_policies(snapshot: Snapshot) -> set[str]:
    return {
        route.policy.key
        for routes in snapshot.listeners.values()
        for route in routes
        if route.policy is not None
        and route.policy.mcp is not None
        and route.policy.mcp.mode == "Facade"
    }


def cmd_check(args: argparse.Namespace) -> int:
    """Print every policy's conditions; exit 0 only when all are True and keysets fetched."""
    # The table below reports every fetch failure; the fetchers' own log lines would repeat it.
    logging.getLogger("mcp_oauth_gateway").setLevel(logging.ERROR)
    snapshot = _load(args.files)
    control = ControlPlane(snapshot)
    fetches = asyncio.run(_check_fetches(control, args.timeout))
    ok = not snapshot.errors
    facade = _facade_policies(snapshot)
    policies: list[dict[str, Any]] = []
    for report in snapshot.policies:
        conditions = control.conditions(report)
        ok = ok and all(c.status for c in conditions)
        discovery = [
            {"url": shown_url(url), "error": fetches.get(url)} for url in report.discovery_urls
        ]
        entry: dict[str, Any] = {
            "policy": report.key,
            "source": report.source,
            "conditions": [c.as_dict() for c in conditions],
            "discovery": discovery,
        }
        if report.key in facade:
            entry["hint"] = FACADE_HINT
        policies.append(entry)
    if not snapshot.policies and not snapshot.errors:
        print(
            "warning: no GatewayPolicy found: every route would be served without authentication",
            file=sys.stderr,
        )
    if args.output == "json":
        json.dump(
            {"ok": ok, "errors": list(snapshot.errors), "policies": policies}, sys.stdout, indent=2
        )
        print()
    else:
        for error in snapshot.errors:
            print(f"error: {error}")
        for entry in policies:
            print(f"GatewayPolicy {entry['policy']} ({entry['source']})")
            for c in entry["conditions"]:
                print(f"  {c['type']:<13} {c['status']:<6} {c['reason']:<18} {c['message']}")
            for d in entry["discovery"]:
                state = "ok" if d["error"] is None else f"FAILED: {d['error']}"
                print(f"  discovery     {d['url']}: {state}")
            if "hint" in entry:
                print(f"  hint: {entry['hint']}")
        print("OK" if ok else "NOT OK")
    if not snapshot.ok:
        return EXIT_INVALID
    return 0 if ok else 1


def cmd_dev_idp(args: argparse.Namespace) -> int:
    """Run the dev identity provider until interrupted."""
    from pathlib import Path

    import uvicorn

    from . import logs
    from .devidp import BANNER, DevIdpSettings, create_app

    logs.configure("info")
    keycloak = args.flavour == "keycloak"
    port = args.port if args.port is not None else (8180 if keycloak else 9000)
    settings = DevIdpSettings(
        flavour=args.flavour,
        host=args.host,
        port=port,
        state=Path(args.state) if args.state else None,
        seed_users=args.seed_users,
        access_token_ttl=args.access_token_ttl or (60 if keycloak else 3600),
        migrations_seconds=args.migrations_delay,
        worker_seconds=args.worker_delay,
    )
    app = create_app(settings)
    print(
        BANNER.format(flavour=args.flavour, url=f"http://{args.host}:{port}"),
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        app, host=args.host, port=port, log_config=None, access_log=False, server_header=False
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C."""
    from pathlib import Path

    from .demo.runner import DemoOptions, run_demo

    return run_demo(
        DemoOptions(
            flavour=args.flavour,
            directory=Path(args.dir).resolve(),
            gateway_port=args.port,
            idp_port=args.idp_port,
            backend_port=args.backend_port,
        )
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = _parser().parse_args(argv)
    from .idp.cli import run as cmd_idp

    commands = {
        "serve": cmd_serve,
        "check": cmd_check,
        "dev-idp": cmd_dev_idp,
        "idp": cmd_idp,
        "demo": cmd_demo,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
