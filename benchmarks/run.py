"""The benchmark: the gateway against a direct backend and against HAProxy (the C ceiling) and
nginx, in one run on one machine, each server pinned to one core and the load on the other.

    python benchmarks/run.py            # the full run (several minutes), report in results/
    python benchmarks/run.py --smoke    # a few seconds: checks that everything runs

Scenarios: (a) static JSON backend, direct; (b) gateway (RS256 JWT + one CEL rule), one token;
(c) gateway with a different token per request (more tokens than the cache holds); (d) HAProxy
`jwt_verify` + claim checks, and nginx as a plain proxy; (e) gateway in front of a real `mcp` SDK
server doing tools/call (CPU per request, gateway vs backend); (f) SSE through the gateway vs
direct. Plus one-connection latency, added latency at a fixed 500 req/s, and RSS over a long run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from joserfc import jwt
from joserfc.jwk import RSAKey

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
ISSUER = "https://idp.bench.example/application/o/mcp/"
AUDIENCE = "mcp-bench"
SERVER_CORE, LOAD_CORE = "0", "1"
# The optional stages whose cost per request the report gives (each alone, then all at once).
STAGES = ("rate limit", "transformation", "tool authorization", "metrics", "JSON logs", "tracing")
GAP_NOTE = (
    "Targets not met, and what limits them: see [PROFILE.md](../PROFILE.md) (cache misses: "
    "the RSA check, the same work HAProxy does, and the Python around it; one connection: "
    "compare with the direct backend's own c=1 row, the host's scheduling delay is in both; "
    "gateway ÷ direct backend: uvicorn's per-request task, scope and event, and the Python "
    "around three socket operations; SSE: a stream that starts late is as late on every "
    "event, so compare its first event with the direct stream's)."
)


# SSE streams measured each way (5 events each, 100 ms apart).
SSE_STREAMS = 5


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 20) -> None:
    """Until something listens on the port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def pinned(core: str, cmd: list[str]) -> list[str]:
    """The command pinned to one core (when taskset exists)."""
    return ["taskset", "-c", core, *cmd] if shutil.which("taskset") else cmd


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its children."""
    total = 0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def rss_mb(pid: int, key: str = "VmRSS") -> float:
    """Resident (or peak, with VmHWM) memory of a process tree, MB."""
    total = 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


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


@dataclass
class Result:
    scenario: str
    rps: float
    p50: float
    p99: float
    cpu_us: float = 0.0
    rss: float = 0.0
    errors: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def parse_wrk(text: str) -> tuple[float, float, float, int, int]:
    """req/s, p50 ms, p99 ms, requests, non-2xx/3xx + socket errors."""

    def ms(value: str) -> float:
        number, unit = re.match(r"([\d.]+)(\w+)", value).groups()  # type: ignore[union-attr]
        return float(number) * {"us": 0.001, "ms": 1, "s": 1000}[unit]

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))  # type: ignore[union-attr]
    # Anchored: "+/- Stdev" columns also end in "…50%".
    p50 = ms(re.search(r"^\s*50%\s+(\S+)", text, re.M).group(1))  # type: ignore[union-attr]
    p99 = ms(re.search(r"^\s*99%\s+(\S+)", text, re.M).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    return rps, p50, p99, requests, errors


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(tempfile.mkdtemp(prefix="mcp-gw-bench-"))
        self.key = RSAKey.generate_key(
            2048, parameters={"kid": "bench", "alg": "RS256", "use": "sig"}
        )
        self.token = self.mint(0)
        self.servers: list[Server] = []

    # --- set-up ---------------------------------------------------------------------------

    def mint(self, i: int) -> str:
        """A valid RS256 token with realistic claims (11 claims, about 800 bytes)."""
        now = int(time.time())
        claims = {
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
        return jwt.encode({"alg": "RS256", "kid": "bench", "typ": "at+jwt"}, claims, self.key)

    def tokens_file(self, count: int) -> Path:
        path = self.work / f"tokens-{count}.txt"
        if not path.exists():
            path.write_text("\n".join(self.mint(i) for i in range(1, count + 1)) + "\n")
        return path

    def spawn(
        self, name: str, cmd: list[str], core: str, port: int, env: dict[str, str] | None = None
    ) -> Server:
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
        wait_port(port)
        return server

    def backend(self, core: str) -> Server:
        port = free_port()
        return self.spawn("backend", [PY, str(HERE / "backend.py"), str(port)], core, port)

    def gateway(self, backend_port: int, core: str = SERVER_CORE, stage: str = "plain") -> Server:
        port = free_port()
        traffic, backend, flags, env = self.stage_settings(stage)
        config = self.work / f"gateway-{port}.yaml"
        jwks = json.dumps({"keys": [self.key.as_dict(private=False)]})
        config.write_text(f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{matches: [{{path: {{type: PathPrefix, value: /mcp}}}}], backendRefs: [{{name: b}}]}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: {backend_port}}}}}]}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: auth}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks: {{inline: '{jwks}'}}
    authorization:
      action: Allow
      policy: {{matchExpressions: ['"mcp-agent" in jwt.groups']}}
{traffic}{backend}""")
        cmd = [PY, "-m", "mcp_oauth_gateway", "serve", "-f", str(config), *flags]
        return self.spawn("gateway", cmd, core, port, env)

    def stage_settings(self, stage: str) -> tuple[str, str, list[str], dict[str, str]]:
        """What a stage variant adds to the plain gateway: policy YAML under `traffic`, under
        `spec` (the backend section), serve flags and environment."""
        names = set(STAGES) if stage == "all" else {stage}
        traffic = backend = ""
        flags: list[str] = []
        env: dict[str, str] = {}
        if "rate limit" in names:
            traffic += "    rateLimit: {key: 'jwt.sub', requests: 1000000000, window: 1m}\n"
        if "transformation" in names:
            traffic += (
                "    transformation:\n      request:\n        set:\n"
                "          - {name: X-User, value: 'jwt.sub'}\n"
                "          - {name: X-Groups, value: 'jwt.groups.join(\",\")'}\n"
                "        remove: [X-Internal-Secret]\n"
            )
        if "tool authorization" in names:
            backend = (
                "  backend:\n    mcp:\n      authorization:\n        action: Allow\n"
                '        policy: {matchExpressions: [\'mcp.tool.name in ["add", "search"]\']}\n'
            )
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

    def haproxy(self, backend_port: int) -> Server:
        port = free_port()
        pem = self.work / "rsa_pub.pem"
        pem.write_bytes(self.key.as_pem(private=False))
        cfg = self.work / f"haproxy-{port}.cfg"
        cfg.write_text(f"""
global
    maxconn 4000
    nbthread 1
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    option http-no-delay
frontend fe
    bind 127.0.0.1:{port}
    http-request set-var(txn.bearer) http_auth_bearer
    http-request set-var(txn.alg) var(txn.bearer),jwt_header_query('$.alg')
    http-request deny deny_status 401 unless {{ var(txn.alg) -m str RS256 }}
    http-request set-var(txn.valid) var(txn.bearer),jwt_verify(txn.alg,"{pem}")
    http-request deny deny_status 401 unless {{ var(txn.valid) -m int 1 }}
    http-request set-var(txn.iss) var(txn.bearer),jwt_payload_query('$.iss')
    http-request deny deny_status 401 unless {{ var(txn.iss) -m str {ISSUER} }}
    http-request set-var(txn.aud) var(txn.bearer),jwt_payload_query('$.aud')
    http-request deny deny_status 401 unless {{ var(txn.aud) -m str {AUDIENCE} }}
    http-request set-var(txn.exp) var(txn.bearer),jwt_payload_query('$.exp','int')
    http-request set-var(txn.now) date()
    http-request deny deny_status 401 if {{ var(txn.exp),sub(txn.now) -m int le 0 }}
    http-request set-var(txn.group) var(txn.bearer),jwt_payload_query('$.groups[0]')
    http-request deny deny_status 403 unless {{ var(txn.group) -m str mcp-agent }}
    http-request del-header Authorization
    default_backend be
backend be
    http-reuse always
    server s1 127.0.0.1:{backend_port}
""")
        return self.spawn("haproxy", ["haproxy", "-f", str(cfg), "-db"], SERVER_CORE, port)

    def nginx(self, backend_port: int) -> Server:
        port = free_port()
        prefix = self.work / f"nginx-{port}"
        (prefix / "logs").mkdir(parents=True)
        conf = prefix / "nginx.conf"
        conf.write_text(f"""
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix};
    proxy_temp_path {prefix};
    upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
""")
        return self.spawn(
            "nginx",
            ["nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
            SERVER_CORE,
            port,
        )

    def stop_all(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()

    # --- measurements ---------------------------------------------------------------------

    def wrk(
        self,
        url: str,
        conns: int,
        seconds: float,
        token: str | None = None,
        tokens: Path | None = None,
    ) -> tuple[float, float, float, int, int]:
        env = {**os.environ, "TOKEN": token or "", "TOKENS_FILE": str(tokens or "")}
        cmd = pinned(
            LOAD_CORE,
            [
                "wrk",
                "-t1",
                f"-c{conns}",
                f"-d{max(1, round(seconds))}s",
                "--latency",
                "-s",
                str(HERE / "post.lua"),
                url,
            ],
        )
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 60)
        if done.returncode != 0:
            raise RuntimeError(f"wrk failed: {done.stderr}")
        try:
            return parse_wrk(done.stdout)
        except (AttributeError, ValueError, KeyError) as exc:
            raise RuntimeError(f"cannot read wrk's output ({exc}):\n{done.stdout}") from exc

    def measure(
        self,
        scenario: str,
        url: str,
        measured: Server,
        conns: int,
        token: str | None = None,
        tokens: Path | None = None,
        also: Server | None = None,
    ) -> Result:
        self.wrk(url, conns, self.args.warmup, token, tokens)
        before = cpu_seconds(measured.popen.pid)
        before_also = cpu_seconds(also.popen.pid) if also else 0.0
        rps, p50, p99, requests, errors = self.wrk(url, conns, self.args.duration, token, tokens)
        cpu = cpu_seconds(measured.popen.pid) - before
        result = Result(
            scenario,
            rps,
            p50,
            p99,
            cpu_us=cpu / max(requests, 1) * 1e6,
            rss=rss_mb(measured.popen.pid, "VmHWM"),
            errors=errors,
        )
        if also is not None:
            result.extra["backend_cpu_us"] = (
                (cpu_seconds(also.popen.pid) - before_also) / max(requests, 1) * 1e6
            )
        return result

    def run_round(self) -> list[Result]:
        a = self.args
        out: list[Result] = []
        tokens = self.tokens_file(a.tokens)

        def with_backend(fn):  # noqa: ANN001, ANN202
            try:
                return fn()
            finally:
                self.stop_all()

        def direct() -> None:
            b = self.backend(SERVER_CORE)
            url = f"http://127.0.0.1:{b.port}/mcp"
            out.append(self.measure("a direct backend", url, b, a.conns))
            out.append(self.measure("a direct backend c=1", url, b, 1))

        with_backend(direct)

        def gateway_and_haproxy() -> None:
            # Both servers wait on the server core and are loaded in turn (b, d, c, then the
            # one-connection runs): each ratio's two sides are measured seconds apart, so a
            # noisy neighbour on a shared machine weighs on both.
            b = self.backend(LOAD_CORE)
            g = self.gateway(b.port)
            h = self.haproxy(b.port) if shutil.which("haproxy") else None
            url = f"http://127.0.0.1:{g.port}/mcp"
            hurl = f"http://127.0.0.1:{h.port}/mcp" if h else ""
            out.append(self.measure("b gateway, one token", url, g, a.conns, token=self.token))
            if h:
                out.append(self.measure("d HAProxy jwt_verify", hurl, h, a.conns, self.token))
            out.append(
                self.measure("c gateway, a new token per request", url, g, a.conns, tokens=tokens)
            )
            out.append(self.measure("b gateway c=1", url, g, 1, token=self.token))
            if h:
                out.append(self.measure("d HAProxy jwt_verify c=1", hurl, h, 1, token=self.token))

        with_backend(gateway_and_haproxy)
        if shutil.which("nginx"):

            def nginx() -> None:
                b = self.backend(LOAD_CORE)
                n = self.nginx(b.port)
                out.append(
                    self.measure(
                        "d nginx plain proxy", f"http://127.0.0.1:{n.port}/mcp", n, a.conns
                    )
                )

            with_backend(nginx)
        return out

    def quick(self) -> list[Result]:
        """The gateway's two target scenarios (b one token, c a new token per request) and
        HAProxy beside them, for tuning."""
        tokens = self.tokens_file(self.args.tokens)
        b = self.backend(LOAD_CORE)
        g = self.gateway(b.port)
        url = f"http://127.0.0.1:{g.port}/mcp"
        try:
            out = [
                self.measure("b gateway, one token", url, g, self.args.conns, token=self.token),
                self.measure("c gateway, a new token", url, g, self.args.conns, tokens=tokens),
            ]
        finally:
            self.stop_all()
        if shutil.which("haproxy"):
            b = self.backend(LOAD_CORE)
            h = self.haproxy(b.port)
            hurl = f"http://127.0.0.1:{h.port}/mcp"
            out.append(self.measure("d HAProxy", hurl, h, self.args.conns, token=self.token))
        return out

    def stage_costs(self) -> list[Result]:
        """Scenario b with each optional stage on, and with all of them, in interleaved rounds
        beside the plain gateway: the added CPU per request is each variant's median minus
        the plain one's."""
        variants = ("plain", *STAGES, "all")
        rounds: list[list[Result]] = []
        for i in range(self.args.rounds):
            print(f"[bench] stage costs, round {i + 1}/{self.args.rounds}", file=sys.stderr)
            out = []
            for stage in variants:
                try:
                    b = self.backend(LOAD_CORE)
                    g = self.gateway(b.port, stage=stage)
                    url = f"http://127.0.0.1:{g.port}/mcp"
                    out.append(self.measure(f"stage: {stage}", url, g, self.args.conns, self.token))
                finally:
                    self.stop_all()
            rounds.append(out)
        chosen = median_results(rounds)
        for result in chosen:
            cpus = [r.cpu_us for done in rounds for r in done if r.scenario == result.scenario]
            result.extra["median_cpu_us"] = cpus[middle(cpus)]
        return chosen

    def security_checks(self) -> str:
        """The in-process cost of the request checks the security fixes added."""
        done = subprocess.run(
            pinned(SERVER_CORE, [PY, str(HERE / "security_checks.py")]),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        return done.stdout

    def mcp_share(self) -> list[Result]:
        """(e): a real mcp SDK server alone on one core, then the gateway in front of it (CPU
        per request of each)."""
        try:
            import mcp  # noqa: F401
        except ImportError:
            return []
        out = []
        try:
            port = free_port()
            alone = self.spawn(
                "mcp-sdk", [PY, str(HERE / "mcp_backend.py"), str(port)], SERVER_CORE, port
            )
            out.append(
                self.measure(
                    "e mcp SDK server alone", f"http://127.0.0.1:{port}/mcp", alone, self.args.conns
                )
            )
        finally:
            self.stop_all()
        try:
            port = free_port()
            backend = self.spawn(
                "mcp-sdk", [PY, str(HERE / "mcp_backend.py"), str(port)], LOAD_CORE, port
            )
            g = self.gateway(port)
            out.append(
                self.measure(
                    "e gateway → mcp SDK tools/call",
                    f"http://127.0.0.1:{g.port}/mcp",
                    g,
                    16,
                    token=self.token,
                    also=backend,
                )
            )
        finally:
            self.stop_all()
        return out

    def probe(self, *args: str) -> dict:
        done = subprocess.run(
            pinned(LOAD_CORE, [PY, str(HERE / "probes.py"), *args]),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        return json.loads(done.stdout)

    def latency_and_sse(self) -> dict[str, dict]:
        """Added p50 at a fixed 500 req/s, and SSE event timing, gateway vs direct."""
        try:
            b = self.backend(LOAD_CORE)
            g = self.gateway(b.port)
            seconds = str(self.args.rate_seconds)
            direct = self.probe("rate", f"http://127.0.0.1:{b.port}/mcp", "500", seconds)
            through = self.probe(
                "rate", f"http://127.0.0.1:{g.port}/mcp", "500", seconds, self.token
            )
            # One stream is one sample of the host's scheduling: several, direct and through
            # the gateway in turn, and the report takes the median stream.
            sse = [
                (
                    self.probe("sse", f"http://127.0.0.1:{b.port}/mcp")["arrivals_ms"],
                    self.probe("sse", f"http://127.0.0.1:{g.port}/mcp", self.token)["arrivals_ms"],
                )
                for _ in range(1 if self.args.smoke else SSE_STREAMS)
            ]
            return {"rate_direct": direct, "rate_gateway": through, "sse": sse}
        finally:
            self.stop_all()

    def soak(self) -> dict[str, float]:
        """RSS of the gateway after warm-up and after `--soak` requests."""
        try:
            b = self.backend(LOAD_CORE)
            g = self.gateway(b.port)
            url = f"http://127.0.0.1:{g.port}/mcp"
            self.wrk(url, 64, 5, self.token)
            start = rss_mb(g.popen.pid)
            sent = 0
            while sent < self.args.soak:
                sent += self.wrk(url, 64, 20, self.token)[3]
            return {"requests": sent, "rss_start_mb": start, "rss_end_mb": rss_mb(g.popen.pid)}
        finally:
            self.stop_all()


def round_ratios(rounds: list[list[Result]]) -> dict[str, list[float]]:
    """b/d and c/d within each round."""
    out: dict[str, list[float]] = {"b/d": [], "c/d": []}
    for done in rounds:
        by = {r.scenario: r.rps for r in done}
        d = by.get("d HAProxy jwt_verify")
        if not d:
            continue
        for key, scenario in (
            ("b/d", "b gateway, one token"),
            ("c/d", "c gateway, a new token per request"),
        ):
            if scenario in by:
                out[key].append(by[scenario] / d)
    return out


def middle(values: list[float]) -> int:
    """The index of the median value (the upper one of an even count), as every median in
    the report is chosen: a value that was measured, not an average of two."""
    return sorted(range(len(values)), key=values.__getitem__)[len(values) // 2]


def median_results(rounds: list[list[Result]]) -> list[Result]:
    """Per scenario, the round with the median req/s (and its latencies)."""
    by_name: dict[str, list[Result]] = {}
    for round_results in rounds:
        for result in round_results:
            by_name.setdefault(result.scenario, []).append(result)
    out = []
    for results in by_name.values():
        rates = [r.rps for r in results]
        chosen = results[middle(rates)]
        chosen.extra["min_rps"] = min(rates)
        chosen.extra["max_rps"] = max(rates)
        out.append(chosen)
    return out


def stage_lines(stages: list[Result], security: str | None) -> list[str]:
    """The report's section on the optional stages and the security checks."""
    lines: list[str] = []
    plain = next((r for r in stages if r.scenario == "stage: plain"), None)
    if plain is not None:
        base = plain.extra["median_cpu_us"]
        lines += [
            "",
            "Optional stages: scenario b with each stage on (and all of them), interleaved with "
            "the plain gateway; CPU µs/req is the median over the rounds, `added` the "
            "difference to the plain gateway's.",
            "",
            "| gateway | req/s (min-max) | CPU µs/req | added µs/req | errors |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in stages:
            cpu = r.extra["median_cpu_us"]
            added = "" if r is plain else f"{cpu - base:+.1f}"
            lines.append(
                f"| {r.scenario.removeprefix('stage: ')} | {r.rps:,.0f} "
                f"({r.extra.get('min_rps', r.rps):,.0f}-{r.extra.get('max_rps', r.rps):,.0f}) "
                f"| {cpu:.1f} | {added} | {r.errors} |"
            )
        lines += [
            "",
            "Controller mode adds nothing per request: its pipelines are the same objects, "
            "built by the same code from the watched resources; the only difference on the "
            "request path is that a listener's table is looked up by exact port.",
        ]
    if security:
        lines += [
            "",
            "Security checks, in process on one core (`benchmarks/security_checks.py`):",
            "",
            "```",
            security.rstrip(),
            "```",
        ]
    return lines


def versions() -> dict[str, str]:
    """What ran, for the report."""

    def first_line(cmd: list[str]) -> str:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (done.stdout or done.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "not found"

    from importlib.metadata import version

    out = {"python": platform.python_version()}
    for package in (
        "mcp-oauth-gateway",
        "uvicorn",
        "uvloop",
        "httptools",
        "joserfc",
        "cel-expr-python",
    ):
        try:
            out[package] = version(package)
        except Exception:
            out[package] = "not installed"
    out["wrk"] = first_line(["wrk", "-v"])
    out["haproxy"] = first_line(["haproxy", "-v"])
    out["nginx"] = first_line(["nginx", "-v"])
    return out


def interpreter() -> str:
    """The interpreter the servers run on, past the virtual environment's link: whether it is
    the distribution's (built with PGO and LTO) or a developer build changes CPU per request."""
    return os.path.realpath(sys.executable)


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def report(args: argparse.Namespace, results: list[Result], extras: dict, soak: dict | None) -> str:
    """The Markdown report, with the ratios and the targets."""
    r = {x.scenario: x for x in results}
    get = r.get
    a, b, c = (
        get("a direct backend"),
        get("b gateway, one token"),
        get("c gateway, a new token per request"),
    )
    d, d1, b1 = get("d HAProxy jwt_verify"), get("d HAProxy jwt_verify c=1"), get("b gateway c=1")
    lines = [
        f"# Benchmark {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
        f"{' (smoke run: numbers are meaningless)' if args.smoke else ''}",
        "",
        f"Machine: {os.cpu_count()} cores, {cpu_model()}, Linux {platform.release()}. "
        f"Python {platform.python_version()} ({interpreter()}) for every Python server. "
        f"Servers on core {SERVER_CORE}, wrk (and backends behind a proxy) on core "
        f"{LOAD_CORE}. wrk -t1 -c{args.conns}, {args.duration:g} s after {args.warmup:g} s "
        f"warm-up, {args.rounds} interleaved round(s), median shown (min-max). "
        f'POST /mcp tools/call, 800-byte RS256 token; CEL rule `"mcp-agent" in '
        f"jwt.groups`; scenario c cycles {args.tokens} tokens (cache holds 10,000).",
        "",
        "| scenario | req/s (min-max) | p50 ms | p99 ms | CPU µs/req | peak RSS MB | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for x in results:
        lines.append(
            f"| {x.scenario} | {x.rps:,.0f} ({x.extra.get('min_rps', x.rps):,.0f}-"
            f"{x.extra.get('max_rps', x.rps):,.0f}) | {x.p50:.2f} | {x.p99:.2f} | "
            f"{x.cpu_us:.0f} | {x.rss:.0f} | {x.errors} |"
        )
    targets = []

    def ratio(name: str, num: Result | None, den: Result | None, goal: float) -> None:
        if num and den and den.rps:
            value = num.rps / den.rps
            targets.append((name, f"{value:.2f}", f"≥ {goal}", value >= goal))

    def paired(name: str, key: str, num: Result | None, den: Result | None, goal: float) -> None:
        # The median of the ratios within each round (the two measured minutes apart at
        # most, so a noisy neighbour weighs on both); the ratio of medians otherwise.
        each = extras.get("round_ratios", {}).get(key)
        if not each:
            ratio(name, num, den, goal)
            return
        value = each[middle(each)]
        rounds = ", ".join(f"{v:.2f}" for v in each)
        targets.append((f"{name}; per round {rounds}", f"{value:.2f}", f"≥ {goal}", value >= goal))

    ratio("b / a (gateway ÷ direct backend)", b, a, 0.33)
    paired("b / d (gateway ÷ HAProxy jwt_verify)", "b/d", b, d, 0.7)
    paired("c / d (cache-miss gateway ÷ HAProxy)", "c/d", c, d, 0.4)
    if b and d:
        targets.append(
            ("p99 at c=64, gateway ÷ HAProxy", f"{b.p99 / d.p99:.2f}", "≤ 2", b.p99 / d.p99 <= 2)
        )
    if b1 and d1:
        targets.append(
            (
                "p50 at c=1, gateway - HAProxy (ms)",
                f"{b1.p50 - d1.p50:+.2f}",
                "≤ +0.15",
                b1.p50 - d1.p50 <= 0.15,
            )
        )
        targets.append(("p99 at c=1, gateway (ms)", f"{b1.p99:.2f}", "≤ 1", b1.p99 <= 1))
    ratio(
        "b / mcp SDK server alone (gateway req/s ÷ a Python MCP backend's, per core)",
        b,
        get("e mcp SDK server alone"),
        6,
    )
    share = get("e gateway → mcp SDK tools/call")
    if share and share.extra.get("backend_cpu_us"):
        targets.append(
            (
                "gateway CPU per tools/call as a share of the mcp SDK backend's "
                f"({share.cpu_us:.0f} µs vs {share.extra['backend_cpu_us']:.0f} µs)",
                f"{share.cpu_us / share.extra['backend_cpu_us'] * 100:.0f} %",
                "report",
                True,
            )
        )
    rate_d, rate_g = extras.get("rate_direct"), extras.get("rate_gateway")
    if rate_d and rate_g:
        added = rate_g["p50"] - rate_d["p50"]
        targets.append(
            (
                "added p50 at 500 req/s (ms)",
                f"{added:+.2f} (direct {rate_d['p50']:.2f}, gateway {rate_g['p50']:.2f})",
                "report",
                True,
            )
        )
    streams = [(d, g) for d, g in extras.get("sse", []) if d and g]
    if streams:
        # Per stream, the worst extra delay of an event through the gateway; the median stream.
        worsts = [max(y - x for x, y in zip(d, g, strict=False)) for d, g in streams]
        median = middle(worsts)
        first_d, first_g = streams[median][0][0], streams[median][1][0]
        targets.append(
            (
                f"SSE: worst extra delay per event (ms), median of {len(worsts)} "
                f"stream{'s' if len(worsts) > 1 else ''} "
                f"({', '.join(f'{w:.1f}' for w in worsts)}); its first event direct "
                f"{first_d:.1f}, gateway {first_g:.1f}",
                f"{worsts[median]:.1f}",
                "≤ 10",
                worsts[median] <= 10,
            )
        )
    if soak:
        growth = (soak["rss_end_mb"] - soak["rss_start_mb"]) / soak["rss_start_mb"] * 100
        targets.append(
            (
                f"RSS growth over {soak['requests']:,} requests "
                f"({soak['rss_start_mb']:.0f} → {soak['rss_end_mb']:.0f} MB)",
                f"{growth:+.1f} %",
                "≤ 10 %",
                growth <= 10,
            )
        )
    lines += ["", "| target | measured | goal | met |", "|---|---:|---|---|"]
    for name, value, goal, met in targets:
        lines.append(f"| {name} | {value} | {goal} | {'yes' if met else '**no**'} |")
    lines += stage_lines(extras.get("stages") or [], extras.get("security"))
    if not all(met for *_, met in targets):
        lines += ["", GAP_NOTE]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()), ""]
    return "\n".join(lines)


def main() -> int:
    """Run and write the report."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a few seconds; checks it runs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--conns", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=12_000)
    parser.add_argument("--rate-seconds", type=float, default=10)
    parser.add_argument(
        "--soak", type=int, default=1_000_000, help="requests for the RSS check (0 to skip)"
    )
    parser.add_argument("--output", default=str(HERE / "results"))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="only the gateway scenarios, no report file (for tuning)",
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="only the optional stages' cost and the security checks, no report file",
    )
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.duration, args.warmup, args.tokens = 1, 1, 1, 200
        args.rate_seconds, args.soak = 1, 0
    for tool in ("wrk",):
        if not shutil.which(tool):
            print(
                f"error: {tool} is required (apt-get install wrk haproxy nginx-light)",
                file=sys.stderr,
            )
            return 2
    bench = Bench(args)
    if args.stages:
        try:
            print("\n".join(stage_lines(bench.stage_costs(), bench.security_checks())))
        finally:
            bench.stop_all()
        return 0
    if args.quick:
        try:
            results = bench.quick()
            for result in results:
                print(
                    f"{result.scenario}: {result.rps:,.0f} req/s p50 {result.p50:.2f} ms "
                    f"p99 {result.p99:.2f} ms, {result.cpu_us:.0f} µs/req"
                )
            if len(results) == 3:
                b, c, d = (r.rps for r in results)
                print(f"b/d {b / d:.2f}  c/d {c / d:.2f}")
        finally:
            bench.stop_all()
        return 0
    try:
        print(f"[bench] minting {args.tokens} tokens", file=sys.stderr, flush=True)
        bench.tokens_file(args.tokens)
        rounds = []
        for i in range(args.rounds):
            print(f"[bench] round {i + 1}/{args.rounds}", file=sys.stderr, flush=True)
            rounds.append(bench.run_round())
        ratios = round_ratios(rounds)
        results = median_results(rounds)
        print(
            "[bench] the mcp SDK server, alone and behind the gateway", file=sys.stderr, flush=True
        )
        share = bench.mcp_share()
        print("[bench] latency at 500 req/s and SSE", file=sys.stderr, flush=True)
        extras = bench.latency_and_sse()
        extras["round_ratios"] = ratios
        extras["stages"] = bench.stage_costs()
        extras["security"] = bench.security_checks()
        soak = None
        if args.soak:
            print(f"[bench] RSS over {args.soak:,} requests", file=sys.stderr, flush=True)
            soak = bench.soak()
    finally:
        bench.stop_all()
    text = report(args, results + share, extras, soak)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    name = datetime.now(UTC).strftime("%Y-%m-%d") + ("-smoke" if args.smoke else "") + ".md"
    (out / name).write_text(text)
    print(text)
    print(f"[bench] report written to {out / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
