"""Redis as operators run it, on loopback, for the tests of issue 37: a Sentinel set (a primary,
a replica and three sentinels, each with a password) from Debian's `redis-server` (`--sentinel`
is what the `redis-sentinel` command runs)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from support import Process, free_port, wait_for_port

SERVER_PASSWORD = "server-pw"
SENTINEL_PASSWORD = "sentinel-pw"
SERVICE = "mymaster"


@dataclass
class SentinelSet:
    """The running set: its data servers by role at start, and its sentinels' ports."""

    primary: Process
    primary_port: int
    replica: Process
    replica_port: int
    sentinel_ports: tuple[int, ...]

    @property
    def url(self) -> str:
        """The gateway's URL for the set (both passwords)."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return (
            f"redis+sentinel://:{SERVER_PASSWORD}@{hosts}/{SERVICE}/0"
            f"?sentinel_password={SENTINEL_PASSWORD}"
        )


def _server_conf(directory: Path, port: int, replica_of: int | None) -> Path:
    lines = [
        f"port {port}",
        "bind 127.0.0.1",
        f"dir {directory}",
        f"requirepass {SERVER_PASSWORD}",
        f"masterauth {SERVER_PASSWORD}",
        'save ""',
        "appendonly no",
        "daemonize no",
    ]
    if replica_of is not None:
        lines.append(f"replicaof 127.0.0.1 {replica_of}")
    conf = directory / f"redis-{port}.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _sentinel_conf(directory: Path, port: int, primary: int) -> Path:
    # Sentinel rewrites its own file: each gets a writable copy.
    conf = directory / f"sentinel-{port}.conf"
    conf.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {directory}",
                "daemonize no",
                f"requirepass {SENTINEL_PASSWORD}",
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2",
                f"sentinel auth-pass {SERVICE} {SERVER_PASSWORD}",
                f"sentinel sentinel-pass {SENTINEL_PASSWORD}",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 5000",
            ]
        )
        + "\n"
    )
    return conf


@contextmanager
def sentinel_set(logs: Path, directory: Path) -> Iterator[SentinelSet]:
    """A primary, its replica and three sentinels watching them; all stopped on exit."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required: `make test` installs the Debian package"
    directory.mkdir(parents=True, exist_ok=True)
    primary_port, replica_port = free_port(), free_port()
    with ExitStack() as running:

        def start(name: str, port: int, *args: str) -> Process:
            process = Process(name, [binary, *args], logs)
            running.callback(process.stop)
            wait_for_port(port, process)
            return process

        primary = start(
            f"redis-primary-{primary_port}",
            primary_port,
            str(_server_conf(directory, primary_port, None)),
        )
        replica = start(
            f"redis-replica-{replica_port}",
            replica_port,
            str(_server_conf(directory, replica_port, primary_port)),
        )
        ports = []
        for _ in range(3):
            port = free_port()
            conf = _sentinel_conf(directory, port, primary_port)
            start(f"redis-sentinel-{port}", port, str(conf), "--sentinel")
            ports.append(port)
        yield SentinelSet(primary, primary_port, replica, replica_port, tuple(ports))
