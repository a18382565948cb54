"""`serve`: the flags as options, the resources checked, then the gateway run."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..asgi import (
    Limits,
)
from ..controlplane import Deployment, Snapshot
from ..controlplane.watch import load_into
from ..redis_targets import parse_redis_url
from ..serving.options import ServeOptions, Watch, own_ports
from .common import EXIT_INVALID, REDIS_ENV, Refused, load, print_problems
from .user_token_flags import store_kind, user_token_settings

if TYPE_CHECKING:
    from ..kube.controller import ControllerOptions

# Where the admin and health listeners listen unless told otherwise.
DEFAULT_HOST = "127.0.0.1"


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The `serve` flags as ServeOptions; Refused naming a bad flag."""
    from ..connections import parse_count, parse_seconds

    try:
        limits = Limits(
            max_header_bytes=args.max_header_bytes,
            max_body_bytes=args.max_body_bytes,
            header_timeout=parse_seconds("--header-timeout", args.header_timeout),
            idle_timeout=parse_seconds("--idle-timeout", args.idle_timeout),
            max_connections=None
            if args.max_connections is None
            else parse_count("--max-connections", args.max_connections),
            token_cache_entries=parse_count("--token-cache-entries", args.token_cache_entries),
        )
        grace_period = parse_seconds("--grace-period", args.grace_period)
    except ValueError as exc:
        raise Refused(str(exc)) from exc
    status_port, health_port = _own_listeners(args)
    return ServeOptions(
        host=args.host,
        trust_forwarded=args.trust_forwarded_headers,
        grace_period=grace_period,
        workers=args.workers,
        log_level=args.log_level,
        log_format=args.log_format,
        limits=limits,
        status_port=status_port,
        admin_host=args.admin_host or DEFAULT_HOST,
        health_port=health_port,
        health_host=args.health_host or DEFAULT_HOST,
        tracing=args.tracing == "otlp",
        audit_log=_audit_log(args),
        audit_required=args.audit_required,
        watch=Watch(tuple(args.files), args.watch_interval)
        if args.files and args.watch_interval > 0
        else None,
        deployment=Deployment(
            processes=args.workers,
            default_redis_url=_environment_redis(),
            default_redis_hint=f"set {REDIS_ENV}",
        ),
    )


def _environment_redis() -> str | None:
    """MCP_OAUTH_GATEWAY_REDIS_URL, checked (Refused naming it and the forms it may take)."""
    url = os.environ.get(REDIS_ENV) or None
    if url is not None:
        try:
            parse_redis_url(url, REDIS_ENV)
        except ValueError as exc:
            raise Refused(str(exc)) from None
    return url


def _own_listeners(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """--admin-port and --health-port as numbers; Refused unless each is a port, each of
    --admin-host and --health-host comes with its port, and the two listeners have a port
    each (a request is told apart by the port it came in on)."""
    ports = []
    for name, host, given in (
        ("admin", args.admin_host, args.status_port),
        ("health", args.health_host, args.health_port),
    ):
        if host is not None and given is None:
            raise Refused(f"--{name}-host {host} needs --{name}-port PORT: no {name} listener")
        ports.append(None if given is None else _port(f"--{name}-port", given))
    admin, health = ports
    if admin is not None and admin == health:
        raise Refused(
            f"--health-port {health} is --admin-port too: give the health listener (the "
            "probes' /healthz and /readyz) and the admin listener (/config, /status, /metrics) "
            "a port each"
        )
    return admin, health


def _port(flag: str, text: str) -> int:
    """A port number from 1 to 65535; Refused naming `flag` otherwise."""
    number = int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= number <= 65535:
        raise Refused(f"{flag} {text!r}: a port is a whole number from 1 to 65535")
    return number


def _audit_log(args: argparse.Namespace) -> str | None:
    """`--audit-log`, checked writable now (a bad path is refused before serving), and by
    whom: a file anyone may write is refused, one anyone may read is warned about."""
    from ..serving.audit_sink import check_path, exposure

    path: str | None = args.audit_log
    if path is None:
        if args.audit_required:
            raise Refused("--audit-required needs --audit-log PATH (or - for standard output)")
        return None
    if not path:
        raise Refused("--audit-log needs a file path, or - for standard output")
    try:
        check_path(path)
    except OSError as exc:
        raise Refused(
            f"--audit-log {path}: cannot open it for appending ({exc.strerror}); give a "
            "writable file path, or - for standard output"
        ) from exc
    exposed = exposure(path)
    if exposed is not None:
        refused, why = exposed
        if refused:
            raise Refused(f"--audit-log {path}: {why}; chmod o-rw {path}")
        logging.getLogger("mcp_oauth_gateway.audit").warning(
            "--audit-log %s: %s; chmod o-r %s", path, why, path
        )
    return path


def _servable(files: Sequence[str], options: ServeOptions) -> Snapshot:
    """The resources as a snapshot that can be served; Refused (after printing every problem)
    when they cannot. Read through the watcher's caches, when it watches."""
    if options.watch is not None:
        snapshot = load_into(files, options.watch.caches, options.deployment)
    else:
        snapshot = load(files, options.deployment)
    if not snapshot.ok:
        print_problems(snapshot)
        raise Refused("not starting: fix the resources above and run again")
    if not snapshot.listeners:
        raise Refused("no Gateway listener to serve; add a Gateway with spec.listeners")
    for port, holder in own_ports(options).items():
        if port in snapshot.listeners:
            raise Refused(
                f"port {port} is a Gateway listener's and {holder}: give one of them another port"
            )
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
        from ..dataplane import tracing

        try:
            tracing.require()
        except tracing.TracingUnavailable as exc:
            raise Refused(str(exc)) from exc


def _cluster_options(
    args: argparse.Namespace, options: ServeOptions
) -> tuple[ServeOptions, ControllerOptions]:
    """Controller mode's settings; Refused naming a bad flag."""
    from ..controlplane.cluster import Cluster
    from ..kube.client import ConnectError, check_kubeconfig
    from ..kube.options import controller_options, replicas, secret_files_dir

    try:
        controller = controller_options(args)
        count = replicas(args)
        files_dir = secret_files_dir(args)
        if controller.kubeconfig is not None:
            check_kubeconfig(controller.kubeconfig)
    except (ValueError, ConnectError) as exc:
        raise Refused(str(exc)) from exc
    deployment = replace(
        options.deployment,
        # Unknown means several: Broker mode then needs Redis (fail closed).
        processes=count or 2,
        processes_label=None
        if count
        else "several replicas (controller mode; give --replicas 1 if only one serves)",
        default_redis_hint=f"set {REDIS_ENV}",
        cluster=Cluster(
            controller.controller_name,
            controller.cluster_domain,
            egress=controller.egress,
            secret_files_dir=files_dir,
        ),
    )
    return replace(options, deployment=deployment, watch=None), controller


def cmd_serve(args: argparse.Namespace) -> int:
    """Validate, then serve until SIGTERM."""
    from .. import logs, server
    from ..kube.options import in_cluster_mode
    from ..serving.process_state import ProcessState

    cluster: ControllerOptions | None = None
    try:
        options = serve_options(args)
        user_tokens = user_token_settings(args)
        if user_tokens is not None:
            kind = store_kind(user_tokens.store_url)
            deployment = replace(options.deployment, user_token_store=kind)
            options = replace(options, deployment=deployment)
        logs.configure(args.log_level, args.log_format)
        _require_tracing(options)
        if in_cluster_mode(args):
            options, cluster = _cluster_options(args, options)
            snapshot = None
        elif args.allow_hosts:
            raise Refused(
                "--allow-hosts applies to controller mode (--kubeconfig, --in-cluster), where "
                "tenants write the objects; resource files are the operator's own and every "
                "host in them is used"
            )
        elif not args.files:
            raise Refused(
                "nothing to serve: give resource files with -f PATH, or read a cluster with "
                "--kubeconfig PATH (or --in-cluster in a pod)"
            )
        else:
            snapshot = _servable(args.files, options)
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    process_state = ProcessState(
        args.allow_local_client_metadata, os.environ.get(REDIS_ENV) or None
    )
    process_state.user_tokens = user_tokens
    try:
        if cluster is not None:
            return server.serve_cluster(options, cluster, process_state)
        assert snapshot is not None
        return server.serve(snapshot, options, process_state)
    except OSError as exc:
        print(
            f"error: {exc} (is another process using the port? change the Gateway listener port)",
            file=sys.stderr,
        )
        return 1
