"""Identity provider A for the tests: real Keycloak (tools/dev_keycloak.py) or the dev IdP's
Keycloak flavour, behind one interface, so one suite runs against both.

`RealKeycloak` is Keycloak 26 itself, fetched from Maven Central once and started in dev mode on
a free loopback port (the session shares one server; modules that must not share set up a realm
of their own). `DevKeycloak` is the embedded emulation (`mcp-oauth-gateway dev-idp --flavor
keycloak`), which serves the master realm only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from idp_support import ADMIN_PASSWORD, USER_PASSWORD
from support import ROOT, Process, free_port, wait_for_port
from xdist_scheduling import KEYCLOAK

TOOL = ROOT / "tools" / "dev_keycloak.py"
# What a first fetch adds to a run, for messages: tools/dev_keycloak.py says more.
FIRST_FETCH = "~180 MB from Maven Central and a ~40 s first start, once, then cached"


class KeycloakError(Exception):
    """The tool failed; the message is its own last line (what failed and the fix)."""


def _run_tool(*args: str, echo: bool = False, env: dict[str, str] | None = None) -> str:
    command = [sys.executable, str(TOOL), *args]
    full_env = {**os.environ, **(env or {})}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
    ) as proc:
        assert proc.stderr is not None
        assert proc.stdout is not None
        said = []
        for line in proc.stderr:
            said.append(line)
            if echo:  # progress lines reach the terminal as they are written
                print(line, end="", file=sys.stderr, flush=True)
        out = proc.stdout.read()
    if proc.returncode != 0:
        lines = [line.strip() for line in said if "error:" in line]
        raise KeycloakError(
            lines[-1] if lines else f"{TOOL.name} {args[0]} failed:\n{''.join(said)}"
        )
    return out


@dataclass
class Provider(ABC):
    """What the tests need of a running provider A."""

    name: str
    url: str
    admin_password: str = ADMIN_PASSWORD
    realms: set[str] = field(default_factory=lambda: {"master"})

    def issuer(self, realm: str = "master") -> str:
        return f"{self.url}/realms/{realm}"

    def token_endpoint(self, realm: str = "master") -> str:
        return f"{self.issuer(realm)}/protocol/openid-connect/token"

    def admin_token(self) -> str:
        """A fresh admin access token (password grant of admin-cli in master)."""
        response = httpx.post(
            self.token_endpoint(),
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": self.admin_password,
            },
            timeout=30,
        )
        assert response.status_code == 200, response.text
        token: str = response.json()["access_token"]
        return token

    def admin(self, method: str, path: str, realm: str = "master", **kwargs: Any) -> httpx.Response:
        """An admin REST call on `realm` (path relative to /admin/realms/<realm>)."""
        headers = {"Authorization": f"Bearer {self.admin_token()}"}
        return httpx.request(
            method, f"{self.url}/admin/realms/{realm}{path}", headers=headers, timeout=30, **kwargs
        )

    def add_user(self, username: str, realm: str = "master", password: str = USER_PASSWORD) -> str:
        """Create a user outside every group (with the names Keycloak's user profile asks for)."""
        created = self.admin(
            "POST",
            "/users",
            realm,
            json={
                "username": username,
                "enabled": True,
                "email": f"{username}@example.com",
                "emailVerified": True,
                "firstName": username.title(),
                "lastName": "Outsider",
                "credentials": [{"type": "password", "value": password, "temporary": False}],
            },
        )
        assert created.status_code == 201, created.text
        return created.headers["location"].rsplit("/", 1)[-1]

    @abstractmethod
    def stop(self) -> None:
        """Stop what this kind of provider started."""


class RealKeycloak(Provider):
    """Keycloak itself, started by tools/dev_keycloak.py in `directory`."""

    def __init__(self, directory: Path, state: dict[str, Any]) -> None:
        super().__init__("keycloak", state["url"])
        self.directory = directory
        self.state = state

    @classmethod
    def fetch(cls, *, echo: bool = False) -> None:
        _run_tool("fetch", "--quiet", echo=echo)

    @classmethod
    def start(cls, directory: Path) -> RealKeycloak:
        # The server stops with this process even if the session is killed hard.
        # Its "waiting for Keycloak" lines reach the terminal while it starts.
        _run_tool(
            "start",
            "--dir",
            str(directory),
            "--watch-pid",
            str(os.getpid()),
            echo=True,
            env={"KC_BOOTSTRAP_ADMIN_PASSWORD": ADMIN_PASSWORD},
        )
        state = json.loads((directory / "state.json").read_text())
        return cls(directory, state)

    @property
    def log(self) -> Path:
        return self.directory / "keycloak.log"

    def new_realm(self, realm: str) -> str:
        """Create an empty realm (the product's `idp keycloak --realm` does it too)."""
        created = httpx.post(
            f"{self.url}/admin/realms",
            headers={"Authorization": f"Bearer {self.admin_token()}"},
            json={"realm": realm, "enabled": True},
            timeout=60,
        )
        assert created.status_code == 201, created.text
        self.realms.add(realm)
        return realm

    def stop(self) -> None:
        _run_tool("stop", "--dir", str(self.directory))


class DevKeycloak(Provider):
    """The dev IdP's Keycloak flavour (master realm only), one process per use."""

    def __init__(self, process: Process, url: str) -> None:
        super().__init__("dev-idp", url)
        self.process = process

    @classmethod
    def start(cls, logs: Path, state: Path) -> DevKeycloak:
        port = free_port()
        env = {
            "DEV_IDP_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "DEV_IDP_USER_PASSWORD": USER_PASSWORD,
        }
        command = [
            sys.executable,
            "-m",
            "mcp_oauth_gateway",
            "dev-idp",
            "--flavor",
            "keycloak",
            *("--port", str(port), "--state", str(state)),
        ]
        process = Process(f"dev-idp-keycloak-{port}", command, logs, env=env)
        wait_for_port(port, process)
        return cls(process, f"http://127.0.0.1:{port}")

    def stop(self) -> None:
        self.process.stop()


def idp_keycloak(
    provider: Provider, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """`mcp-oauth-gateway idp keycloak --url <provider> ARGS` with the test passwords."""
    env = {
        **os.environ,
        "KEYCLOAK_ADMIN_PASSWORD": provider.admin_password,
        "KEYCLOAK_USER_PASSWORD": USER_PASSWORD,
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_oauth_gateway",
            "idp",
            "keycloak",
            "--url",
            provider.url,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


# Real Keycloak's parameter carries its xdist group: the fixture reaches it by name.
FLAVOURS = (pytest.param("keycloak", marks=KEYCLOAK), "dev-idp")
# Parametrises a test over real Keycloak alone (a module's `provider` fixture, reused).
KEYCLOAK_ONLY = pytest.mark.parametrize("provider", FLAVOURS[:1], indirect=True)


def either_provider(
    request: pytest.FixtureRequest, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Provider]:
    """Real Keycloak (the session's server) or a dev IdP of the module's own, by
    `request.param`: the body of every provider-A module's parametrised `provider` fixture
    (`pytest.fixture(scope="module", params=FLAVOURS, name="provider")(either_provider)`)."""
    if request.param == "keycloak":
        yield request.getfixturevalue("real_keycloak")
        return
    dev = DevKeycloak.start(logs, tmp_path_factory.mktemp("dev-kc") / "state.json")
    try:
        yield dev
    finally:
        dev.stop()
