"""tools/dev_keycloak.py as a person meets it: a cached fetch is silent, and every refusal is one
line naming what is wrong and the fix (no Java, no Maven, a port taken, a directory in use)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from keycloak_support import TOOL, KeycloakError, RealKeycloak


def tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_a_cached_fetch_prints_nothing_and_path_names_the_distribution(real_keycloak):
    fetched = tool("fetch", "--quiet")
    assert (fetched.returncode, fetched.stdout, fetched.stderr) == (0, "", "")
    path = tool("path")
    assert path.returncode == 0
    assert (Path(path.stdout.strip()) / "bin" / "kc.sh").is_file()


def test_a_directory_in_use_is_refused_naming_stop(real_keycloak):
    again = tool("start", "--dir", str(real_keycloak.directory))
    assert again.returncode == 1
    assert "already runs for" in again.stderr
    assert "stop --dir" in again.stderr


def test_a_taken_port_is_refused_naming_the_flag(real_keycloak, tmp_path):
    port = real_keycloak.url.rsplit(":", 1)[1]
    taken = tool("start", "--dir", str(tmp_path / "kc"), "--port", port)
    assert taken.returncode == 1
    assert f"port {port} is taken; choose another with --port" in taken.stderr


def test_no_java_is_one_line_naming_the_package(real_keycloak, tmp_path):
    env = {"PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "no-jdk")}
    refused = subprocess.run(
        [sys.executable, str(TOOL), "start", "--dir", str(tmp_path / "kc")],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in env} | env,
    )
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert lines == [
        "dev-keycloak: error: step java: no Java found (Keycloak needs Java 17 or newer): "
        "install it (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    ]


def test_no_maven_is_one_line_naming_the_package(real_keycloak, tmp_path):
    # Java alone on PATH, and an empty cache: the fetch needs Maven and says so.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = subprocess.run(
        [sys.executable, "-c", "import shutil; print(shutil.which('java'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (bin_dir / "java").symlink_to(java)
    env = {
        "PATH": str(bin_dir),
        "MCP_OAUTH_GATEWAY_KEYCLOAK_CACHE": str(tmp_path / "cache"),
    }
    refused = subprocess.run(
        [sys.executable, str(TOOL), "fetch"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", *env)} | env,
    )
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "dev-keycloak: error: step fetch: no Maven (`mvn`) to fetch Keycloak from Maven "
        "Central: install it (apt-get install maven)"
    )


def test_stop_is_safe_twice(tmp_path):
    for _ in range(2):
        stopped = tool("stop", "--dir", str(tmp_path))
        assert stopped.returncode == 0
        assert "nothing running in" in stopped.stderr


def test_the_fixture_fails_with_the_tools_own_line(real_keycloak):
    """What the real_keycloak fixture reports when the tool refuses (here: a directory whose
    Keycloak runs): the tool's one line, not a traceback."""
    with pytest.raises(KeycloakError) as refused:
        RealKeycloak.start(real_keycloak.directory)
    assert str(refused.value).startswith("dev-keycloak: error: step start: Keycloak (pid ")
    assert "stop --dir" in str(refused.value)
