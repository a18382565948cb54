"""The servers a benchmark run starts, each pinned to a core and logged in a work directory: the
static backend, the gateway (with an optional stage on), HAProxy and nginx; and the RS256 tokens
they are sent. The work directory (logs, configurations, token files: about 100 MB after a long
run) is removed when the benchmark ends; BENCH_KEEP_WORK=1 keeps it and prints where."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import processes
from configs import (
    AUDIENCE,
    ISSUER,
    STAGES,
    gateway_yaml,
    haproxy_cfg,
    nginx_conf,
    stage_yaml,
    tool_rule_yaml,
)
from joserfc import jwt
from joserfc.jwk import RSAKey
from processes import HERE, LOAD_CORE, PY, SERVER_CORE, free_port, pinned


@dataclass
class Server:
    name: str
    popen: subprocess.Popen[bytes]
    port: int

    def stop(self) -> None:
        """Terminate and reap."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()


def leave_work(work: Path) -> None:
    """Remove a run's work directory, or say where it stays (BENCH_KEEP_WORK=1)."""
    if os.environ.get("BENCH_KEEP_WORK") == "1":
        print(f"[bench] logs and configurations kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)


class Servers:
    """Starts the servers of a run and stops them all; mints the tokens."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="mcp-gw-bench-"))
        atexit.register(leave_work, self.work)
        self.key = RSAKey.generate_key(
            2048, parameters={"kid": "bench", "alg": "RS256", "use": "sig"}
        )
        self.token = self.mint(0)
        self.servers: list[Server] = []

    def mint(self, i: int) -> str:
        """A valid RS256 token with realistic claims (11 claims, about 800 bytes)."""
        header = {"alg": "RS256", "kid": "bench", "typ": "at+jwt"}
        return jwt.encode(header, self.claims(i), self.key)

    def claims(self, i: int) -> dict[str, Any]:
        """The claims of token `i` (`mint`)."""
        now = int(time.time())
        return {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": f"user-{i}",
            "exp": now + 7200,
            "iat": now,
            "nbf": now - 5,
            "jti": f"jti-{i:08d}",
            "email": f"user-{i}@example.com",
            "groups": ["mcp-agent", "users", "admins"],
            "scope": "openid profile email",
            "azp": AUDIENCE,
        }

    def tokens_file(self, count: int) -> Path:
        """A file of `count` distinct tokens, one a line (written once), for post.lua."""
        path = self.work / f"tokens-{count}.txt"
        if not path.exists():
            path.write_text("\n".join(self.mint(i) for i in range(1, count + 1)) + "\n")
        return path

    def spawn(
        self, name: str, cmd: list[str], core: str, port: int, env: dict[str, str] | None = None
    ) -> Server:
        """Start `cmd` pinned to `core`, logging into the work directory; once `port` listens."""
        log = (self.work / f"{name}.log").open("ab")
        popen = subprocess.Popen(
            pinned(core, cmd),
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=self.work,
        )
        server = Server(name, popen, port)
        self.servers.append(server)
        # Looked up at each call: instructions.py waits longer for servers under valgrind.
        processes.wait_port(port)
        return server

    def backend(self, core: str) -> Server:
        """The static JSON backend (backend.py) on `core`."""
        port = free_port()
        return self.spawn("backend", [PY, str(HERE / "backend.py"), str(port)], core, port)

    def gateway(
        self,
        backend_port: int,
        core: str = SERVER_CORE,
        stage: str = "plain",
        tool_rule: str | None = None,
        flags: Sequence[str] = (),
    ) -> Server:
        """The gateway in front of `backend_port`, with the optional `stage` on, or a tool rule
        (one CEL expression), and more `serve` flags."""
        port = free_port()
        traffic, backend, stage_flags, env = self.stage_settings(stage)
        if tool_rule is not None:
            backend = tool_rule_yaml(tool_rule)
        config = self.work / f"gateway-{port}.yaml"
        jwks = json.dumps({"keys": [self.key.as_dict(private=False)]})
        config.write_text(gateway_yaml(port, backend_port, jwks, traffic, backend))
        cmd = [PY, "-m", "mcp_oauth_gateway", "serve", "-f", str(config), *stage_flags, *flags]
        return self.spawn("gateway", cmd, core, port, env)

    def stage_settings(self, stage: str) -> tuple[str, str, list[str], dict[str, str]]:
        """What a stage variant adds to the plain gateway: policy YAML under `traffic`, under
        `spec` (the backend section), serve flags and environment."""
        names = set(STAGES) if stage == "all" else {stage}
        traffic, backend = stage_yaml(names)
        flags: list[str] = []
        env: dict[str, str] = {}
        if "metrics" in names:
            flags += ["--admin-port", str(free_port())]
        if "JSON logs" in names:
            flags += ["--log-format", "json"]
        if "tracing" in names:
            # Spans go to a static responder on the load core (an OTLP sink that answers 200).
            sink = self.backend(LOAD_CORE)
            flags += ["--tracing", "otlp"]
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink.port}"
        return traffic, backend, flags, env

    def haproxy(self, backend_port: int, tool: str | None = None) -> Server:
        """HAProxy checking the token with jwt_verify in front of `backend_port` (with `tool`,
        letting only that tool be called)."""
        port = free_port()
        pem = self.work / "rsa_pub.pem"
        pem.write_bytes(self.key.as_pem(private=False))
        cfg = self.work / f"haproxy-{port}.cfg"
        cfg.write_text(haproxy_cfg(port, backend_port, pem, tool))
        return self.spawn("haproxy", ["haproxy", "-f", str(cfg), "-db"], SERVER_CORE, port)

    def nginx(self, backend_port: int) -> Server:
        """nginx as a plain proxy in front of `backend_port`."""
        port = free_port()
        prefix = self.work / f"nginx-{port}"
        (prefix / "logs").mkdir(parents=True)
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_conf(prefix, port, backend_port))
        return self.spawn(
            "nginx",
            ["nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
            SERVER_CORE,
            port,
        )

    def stop_all(self) -> None:
        """Stop every server started, the last first."""
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()
