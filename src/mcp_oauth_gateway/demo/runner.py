"""Start the whole demo: the dev identity provider, its provisioning, the demo MCP server, a
third-party MCP server with its own authorization server (a second dev identity provider) and the
gateway in Broker mode in front of both; print where to connect and how to sign in; stop
everything on Ctrl-C."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx

from ..authorization_server_modes import AuthorizationServerMode
from ..idp import authentik, keycloak, resources
from ..idp.steps import Progress, StepError
from ..provider_kinds import ProviderKind
from ..usertokens import new_key_line
from . import notes_idp, notes_resources
from .processes import Children, port_free, tail

BOOTSTRAP_TOKEN = "demo-bootstrap-token"


@dataclass
class DemoOptions:
    kind: ProviderKind
    directory: Path
    gateway_port: int
    idp_port: int
    backend_port: int
    notes_port: int = 8001
    notes_idp_port: int = 9001


def say(message: str) -> None:
    """A progress line."""
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def _kept_secret(path: Path, make: str) -> str:
    """The secret in `path`, made once (readable by its owner only)."""
    if not path.exists():
        path.write_text(make + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


class Demo:
    """The child processes and their lifecycle."""

    def __init__(self, options: DemoOptions):
        self.options = options
        self.logs = options.directory / "logs"
        self.children = Children(self.logs)
        self.gateway = f"http://127.0.0.1:{options.gateway_port}"

    def stop(self) -> None:
        """Stop every child (the gateway first)."""
        self.children.stop()

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
        idp_url = f"http://127.0.0.1:{o.idp_port}"
        notes_idp_url = f"http://127.0.0.1:{o.notes_idp_port}"
        say(f"directory {o.directory} (state, generated resources, logs)")
        self._start_idps(idp_url, notes_idp_url, creds)

        say("provisioning it (the same tool you would run against a real server)")
        values = self._provision(idp_url, creds)
        target = resources.write(values, o.directory / "resources")
        say(f"resources written to {target}")

        say("setting up the notes server's own authorization server, as its vendor would")
        notes = self._notes_route(notes_idp_url, creds)
        notes_resources.write(values, notes, target.parent)
        say(f"its route, /notes/mcp (userOAuth), written to {target.parent / 'notes.yaml'}")

        self._start_backends(notes.issuer)
        self._start_gateway(target)
        self._print_connection_help(creds, target)
        return self._wait()

    def _ports_free(self) -> bool:
        o = self.options
        for port, what in (
            (o.idp_port, "--idp-port"),
            (o.backend_port, "--backend-port"),
            (o.notes_idp_port, "--notes-idp-port"),
            (o.notes_port, "--notes-port"),
            (o.gateway_port, "--port"),
        ):
            if not port_free(port):
                print(
                    f"error: 127.0.0.1:{port} is in use; stop what uses it or pick another "
                    f"port with {what}",
                    file=sys.stderr,
                )
                return False
        return True

    def _dev_idp(self, name: str, kind: ProviderKind, port: int, extra: list[str]) -> None:
        creds = self.credentials()
        env = {
            "DEV_IDP_USER_PASSWORD": creds["password"],
            "DEV_IDP_ADMIN_PASSWORD": creds["admin_password"],
            "DEV_IDP_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
        }
        state = self.options.directory / f"{name.removeprefix('dev-')}-state.json"
        args = ["-m", "mcp_oauth_gateway", "dev-idp", "--flavor", kind.flavour, "--port", str(port)]
        self.children.spawn(name, [*args, "--state", str(state), *extra], env)

    def _start_idps(self, idp_url: str, notes_idp_url: str, creds: dict[str, str]) -> None:
        o = self.options
        say(f"starting the dev identity provider ({o.kind.flavour} flavour) on {idp_url}")
        # Keycloak provisioning creates its users itself; authentik's only adds existing ones.
        seed = ["--user", "alice", "--user", "bob"] if o.kind is ProviderKind.AUTHENTIK else []
        self._dev_idp("dev-idp", o.kind, o.idp_port, seed)
        say(f"starting the notes server's own authorization server on {notes_idp_url}")
        self._dev_idp("dev-notes-idp", ProviderKind.KEYCLOAK, o.notes_idp_port, [])
        for port, (_, proc, _) in zip(
            (o.idp_port, o.notes_idp_port), self.children.running, strict=True
        ):
            self.children.wait_port(port, proc, "a dev identity provider")

    def _start_backends(self, notes_issuer: str) -> None:
        o = self.options
        say(f"starting the demo MCP server on http://127.0.0.1:{o.backend_port}/mcp")
        backend = self.children.spawn(
            "mcp-server", ["-m", "mcp_oauth_gateway.demo.server", "--port", str(o.backend_port)]
        )
        say(f"starting the notes MCP server on http://127.0.0.1:{o.notes_port}/mcp (own OAuth)")
        notes = self.children.spawn(
            "notes-server",
            [
                "-m",
                "mcp_oauth_gateway.demo.notes_server",
                "--port",
                str(o.notes_port),
                "--issuer",
                notes_issuer,
            ],
        )
        self.children.wait_port(o.backend_port, backend, "the demo MCP server")
        self.children.wait_port(o.notes_port, notes, "the notes MCP server")

    def _notes_route(self, notes_idp_url: str, creds: dict[str, str]) -> notes_resources.NotesRoute:
        o = self.options
        secret_file = o.directory / "notes-client-secret"
        server = f"http://127.0.0.1:{o.notes_port}/mcp"
        callback = f"{self.gateway}{notes_resources.MCP_PATH}/connect/callback"
        options = notes_idp.NotesIdpOptions(
            url=notes_idp_url,
            admin_password=creds["admin_password"],
            user_password=creds["password"],
            users=(("alice", "alice@example.com"),),
            resource=server,
            callback=callback,
            client_secret=_kept_secret(secret_file, secrets.token_urlsafe(32)),
        )
        with httpx.Client(timeout=30) as http:
            found = notes_idp.provision(options, http)
        return notes_resources.NotesRoute(
            gateway=self.gateway,
            server=server,
            issuer=found.issuer,
            client_id=found.client_id,
            secret_file=secret_file,
            scopes=(notes_idp.SCOPE,),
        )

    def _start_gateway(self, target: Path) -> None:
        o = self.options
        key = o.directory / "user-token.key"
        # As `mcp-oauth-gateway grants new-key > user-token.key; chmod 600 user-token.key`.
        _kept_secret(key, new_key_line())
        store = f"sqlite://{o.directory / 'user-tokens.db'}"
        say(
            f"starting the gateway (Broker mode) on {self.gateway}, users' tokens sealed in {store}"
        )
        args = ["-m", "mcp_oauth_gateway", "serve", "-f", str(target.parent)]
        user_tokens = ["--user-token-key", str(key), "--user-token-store", store]
        gw = self.children.spawn("gateway", [*args, *user_tokens])
        self.children.wait_port(o.gateway_port, gw, "the gateway")
        self._wait_ready()

    def _print_connection_help(self, creds: dict[str, str], target: Path) -> None:
        gateway, password = self.gateway, creds["password"]
        # Only the authentik flavour seeds a user outside the group, to show the 403.
        outsider = "bob" if self.options.kind is ProviderKind.AUTHENTIK else None
        print(
            f"""
MCP server URL:   {gateway}/mcp
Sign in as:       alice / {password}   (member of the group: tools work)"""
            + (
                f"\n                  {outsider} / {password}"
                "     (signed in but not in the group: 403)"
                if outsider
                else ""
            )
            + f"""
Try it:           npx @modelcontextprotocol/inspector   → Streamable HTTP → {gateway}/mcp
                  claude mcp add --transport http gateway-demo {gateway}/mcp
Notes server URL: {gateway}{notes_resources.MCP_PATH}
                  a third-party MCP server with its own sign-in, behind the same gateway:
                  sign in as above; the first tool call gives you a link: open it, sign in,
                  allow; then call again (its own user: alice / {password} too)
Resources:        {target.parent}
Logs:             {self.logs}
For development only. Ctrl-C stops everything.
""",
            flush=True,
        )

    def _provision(self, idp_url: str, creds: dict[str, str]) -> resources.GatewayValues:
        o = self.options
        resource = f"{self.gateway}/mcp"
        backend = f"http://127.0.0.1:{o.backend_port}/mcp"
        # The notes route signs users in with the same Broker client: its Broker callback and
        # its connect pages' sign-in come back to the gateway too.
        notes_uris = notes_resources.redirect_uris(self.gateway)
        with httpx.Client(timeout=30) as http:
            if o.kind is ProviderKind.AUTHENTIK:
                options = authentik.AuthentikOptions(
                    url=idp_url,
                    token=BOOTSTRAP_TOKEN,
                    users=["alice"],
                    resource=resource,
                    backend=backend,
                    wait=120,
                    mode=AuthorizationServerMode.BROKER,
                    redirect_uris=authentik.broker_redirects(resource)
                    + tuple(("strict", uri) for uri in notes_uris),
                )
                return authentik.provision(
                    options, http, Progress(o.kind.flavour, len(authentik.STEPS))
                )
            kc = keycloak.KeycloakOptions(
                url=idp_url,
                admin_user="admin",
                admin_password=creds["admin_password"],
                resource=resource,
                users=[("alice", "alice@example.com")],
                user_password=creds["password"],
                backend=backend,
                mode=AuthorizationServerMode.BROKER,
                extra_redirect_uris=notes_uris,
            )
            return keycloak.provision(kc, http, Progress(o.kind.flavour, len(keycloak.STEPS)))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                metadata = httpx.get(
                    f"{self.gateway}/.well-known/oauth-authorization-server/mcp", timeout=2
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
            exited = self.children.exited()
            if exited is not None:
                name, code, log = exited
                say(f"{name} exited with code {code}; log tail:\n{tail(log)}")
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
