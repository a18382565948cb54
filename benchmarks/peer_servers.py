"""The processes of the peers benchmark (`benchmarks/peers.py`): the MCP backend
(`peers_backend.py`, on the load core), and on the server core our gateway, mcp-proxy and HAProxy,
each with the same JWT check and tool rule; and mcp-proxy itself, installed from crates.io when
missing."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from configs import mcp_proxy_audience, mcp_proxy_toml
from joserfc import jwt
from peer_checks import ALLOWED, HEADER, Target
from processes import HERE, LOAD_CORE, PY, SERVER_CORE, free_port
from scenarios import Bench
from servers import Server

MCP_PROXY_VERSION = "0.6.0"
# The gateway's tool rule; its route rule (configs.gateway_yaml) is `"mcp-agent" in jwt.groups`.
GATEWAY_TOOL_RULE = f'mcp.tool.name == "{ALLOWED}"'


@dataclass(frozen=True)
class Variant:
    """One row of the table: a proxy, loaded with one token or a new one per request."""

    label: str
    proxy: str
    many_tokens: bool = False


VARIANTS = {
    "gateway": (
        Variant("mcp-oauth-gateway", "gateway"),
        Variant("mcp-oauth-gateway, a new token per request", "gateway", many_tokens=True),
    ),
    "mcp-proxy": (Variant(f"mcp-proxy {MCP_PROXY_VERSION}", "mcp-proxy"),),
    "haproxy": (Variant("HAProxy jwt_verify", "haproxy"),),
}


def cache_dir() -> Path:
    """Where mcp-proxy is installed: outside the repository, like the other built tools."""
    root = os.environ.get("MCP_OAUTH_GATEWAY_PEERS_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "mcp-oauth-gateway"
    return base / f"mcp-proxy-{MCP_PROXY_VERSION}"


def installed_version(binary: Path) -> str:
    """The version `cargo install` recorded next to the binary (its root's .crates.toml)."""
    record = binary.resolve().parent.parent / ".crates.toml"
    found = (
        re.search(r'"mcp-proxy (\S+) \(registry', record.read_text()) if record.exists() else None
    )
    return found.group(1) if found else "unknown (a given binary)"


def mcp_proxy_binary(given: str | None) -> Path:
    """mcp-proxy: the given binary, or the cached install, installed now when missing (a
    registry install, like pip's: `cargo install --locked`, a few minutes the first time)."""
    if given:
        return Path(given)
    root = cache_dir()
    binary = root / "bin" / "mcp-proxy"
    if binary.exists():
        return binary
    if not shutil.which("cargo"):
        raise SystemExit(
            f"error: cargo is required to install mcp-proxy {MCP_PROXY_VERSION} from crates.io "
            "(Rust 1.90 or newer: https://rustup.rs); or pass --mcp-proxy PATH, or "
            "--proxies gateway,haproxy to leave it out"
        )
    print(
        f"[peers] installing mcp-proxy {MCP_PROXY_VERSION} from crates.io into {root} "
        "(cargo install --locked; a few minutes, once)",
        file=sys.stderr,
        flush=True,
    )
    cmd = ["cargo", "install", "mcp-proxy", "--version", MCP_PROXY_VERSION, "--locked"]
    done = subprocess.run([*cmd, "--root", str(root)], check=False)
    if done.returncode != 0 or not binary.exists():
        raise SystemExit(
            f"error: `{' '.join(cmd)}` failed (exit {done.returncode}, its output above); "
            "mcp-proxy needs Rust 1.90 or newer"
        )
    return binary


class PeerBench(Bench):
    """Starts the peers' processes; the measurements are `Bench`'s."""

    # A late answer is a latency, not an error: at 512 connections on a loaded core some wait
    # longer than wrk's default 2 s, which would drop them from the percentiles.
    wrk_timeout = "10s"

    def __init__(self, args: argparse.Namespace, mcp_proxy: Path | None) -> None:
        super().__init__(args)
        self.mcp_proxy_path = mcp_proxy
        self.jwks = self.work / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [self.key.as_dict(private=False)]}))
        # The group list mcp-proxy's role mapping is keyed by: the token's, as JSON text.
        self.groups_text = json.dumps(self.claims(0)["groups"], separators=(",", ":"))

    def peers_backend(self) -> Server:
        """The MCP backend, on the load core."""
        port = free_port()
        cmd = [PY, str(HERE / "peers_backend.py"), str(port), str(self.jwks)]
        return self.spawn("peers-backend", cmd, LOAD_CORE, port)

    def mcp_proxy(self, backend_port: int) -> Server:
        """mcp-proxy in front of the backend, on the server core."""
        assert self.mcp_proxy_path is not None
        port = free_port()
        config = self.work / f"mcp-proxy-{port}.toml"
        admin = os.urandom(16).hex()
        config.write_text(mcp_proxy_toml(port, backend_port, ALLOWED, self.groups_text, admin))
        cmd = [str(self.mcp_proxy_path), "--config", str(config)]
        return self.spawn("mcp-proxy", cmd, SERVER_CORE, port)

    def start(
        self, names: list[str], cache: int
    ) -> tuple[Server, dict[str, tuple[Server, Target]]]:
        """The backend and the named proxies, each with its target (our gateway remembering
        `cache` verified tokens)."""
        backend = self.peers_backend()
        out: dict[str, tuple[Server, Target]] = {}
        for name in names:
            if name == "gateway":
                flags = ["--token-cache-entries", str(cache)]
                server = self.gateway(backend.port, tool_rule=GATEWAY_TOOL_RULE, flags=flags)
                target = Target(name, server.port, "/mcp", self.token)
            elif name == "mcp-proxy":
                server = self.mcp_proxy(backend.port)
                audience = mcp_proxy_audience(server.port)
                token = jwt.encode(HEADER, {**self.claims(0), "aud": audience}, self.key)
                target = Target(name, server.port, "/", token, "bench/", audience)
            else:
                server = self.haproxy(backend.port, tool=ALLOWED)
                target = Target(name, server.port, "/mcp", self.token)
            out[name] = (server, target)
        return backend, out
