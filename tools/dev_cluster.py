#!/usr/bin/env python3
"""A full Kubernetes API server for local runs and tests, with kubectl and Helm, built once.

kube-apiserver v1.36.4 (core kinds: Namespaces, Services, Secrets, ServiceAccounts and their
tokens; RBAC; discovery and OpenAPI, so kubectl and Helm work) in front of etcd, plus kubectl
v1.36.4 and Helm v4, all compiled from the Go module proxy by `go build` in small modules of our
own (tools/_gobuild.py says how). No nodes: no kubelet, scheduler or controller-manager, so a
Deployment is stored but never runs a pod, and a Namespace deleted stays Terminating.

    dev_cluster.py build                 download and build once (idempotent, cached)
    dev_cluster.py path kubectl          print a cached binary's absolute path (also:
                                         kube-apiserver, etcd, helm); exit 1 if not built yet
    dev_cluster.py start --dir D         etcd + kube-apiserver on free loopback ports, RBAC on;
                                         D/kubeconfig is an admin's (system:masters);
                                         --any-namespace: objects may name a namespace that
                                         was never created (NamespaceLifecycle off)
    dev_cluster.py kubeconfig --dir D --service-account NS/NAME --out F
                                         a kubeconfig holding only that ServiceAccount's token
                                         (TokenRequest API, as `kubectl create token`)
    dev_cluster.py restart --dir D       restart kube-apiserver only (same port, same etcd)
    dev_cluster.py stop --dir D          stop both (safe to run twice)

The cache is `${XDG_CACHE_HOME:-$HOME/.cache}/mcp-oauth-gateway/cluster-v1.36.4`, or
`$MCP_OAUTH_GATEWAY_CLUSTER_CACHE`: the four binaries (~250 MB) and `versions.json`. The first
build takes ~10 minutes on 2 cores and ~6 GB of disk while it runs (module and build caches,
deleted at the end); a build that finds everything cached returns at once.

Every request a ServiceAccount makes is written to D/audit.log (audit level Metadata: who, verb,
resource, response code), so a test can see exactly what a controller running with its
ServiceAccount's token asked for and whether RBAC refused any of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import _devserver as common
from _cluster_build import (
    APISERVER,
    BINARIES,
    ETCD,
    KUBECTL,
    KUBERNETES_VERSION,
    build,
    cache_dir,
    missing,
    tool_path,
)
from _cluster_files import (
    Paths,
    kubeconfig_text,
    write_admin_kubeconfig,
    write_audit_policy,
    write_keys,
)
from _devserver import STOP_TIMEOUT, ToolError, elapsed, say

# Addresses Services get: only allocated in etcd, never connected to (there is no kube-proxy).
SERVICE_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# What `start --any-namespace` turns off: the admission plugin that refuses an object in a
# namespace that does not exist (the tests of one controller name namespaces freely, as
# custom-resource-only servers let them).
ANY_NAMESPACE = ("NamespaceLifecycle",)


# --- processes ------------------------------------------------------------------------------------


def _apiserver_command(
    cache: Path, paths: Paths, port: int, etcd_port: int, disabled: list[str]
) -> list[str]:
    return [
        str(cache / "bin" / APISERVER),
        *("--etcd-servers", f"http://127.0.0.1:{etcd_port}"),
        *("--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1"),
        *("--secure-port", str(port), "--cert-dir", str(paths.cert_dir)),
        *("--tls-cert-file", str(paths.server_cert)),
        *("--tls-private-key-file", str(paths.server_key)),
        *("--client-ca-file", str(paths.ca)),
        # As a cluster has it: every request but system:masters' is checked against RBAC.
        *("--authorization-mode", "RBAC"),
        *("--service-account-issuer", SERVICE_ACCOUNT_ISSUER),
        *("--service-account-key-file", str(paths.sa_pub)),
        *("--service-account-signing-key-file", str(paths.sa_key)),
        *("--service-cluster-ip-range", SERVICE_RANGE),
        # The `kubernetes` Service's Endpoints would name 127.0.0.1, which Endpoints refuse.
        *("--endpoint-reconciler-type", "none"),
        *("--audit-policy-file", str(paths.audit_policy)),
        *("--audit-log-path", str(paths.audit_log)),
        *(["--disable-admission-plugins", ",".join(disabled)] if disabled else []),
    ]


def _start_apiserver(
    cache: Path, paths: Paths, etcd_port: int, port: int | None, disabled: list[str]
) -> dict[str, int]:
    """Start kube-apiserver on `port` (a restart), or on a fresh free port."""

    def attempt() -> dict[str, int]:
        chosen = port or common.free_port()
        write_admin_kubeconfig(paths, chosen)
        client = common.opener(paths.ca, paths.client_cert, paths.client_key)
        base = f"https://127.0.0.1:{chosen}"

        def ready() -> bool:
            # /readyz covers etcd and every post-start hook (the bootstrap RBAC roles among
            # them); the `default` namespace is created just after, and kubectl wants it.
            return common.answers(client, f"{base}/readyz", b"ok") and common.answers(
                client, f"{base}/api/v1/namespaces/default", b'"name":"default"'
            )

        proc = common.launch(
            APISERVER,
            _apiserver_command(cache, paths, chosen, etcd_port, disabled),
            paths.apiserver_log,
            ready,
            common.child_env(),
        )
        try:
            _check_version(client, chosen, paths)
        except ToolError:
            proc.kill()
            proc.wait()
            raise
        return {"pid": proc.pid, "port": chosen}

    if port is not None:
        return attempt()
    result: dict[str, int] = common.retrying_ports(APISERVER, attempt)
    return result


def _check_version(client: urllib.request.OpenerDirector, port: int, paths: Paths) -> None:
    try:
        with client.open(f"https://127.0.0.1:{port}/version", timeout=5) as response:
            served = json.loads(response.read()).get("gitVersion")
    except (OSError, ValueError) as error:
        raise ToolError(
            f"step start: GET /version failed: {error}; see {paths.apiserver_log}"
        ) from None
    if served != KUBERNETES_VERSION:
        raise ToolError(
            f"step start: the server reports {served}, expected {KUBERNETES_VERSION}; rebuild: "
            f"rm -r {cache_dir()} && {Path(__file__).name} build"
        )


ROLES = {"watchdog": "_watch", "apiserver": APISERVER, "etcd": ETCD}


def _running(paths: Paths, state: dict[str, Any] | None) -> list[str]:
    return [
        f"{program} (pid {state[role]['pid']})"
        for role, program in ROLES.items()
        if state and role in state and common.ours(state[role]["pid"], program, paths.root)
    ]


def start(
    directory: Path, cache: Path, watch_pid: int | None, any_namespace: bool = False
) -> dict[str, Any]:
    """Start etcd and kube-apiserver for `directory`; return the recorded state."""
    build(cache)
    paths = Paths.of(directory)
    paths.root.mkdir(parents=True, exist_ok=True)
    running = _running(paths, common.read_state(paths.state))
    if running:
        raise ToolError(
            f"step start: {', '.join(running)} already running for {paths.root}; run "
            f"`{sys.argv[0]} stop --dir {paths.root}` first"
        )
    write_keys(paths)
    write_audit_policy(paths)
    etcd = common.start_etcd(cache / "bin" / ETCD, paths.etcd_data, paths.etcd_log)
    disabled = list(ANY_NAMESPACE) if any_namespace else []
    state: dict[str, Any] = {"etcd": etcd, "admission_disabled": disabled}
    # Recorded before the API server starts, so `stop` can end etcd if what follows fails.
    common.write_state(paths.state, state)
    try:
        state["apiserver"] = _start_apiserver(cache, paths, etcd["port"], None, disabled)
        if watch_pid is not None:
            script = Path(__file__).resolve()
            pid = common.spawn_watchdog(script, paths.root, watch_pid, paths.watchdog_log)
            state["watchdog"] = {"pid": pid, "owner": watch_pid}
    except BaseException:
        stop(paths.root)
        raise
    port = state["apiserver"]["port"]
    state.update(
        {
            "server": f"https://127.0.0.1:{port}",
            "kubeconfig": str(paths.kubeconfig),
            "ca": str(paths.ca),
            "client_cert": str(paths.client_cert),
            "client_key": str(paths.client_key),
            "audit_log": str(paths.audit_log),
            "binaries": {binary: str(cache / "bin" / binary) for binary in BINARIES},
        }
    )
    common.write_state(paths.state, state)
    return state


def restart(directory: Path, cache: Path) -> dict[str, Any]:
    """Stop kube-apiserver only and start it again on the same port against the same etcd."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None or "apiserver" not in state:
        raise ToolError(f"step restart: nothing started in {paths.root}; run start first")
    if not common.ours(state["etcd"]["pid"], ETCD, paths.root):
        raise ToolError(f"step restart: etcd of {paths.root} is not running; run stop, then start")
    port = state["apiserver"]["port"]
    common.terminate(state["apiserver"]["pid"], APISERVER, paths.root)
    deadline = time.monotonic() + STOP_TIMEOUT
    while not common.port_free(port):
        if time.monotonic() > deadline:
            raise ToolError(f"step restart: port {port} is still taken after {APISERVER} stopped")
        time.sleep(0.05)
    disabled = state.get("admission_disabled", [])
    state["apiserver"] = _start_apiserver(cache, paths, state["etcd"]["port"], port, disabled)
    common.write_state(paths.state, state)
    return state


def stop(directory: Path) -> bool:
    """Stop what `start` started in `directory`; False if nothing was recorded there."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None:
        return False
    # The API server first: it shuts down cleanly only while etcd still answers.
    for role, program in ROLES.items():
        entry = state.get(role)
        if entry and entry["pid"] != os.getpid():
            common.terminate(entry["pid"], program, paths.root)
    paths.state.unlink(missing_ok=True)
    return True


def service_account_kubeconfig(directory: Path, cache: Path, account: str, out: Path) -> None:
    """A kubeconfig holding only a token of ServiceAccount `NS/NAME` (no client certificate, so
    RBAC judges every call), from the TokenRequest API through `kubectl create token`."""
    namespace, _, name = account.partition("/")
    if not namespace or not name:
        raise ToolError(f"step kubeconfig: --service-account {account!r} must be NAMESPACE/NAME")
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None or "server" not in state:
        raise ToolError(f"step kubeconfig: nothing started in {paths.root}; run start first")
    command = [
        str(tool_path(cache, KUBECTL)),
        *("--kubeconfig", str(paths.kubeconfig)),
        *("create", "token", name, "--namespace", namespace, "--duration", "24h"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise ToolError(f"step kubeconfig: kubectl create token failed: {result.stderr.strip()}")
    user = f"system:serviceaccount:{namespace}:{name}"
    text = kubeconfig_text(state["server"], paths.ca, user, {"token": result.stdout.strip()})
    out.write_text(text)
    out.chmod(0o600)


def watch(directory: Path, owner: int) -> None:
    """Stop the servers once `owner` exits: a test session killed hard leaves nothing behind."""
    paths = Paths.of(directory)
    common.watch(paths.state, owner, lambda: stop(paths.root))


# --- command line ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dev_cluster.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build_parser = commands.add_parser(
        "build", help="download and build once into the cache (idempotent)"
    )
    build_parser.add_argument(
        "--quiet", action="store_true", help="print nothing when the build is already cached"
    )
    path_parser = commands.add_parser(
        "path", help="print the absolute path of a cached binary (exit 1 if not built yet)"
    )
    path_parser.add_argument("tool", choices=BINARIES)
    helps = {
        "start": "start etcd and kube-apiserver on free loopback ports (builds first if needed)",
        "kubeconfig": "write a kubeconfig holding only a ServiceAccount's token",
        "restart": "restart kube-apiserver only, on the same port, with the same etcd",
        "stop": "stop both (SIGTERM, then SIGKILL); safe to run twice",
    }
    for name, text in helps.items():
        command = commands.add_parser(name, help=text)
        command.add_argument("--dir", required=True, type=Path, help="the server's directory")
        if name == "start":
            command.add_argument(
                "--watch-pid",
                type=int,
                help="also stop the servers when this process exits (for test sessions)",
            )
            command.add_argument(
                "--any-namespace",
                action="store_true",
                help="let objects name namespaces never created (NamespaceLifecycle off)",
            )
        if name == "kubeconfig":
            command.add_argument("--service-account", required=True, metavar="NAMESPACE/NAME")
            command.add_argument("--out", required=True, type=Path, help="the file to write")
    internal = commands.add_parser("_watch")
    internal.add_argument("--dir", required=True, type=Path)
    internal.add_argument("--pid", required=True, type=int)
    return parser


def _report_start(state: dict[str, Any], started: float) -> None:
    directory = Path(state["kubeconfig"]).parent
    kubectl = state["binaries"][KUBECTL]
    say(f"ready in {elapsed(time.monotonic() - started)}")
    print(f"server:     {state['server']} (etcd on 127.0.0.1:{state['etcd']['port']})")
    print(f"kubeconfig: {state['kubeconfig']} (system:masters)")
    print(f"logs:       {directory}/apiserver.log, {directory}/etcd.log, {directory}/audit.log")
    print(f"try:        {kubectl} --kubeconfig {state['kubeconfig']} api-resources")
    print(f"stop:       {sys.argv[0]} stop --dir {directory}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cache = cache_dir()
    started = time.monotonic()
    try:
        if args.command == "build":
            cached = not missing(cache, common.read_marker(cache))
            marker = build(cache)
            if not (cached and args.quiet):
                versions = ", ".join(f"{binary} {marker[binary]}" for binary in BINARIES)
                say(f"{versions} (built with {marker.get('go')}) ready in {cache}/bin")
        elif args.command == "path":
            print(tool_path(cache, args.tool))
        elif args.command == "start":
            state = start(args.dir, cache, args.watch_pid, args.any_namespace)
            _report_start(state, started)
        elif args.command == "kubeconfig":
            service_account_kubeconfig(args.dir, cache, args.service_account, args.out)
            say(f"wrote {args.out} (token of ServiceAccount {args.service_account})")
        elif args.command == "restart":
            restart(args.dir, cache)
            say(f"{APISERVER} restarted in {elapsed(time.monotonic() - started)}")
        elif args.command == "stop":
            stopped = stop(args.dir)
            say(
                f"stopped the servers in {args.dir}"
                if stopped
                else f"nothing running in {args.dir}"
            )
        else:
            watch(args.dir, args.pid)
    except ToolError as error:
        print(f"dev-cluster: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dev-cluster: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
