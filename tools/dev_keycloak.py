#!/usr/bin/env python3
"""A real Keycloak for local runs and tests: fetched once from Maven Central, started in dev mode.

The server distribution `org.keycloak:keycloak-quarkus-dist` (a tar.gz on Maven Central) is
fetched by Maven's dependency plugin, unpacked into a cache and started once there, so that
Quarkus's build step (~20 s) is done before any test needs it. Each `start` copies that
prepared distribution into its own directory: every server begins with an empty H2 database
(dev-file) holding only the master realm and the bootstrap admin.

    dev_keycloak.py fetch               download and prepare once (idempotent, cached)
    dev_keycloak.py path                print the prepared distribution's directory
    dev_keycloak.py start --dir D [--port P]
                                        Keycloak in dev mode on a loopback port (a free one
                                        unless --port); the admin is `admin`, its password
                                        $KC_BOOTSTRAP_ADMIN_PASSWORD or a generated one written
                                        to D/admin-password
    dev_keycloak.py stop --dir D        stop it (safe to run twice)

Needs Java 17 or newer (`java` on PATH or $JAVA_HOME) and Maven (`mvn`); `make test` installs
both from Debian's packages when they are missing. The cache is
`${XDG_CACHE_HOME:-$HOME/.cache}/mcp-oauth-gateway/keycloak-<version>`, or
`$MCP_OAUTH_GATEWAY_KEYCLOAK_CACHE`: the prepared distribution (~190 MB).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _devserver as common
from _devserver import ToolError, elapsed, say

KEYCLOAK_VERSION = "26.7.3"
ARTIFACT = f"org.keycloak:keycloak-quarkus-dist:{KEYCLOAK_VERSION}:tar.gz"
# An explicit plugin version: a bare `mvn dependency:copy` resolves an old plugin that fails.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
JAVA_MINIMUM = 17
ADMIN_USER = "admin"
# A bounded heap: by default Keycloak takes 70 % of the machine's memory for itself.
HEAP = "-Xms64m -Xmx768m"
PROGRAM = "keycloak"
FETCH_TIMEOUT = 900.0
# A line every so often while Maven downloads, so a slow fetch never looks hung.
PROGRESS_EVERY = 20.0
# How long a start may take: ~15 s alone (~40 s for the first, which runs Quarkus's build),
# but 3 minutes were seen at load 20 on 2 cores (a test run beside other work), and the first
# runs beside the Go build of a first `make test`. A server that fails exits, which is seen at
# once; this only bounds one that hangs.
START_TIMEOUT = 600.0


def cache_dir() -> Path:
    explicit = os.environ.get("MCP_OAUTH_GATEWAY_KEYCLOAK_CACHE")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-oauth-gateway" / f"keycloak-{KEYCLOAK_VERSION}"


# --- what the machine must have -------------------------------------------------------------------


def java_home() -> Path:
    """The JDK or JRE to run Keycloak with: $JAVA_HOME, else the `java` on PATH."""
    explicit = os.environ.get("JAVA_HOME")
    java = Path(explicit) / "bin" / "java" if explicit else None
    if java is None or not os.access(java, os.X_OK):
        found = shutil.which("java")
        if found is None:
            raise ToolError(
                f"step java: no Java found (Keycloak needs Java {JAVA_MINIMUM} or newer): "
                "install it (apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
            )
        java = Path(found).resolve()
    major = _java_major(java)
    if major < JAVA_MINIMUM:
        raise ToolError(
            f"step java: {java} is Java {major}; Keycloak {KEYCLOAK_VERSION} needs "
            f"{JAVA_MINIMUM} or newer: install openjdk-17-jre-headless or set JAVA_HOME"
        )
    return java.parent.parent


def _java_major(java: Path) -> int:
    result = subprocess.run(
        [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr)
    if result.returncode != 0 or match is None:
        raise ToolError(f"step java: `{java} -version` failed: {result.stderr.strip()[:200]}")
    first, second = int(match.group(1)), int(match.group(2) or 0)
    # Java 8 and older say "1.8.0_x".
    return second if first == 1 else first


def maven() -> str:
    found = shutil.which("mvn")
    if found is None:
        raise ToolError(
            "step fetch: no Maven (`mvn`) to fetch Keycloak from Maven Central: install it "
            "(apt-get install maven)"
        )
    return found


# --- fetch and prepare ----------------------------------------------------------------------------


def fetch(cache: Path) -> Path:
    """The prepared distribution, fetched and prepared first if the cache lacks it."""
    dist = cache / "dist"
    if _ready(cache):
        return dist
    with common.build_lock(cache):
        if _ready(cache):
            return dist
        started = time.monotonic()
        home = java_home()
        work = cache / "work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        archive = _download(work)
        prepared = _unpack(archive, work)
        _prepare(prepared, home)
        shutil.rmtree(dist, ignore_errors=True)
        os.replace(prepared, dist)
        shutil.rmtree(work)
        common.write_marker(cache, {"keycloak": KEYCLOAK_VERSION})
        say(f"Keycloak {KEYCLOAK_VERSION} ready in {dist} ({elapsed(time.monotonic() - started)})")
    return dist


def _ready(cache: Path) -> bool:
    marker = common.read_marker(cache)
    return (
        marker.get("keycloak") == KEYCLOAK_VERSION and (cache / "dist" / "bin" / "kc.sh").is_file()
    )


def _download(work: Path) -> Path:
    say(f"step fetch: downloading {ARTIFACT} from Maven Central (~180 MB, once)")
    command = [
        maven(),
        *("-B", "-q", f"-Dmaven.repo.local={work / 'm2'}"),
        f"{DEPENDENCY_PLUGIN}:copy",
        f"-Dartifact={ARTIFACT}",
        f"-DoutputDirectory={work}",
    ]
    output = work / "maven.log"
    with output.open("w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        returncode = _wait_saying_progress(proc, work)
    archive = work / f"keycloak-quarkus-dist-{KEYCLOAK_VERSION}.tar.gz"
    if returncode != 0 or not archive.is_file():
        lines = [
            line for line in output.read_text(errors="replace").splitlines() if "ERROR" in line
        ]
        raise ToolError(
            f"step fetch: Maven could not fetch {ARTIFACT}: "
            f"{' | '.join(lines[:3]) or 'no error printed'}; check the network access to "
            "Maven Central (repo.maven.apache.org)"
        )
    return archive


def _wait_saying_progress(proc: subprocess.Popen[bytes], work: Path) -> int:
    """Maven's exit code; meanwhile a line every PROGRESS_EVERY seconds with what it has
    downloaded (the repository it fills and the archive's part file, both under `work`)."""
    started = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=PROGRESS_EVERY)
        except subprocess.TimeoutExpired:
            taken = time.monotonic() - started
            if taken > FETCH_TIMEOUT:
                proc.kill()
                proc.wait()
                raise ToolError(
                    f"step fetch: Maven did not finish within {FETCH_TIMEOUT:.0f}s; check the "
                    "network access to Maven Central (repo.maven.apache.org)"
                ) from None
            say(f"  still downloading ({elapsed(taken)}, {_megabytes(work)} MB so far)")


def _megabytes(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        # Maven renames its part files as they complete: one may be gone by now.
        with contextlib.suppress(OSError):
            total += path.lstat().st_size if path.is_file() else 0
    return total // 1024**2


def _unpack(archive: Path, work: Path) -> Path:
    say(f"step unpack: {archive.name}")
    with tarfile.open(archive) as tar:
        # The "data" filter refuses links and paths that would leave the directory.
        tar.extractall(work / "unpacked", filter="data")
    found = sorted((work / "unpacked").glob("keycloak-*/bin/kc.sh"))
    if not found:
        raise ToolError(f"step unpack: {archive.name} holds no keycloak-*/bin/kc.sh")
    return found[0].parent.parent


def _prepare(prepared: Path, home: Path) -> None:
    # The first start-dev runs Quarkus's build into lib/quarkus; done here, every copy of the
    # distribution starts in ~15 s instead of ~35 s. Its data (H2, transaction logs) is dropped.
    say("step prepare: a first start of Keycloak in dev mode (~40 s, once)")
    scratch = prepared.parent / "prepare"
    scratch.mkdir()
    password = secrets.token_urlsafe(16)
    server = _launch(prepared, scratch, home, "prepare", password)
    common.terminate(server["pid"], PROGRAM, prepared)
    shutil.rmtree(prepared / "data", ignore_errors=True)


# --- start and stop -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    """Where one server's files live under its directory."""

    root: Path

    @classmethod
    def of(cls, directory: Path) -> Paths:
        return cls(directory.expanduser().resolve())

    @property
    def home(self) -> Path:
        return self.root / "keycloak"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def log(self) -> Path:
        return self.root / "keycloak.log"

    @property
    def password(self) -> Path:
        return self.root / "admin-password"

    @property
    def watchdog_log(self) -> Path:
        return self.root / "watchdog.log"


def _launch(
    home: Path,
    logs: Path,
    java: Path,
    title: str,
    password: str,
    port: int | None = None,
) -> dict[str, int]:
    """`kc.sh start-dev` of the distribution at `home` on `port` (default: a free one); pid and
    port once its discovery document answers."""
    if port is not None and not common.port_free(port):
        raise ToolError(f"step start: port {port} is taken; choose another with --port")
    env = {
        **os.environ,
        "JAVA_HOME": str(java),
        "JAVA_OPTS_KC_HEAP": HEAP,
        "KC_BOOTSTRAP_ADMIN_USERNAME": ADMIN_USER,
        "KC_BOOTSTRAP_ADMIN_PASSWORD": password,
    }
    # KC_* settings of the caller's would silently reconfigure the server.
    env = {k: v for k, v in env.items() if not k.startswith("KC_") or k.startswith("KC_BOOTSTRAP")}
    plain = common.opener(None)

    def attempt() -> dict[str, int]:
        chosen = port or common.free_port()
        url = f"http://127.0.0.1:{chosen}/realms/master/.well-known/openid-configuration"
        command = [
            str(home / "bin" / "kc.sh"),
            "start-dev",
            *("--http-host", "127.0.0.1", "--http-port", str(chosen)),
        ]
        proc = common.launch(
            f"Keycloak ({title})",
            command,
            logs / "keycloak.log",
            lambda: common.answers(plain, url, b'"issuer"'),
            env,
            START_TIMEOUT,
        )
        return {"pid": proc.pid, "port": chosen}

    if port is not None:
        return attempt()
    result: dict[str, int] = common.retrying_ports("Keycloak", attempt)
    return result


def start(
    directory: Path, cache: Path, watch_pid: int | None, port: int | None = None
) -> dict[str, Any]:
    """Start a fresh Keycloak for `directory`; return the recorded state."""
    dist = fetch(cache)
    java = java_home()
    paths = Paths.of(directory)
    paths.root.mkdir(parents=True, exist_ok=True)
    previous = common.read_state(paths.state)
    if previous and common.ours(previous["keycloak"]["pid"], PROGRAM, paths.home):
        raise ToolError(
            f"step start: Keycloak (pid {previous['keycloak']['pid']}) already runs for "
            f"{paths.root}; run `{sys.argv[0]} stop --dir {paths.root}` first"
        )
    shutil.rmtree(paths.home, ignore_errors=True)
    shutil.copytree(dist, paths.home, symlinks=True)
    password = os.environ.get("KC_BOOTSTRAP_ADMIN_PASSWORD") or _new_password(paths.password)
    server = _launch(paths.home, paths.root, java, "dev mode", password, port)
    state: dict[str, Any] = {
        "keycloak": server,
        "url": f"http://127.0.0.1:{server['port']}",
        "admin_user": ADMIN_USER,
        "version": KEYCLOAK_VERSION,
    }
    if watch_pid is not None:
        script = Path(__file__).resolve()
        pid = common.spawn_watchdog(script, paths.root, watch_pid, paths.watchdog_log)
        state["watchdog"] = {"pid": pid, "owner": watch_pid}
    common.write_state(paths.state, state)
    return state


def _new_password(path: Path) -> str:
    password = secrets.token_urlsafe(18)
    path.touch(mode=0o600)
    path.write_text(password + "\n")
    return password


def stop(directory: Path) -> bool:
    """Stop what `start` started in `directory`; False if nothing was recorded there."""
    paths = Paths.of(directory)
    state = common.read_state(paths.state)
    if state is None:
        return False
    watchdog = state.get("watchdog")
    if watchdog and watchdog["pid"] != os.getpid():
        common.terminate(watchdog["pid"], "_watch", paths.root)
    common.terminate(state["keycloak"]["pid"], PROGRAM, paths.home)
    paths.state.unlink(missing_ok=True)
    return True


def watch(directory: Path, owner: int) -> None:
    """Stop the server once `owner` exits: a test session killed hard leaves nothing behind."""
    paths = Paths.of(directory)
    common.watch(paths.state, owner, lambda: stop(paths.root))


# --- command line ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dev_keycloak.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fetch_parser = commands.add_parser("fetch", help="download and prepare once (idempotent)")
    fetch_parser.add_argument(
        "--quiet", action="store_true", help="print nothing when it is already cached"
    )
    commands.add_parser("path", help="print the prepared distribution's directory")
    start_parser = commands.add_parser("start", help="start a fresh Keycloak on a free port")
    start_parser.add_argument("--dir", required=True, type=Path, help="the server's directory")
    start_parser.add_argument(
        "--port", type=int, help="the loopback port to listen on (default: a free one)"
    )
    start_parser.add_argument(
        "--watch-pid", type=int, help="also stop the server when this process exits (tests)"
    )
    stop_parser = commands.add_parser("stop", help="stop it (SIGTERM, then SIGKILL)")
    stop_parser.add_argument("--dir", required=True, type=Path, help="the server's directory")
    internal = commands.add_parser("_watch")
    internal.add_argument("--dir", required=True, type=Path)
    internal.add_argument("--pid", required=True, type=int)
    return parser


def _report_start(state: dict[str, Any], directory: Path, started: float) -> None:
    paths = Paths.of(directory)
    say(f"ready in {elapsed(time.monotonic() - started)}")
    secret = f"{paths.password}" if paths.password.exists() else "$KC_BOOTSTRAP_ADMIN_PASSWORD"
    print(f"url:      {state['url']} (Keycloak {state['version']}, dev mode)")
    print(f"admin:    {state['admin_user']}, password in {secret}")
    print(f"console:  {state['url']}/admin/")
    print(f"log:      {paths.log}")
    print(f"stop:     {sys.argv[0]} stop --dir {paths.root}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cache = cache_dir()
    started = time.monotonic()
    try:
        if args.command == "fetch":
            cached = _ready(cache)
            dist = fetch(cache)
            if cached and not args.quiet:
                say(f"Keycloak {KEYCLOAK_VERSION} already prepared in {dist}")
        elif args.command == "path":
            if not _ready(cache):
                raise ToolError(f"step path: not fetched yet; run {sys.argv[0]} fetch")
            print(cache / "dist")
        elif args.command == "start":
            state = start(args.dir, cache, args.watch_pid, args.port)
            _report_start(state, args.dir, started)
        elif args.command == "stop":
            stopped = stop(args.dir)
            say(f"stopped Keycloak in {args.dir}" if stopped else f"nothing running in {args.dir}")
        else:
            watch(args.dir, args.pid)
    except ToolError as error:
        print(f"dev-keycloak: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dev-keycloak: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
