"""Start the whole demo: the dev identity provider, its provisioning, the demo MCP server and the
gateway in Broker mode; print where to connect and how to sign in; stop everything on Ctrl-C."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from ..idp import authentik, keycloak, resources
from ..idp.steps import Progress, StepError

BOOTSTRAP_TOKEN = "demo-bootstrap-token"


@dataclass
class DemoOptions:
    flavour: str
    directory: Path
    gateway_port: int
    idp_port: int
    backend_port: int


def say(message: str) -> None:
    """A progress line."""
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As the servers do: connections in TIME_WAIT from a previous run do not block a bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _wait_port(
    port: int, proc: subprocess.Popen[bytes], name: str, log: Path, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{name} exited with code {proc.returncode}; its log "
                f"({log}) ends with:\n{_tail(log)}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {timeout:g}s; see {log}")


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Demo:
    """The child processes and their lifecycle."""

    def __init__(self, options: DemoOptions):
        self.options = options
        self.children: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.logs = options.directory / "logs"

    def spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a child process whose output goes to logs/<name>.log."""
        log = self.logs / f"{name}.log"
        handle = log.open("ab")
        proc = subprocess.Popen(
            [sys.executable, *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        self.children.append((name, proc, log))
        return proc

    def stop(self) -> None:
        """SIGTERM every child (gateway first), then SIGKILL stragglers."""
        for _, proc, _ in reversed(self.children):
            if proc.poll() is None:
                proc.terminate()
        for _, proc, _ in reversed(self.children):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()

    def credentials(self) -> dict[str, str]:
        """The demo users' password, created once per demo directory."""
        path = self.options.directory / "credentials.json"
        if path.exists():
            stored: dict[str, str] = json.loads(path.read_text())
            return stored
        values = {"password": secrets.token_urlsafe(9), "admin_password": secrets.token_urlsafe(12)}
        path.write_text(json.dumps(values))
        path.chmod(0o600)
        return values

    def run(self) -> int:
        """Start everything and wait for Ctrl-C."""
        o = self.options
        o.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        if not self._ports_free():
            return 2
        creds = self.credentials()
        gateway = f"http://127.0.0.1:{o.gateway_port}"
        idp_url = f"http://127.0.0.1:{o.idp_port}"
        say(f"directory {o.directory} (state, generated resources, logs)")
        self._start_idp(idp_url, creds)

        say("provisioning it (the same tool you would run against a real server)")
        values = self._provision(idp_url, gateway, creds)
        target = resources.write(values, o.directory / "resources")
        say(f"resources written to {target}")

        self._start_backend()
        self._start_gateway(gateway, target)
        self._print_connection_help(gateway, creds, target)
        return self._wait()

    def _ports_free(self) -> bool:
        o = self.options
        for port, what in (
            (o.idp_port, "--idp-port"),
            (o.backend_port, "--backend-port"),
            (o.gateway_port, "--port"),
        ):
            if not _port_free(port):
                print(
                    f"error: 127.0.0.1:{port} is in use; stop what uses it or pick another "
                    f"port with {what}",
                    file=sys.stderr,
                )
                return False
        return True

    def _start_idp(self, idp_url: str, creds: dict[str, str]) -> None:
        o = self.options
        say(f"starting the dev identity provider ({o.flavour} flavour) on {idp_url}")
        env = {
            "DEV_IDP_USER_PASSWORD": creds["password"],
            "DEV_IDP_ADMIN_PASSWORD": creds["admin_password"],
            "DEV_IDP_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
        }
        # Keycloak provisioning creates its users itself; authentik's only adds existing ones.
        seed = ["--user", "alice", "--user", "bob"] if o.flavour == "authentik" else []
        idp = self.spawn(
            "dev-idp",
            [
                "-m",
                "mcp_oauth_gateway",
                "dev-idp",
                "--flavor",
                o.flavour,
                "--port",
                str(o.idp_port),
                "--state",
                str(o.directory / "idp-state.json"),
                *seed,
            ],
            env,
        )
        _wait_port(o.idp_port, idp, "the dev identity provider", self.logs / "dev-idp.log")

    def _start_backend(self) -> None:
        port = self.options.backend_port
        say(f"starting the demo MCP server on http://127.0.0.1:{port}/mcp")
        backend = self.spawn(
            "mcp-server", ["-m", "mcp_oauth_gateway.demo.server", "--port", str(port)]
        )
        _wait_port(port, backend, "the demo MCP server", self.logs / "mcp-server.log")

    def _start_gateway(self, gateway: str, target: Path) -> None:
        say(f"starting the gateway (Broker mode) on {gateway}")
        gw = self.spawn("gateway", ["-m", "mcp_oauth_gateway", "serve", "-f", str(target.parent)])
        _wait_port(self.options.gateway_port, gw, "the gateway", self.logs / "gateway.log")
        self._wait_ready(gateway)

    def _print_connection_help(self, gateway: str, creds: dict[str, str], target: Path) -> None:
        # Only the authentik flavour seeds a user outside the group, to show the 403.
        outsider = "bob" if self.options.flavour == "authentik" else None
        print(
            f"""
MCP server URL:   {gateway}/mcp
Sign in as:       alice / {creds["password"]}   (member of the group: tools work)"""
            + (
                f"\n                  {outsider} / {creds['password']}"
                "     (signed in but not in the group: 403)"
                if outsider
                else ""
            )
            + f"""
Try it:           npx @modelcontextprotocol/inspector   → Streamable HTTP → {gateway}/mcp
                  claude mcp add --transport http gateway-demo {gateway}/mcp
Resources:        {target}
Logs:             {self.logs}
For development only. Ctrl-C stops everything.
""",
            flush=True,
        )

    def _provision(
        self, idp_url: str, gateway: str, creds: dict[str, str]
    ) -> resources.GatewayValues:
        o = self.options
        resource = f"{gateway}/mcp"
        backend = f"http://127.0.0.1:{o.backend_port}/mcp"
        with httpx.Client(timeout=30) as http:
            if o.flavour == "authentik":
                options = authentik.AuthentikOptions(
                    url=idp_url,
                    token=BOOTSTRAP_TOKEN,
                    users=["alice"],
                    resource=resource,
                    backend=backend,
                    wait=120,
                    mode="Broker",
                    redirect_uris=authentik.broker_redirects(resource),
                )
                return authentik.provision(
                    options, http, Progress("authentik", len(authentik.STEPS))
                )
            kc = keycloak.KeycloakOptions(
                url=idp_url,
                admin_user="admin",
                admin_password=creds["admin_password"],
                resource=resource,
                users=[("alice", "alice@example.com")],
                user_password=creds["password"],
                backend=backend,
                mode="Broker",
            )
            return keycloak.provision(kc, http, Progress("keycloak", len(keycloak.STEPS)))

    def _wait_ready(self, gateway: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                metadata = httpx.get(
                    f"{gateway}/.well-known/oauth-authorization-server/mcp", timeout=2
                )
                if metadata.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the gateway did not become ready; see {self.logs}/gateway.log")

    def _wait(self) -> int:
        stopping = False

        def handle(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        while not stopping:
            for name, proc, log in self.children:
                if proc.poll() is not None:
                    say(f"{name} exited with code {proc.returncode}; log tail:\n{_tail(log)}")
                    return 1
            time.sleep(0.3)
        say("stopping")
        return 0


def run_demo(options: DemoOptions) -> int:
    """Entry point for `mcp-oauth-gateway demo`."""
    demo = Demo(options)
    try:
        return demo.run()
    except (StepError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        say("stopping")
        return 0
    finally:
        demo.stop()
        say("stopped")
