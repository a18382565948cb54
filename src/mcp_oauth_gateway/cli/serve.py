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
from ..serving.options import ServeOptions, Watch
from .common import EXIT_INVALID, REDIS_ENV, Refused, load, print_problems

if TYPE_CHECKING:
    from ..kube.controller import ControllerOptions


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
    except ValueError as exc:
        raise Refused(str(exc)) from exc
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
        audit_log=_audit_log(args),
        audit_required=args.audit_required,
        watch=Watch(tuple(args.files), args.watch_interval)
        if args.files and args.watch_interval > 0
        else None,
        deployment=Deployment(
            processes=args.workers,
            default_redis_url=os.environ.get(REDIS_ENV) or None,
            default_redis_hint=f"set {REDIS_ENV}",
        ),
    )


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
    when they cannot."""
    snapshot = load(files, options.deployment)
    if not snapshot.ok:
        print_problems(snapshot)
        raise Refused("not starting: fix the resources above and run again")
    if not snapshot.listeners:
        raise Refused("no Gateway listener to serve; add a Gateway with spec.listeners")
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
            controller.controller_name, controller.cluster_domain, secret_files_dir=files_dir
        ),
    )
    return replace(options, deployment=deployment, watch=None), controller


def cmd_serve(args: argparse.Namespace) -> int:
    """Validate, then serve until SIGTERM."""
    from .. import logs, server
    from ..kube.options import in_cluster_mode
    from ..serving.runtime import BrokerRuntime

    cluster: ControllerOptions | None = None
    try:
        options = serve_options(args)
        logs.configure(args.log_level, args.log_format)
        _require_tracing(options)
        if in_cluster_mode(args):
            options, cluster = _cluster_options(args, options)
            snapshot = None
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
