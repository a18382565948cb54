"""The scenarios of a run, measured with wrk (and the probes) against the servers: a round of
(a)-(d), the mcp SDK server (e), latency at a fixed rate and SSE (f), the optional stages'
cost, the security checks and the RSS over a long run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from configs import STAGES
from measurements import Result, median_results, middle, parse_wrk
from processes import HERE, LOAD_CORE, PY, SERVER_CORE, cpu_seconds, free_port, pinned, rss_mb
from servers import Server, Servers

# SSE streams measured each way (5 events each, 100 ms apart).
SSE_STREAMS = 5


class Bench(Servers):
    """The measurements of a run, on the servers `Servers` starts."""

    # wrk's answer timeout (its default, 2 s, when None): an answer later than it is counted as
    # a socket error and left out of the latencies.
    wrk_timeout: str | None = None

    def wrk(
        self,
        url: str,
        conns: int,
        seconds: float,
        token: str | None = None,
        tokens: Path | None = None,
        lua: dict[str, str] | None = None,
    ) -> tuple[float, float, float, int, int]:
        """One wrk run on the load core (post.lua, with `lua`'s settings); wrk's figures
        (`parse_wrk`)."""
        env = {
            **os.environ,
            "TOKEN": token or "",
            "TOKENS_FILE": str(tokens or ""),
            **(lua or {}),
        }
        cmd = pinned(
            LOAD_CORE,
            [
                "wrk",
                "-t1",
                f"-c{conns}",
                f"-d{max(1, round(seconds))}s",
                "--latency",
                *(["--timeout", self.wrk_timeout] if self.wrk_timeout else []),
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
        lua: dict[str, str] | None = None,
    ) -> Result:
        """One scenario: a warm-up (unless --warmup is 0), then wrk's run with the server's CPU
        and peak RSS (and the CPU of `also`, the server behind it)."""
        if self.args.warmup > 0:
            self.wrk(url, conns, self.args.warmup, token, tokens, lua)
        before = cpu_seconds(measured.popen.pid)
        before_also = cpu_seconds(also.popen.pid) if also else 0.0
        rps, p50, p99, requests, errors = self.wrk(
            url, conns, self.args.duration, token, tokens, lua
        )
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
        """One round of (a)-(d): each group of servers started, measured and stopped."""
        a = self.args
        out: list[Result] = []
        tokens = self.tokens_file(a.tokens)

        def with_backend(fn: Callable[[], None]) -> None:
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
        # A smoke run checks that it runs: a few thousand calls, not the default 100,000.
        calls = ["2000"] if self.args.smoke else []
        done = subprocess.run(
            pinned(SERVER_CORE, [PY, str(HERE / "security_checks.py"), *calls]),
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

    def probe(self, *args: str) -> dict[str, Any]:
        """One run of probes.py on the load core; what it printed (JSON)."""
        done = subprocess.run(
            pinned(LOAD_CORE, [PY, str(HERE / "probes.py"), *args]),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def latency_and_sse(self) -> dict[str, Any]:
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
