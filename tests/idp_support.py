"""The dev IdP started with the tests' passwords, and the product's command line as a process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import Process, free_port, wait_for_port

ADMIN_PASSWORD = "kc-admin-test-pw"
USER_PASSWORD = "user-test-pw"
BOOTSTRAP_TOKEN = "ak-bootstrap-test-token"


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcp_oauth_gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def start_dev_idp(flavour: str, logs: Path, state: Path, *extra: str) -> tuple[Process, str]:
    port = free_port()
    env = {
        "DEV_IDP_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "DEV_IDP_BOOTSTRAP_TOKEN": BOOTSTRAP_TOKEN,
        "DEV_IDP_USER_PASSWORD": USER_PASSWORD,
    }
    proc = Process(
        f"dev-idp-{flavour}",
        [
            sys.executable,
            "-m",
            "mcp_oauth_gateway",
            "dev-idp",
            "--flavor",
            flavour,
            "--port",
            str(port),
            "--state",
            str(state),
            *extra,
        ],
        logs,
        env=env,
    )
    wait_for_port(port, proc)
    return proc, f"http://127.0.0.1:{port}"
