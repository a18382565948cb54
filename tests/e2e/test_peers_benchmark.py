"""The peers benchmark (`benchmarks/peers.py`) runs in its shortest form with our gateway and
HAProxy, after its enforcement checks; and those checks stop a proxy that does not enforce.
mcp-proxy's leg runs in the benchmark itself, not here: building it takes minutes. Nothing about
speed is asserted: `make bench-peers` measures."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from support import ROOT

REQUIRED = (
    "no token",
    "bad signature (another key, same kid)",
    "expired an hour ago",
    "wrong audience",
    "wrong issuer (no trailing slash)",
    "unsigned (alg none)",
    "HS256 keyed with the RSA public key",
    "caller outside the group (groups: users)",
    "the tool the rule forbids (`delete`)",
)


def test_the_peers_benchmark_checks_then_measures_gateway_and_haproxy(tmp_path):
    for tool in ("wrk", "haproxy"):
        assert shutil.which(tool), f"{tool} is required: `make test` installs it"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "peers.py"),
            *("--smoke", "--proxies", "gateway,haproxy", "--output", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (report,) = tmp_path.glob("*-peers-smoke.md")
    rows = {line.split(" | ")[0][2:]: line for line in report.read_text().splitlines()}
    served = rows["the allowed call: a member of mcp-agent calls `add`"]
    assert served.endswith("| served | served |"), served
    for probe in REQUIRED:
        cells = rows[probe].split(" | ")[1:]
        assert all(cell.startswith("refused (") for cell in cells), rows[probe]
    table = [line for line in report.read_text().splitlines() if line.count(" | ") == 8]
    for label in ("mcp-oauth-gateway", "mcp-oauth-gateway, a new token per request", "HAProxy"):
        for conns in (1, 16, 512):
            row = next(r for r in table if r.startswith(f"| {label}") and f" | {conns} | " in r)
            assert row.endswith(" | 0 |"), row  # every request answered with a result


def test_the_checks_stop_a_proxy_that_does_not_enforce(monkeypatch):
    """HAProxy checking the token but with no tool rule fails exactly the forbidden tool; the
    backend reached directly, checking nothing, fails every required refusal."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from peer_checks import Target, enforce, open_session
    from peer_servers import PeerBench

    bench = PeerBench(argparse.Namespace(warmup=0, duration=1), None)
    try:
        backend = bench.peers_backend()
        loose = bench.haproxy(backend.port)
        targets = [
            Target("no tool rule", loose.port, "/mcp", bench.token),
            Target("open", backend.port, "/", bench.token),
        ]
        sessions = {t.name: open_session(t, t.token) for t in targets}
        cells, failures = enforce(targets, bench, sessions, backend.port)
    finally:
        bench.stop_all()
    refused_not = {
        name: sorted(p for p, by in cells.items() if p in REQUIRED and by[name].startswith("**"))
        for name in ("no tool rule", "open")
    }
    assert refused_not["no tool rule"] == ["the tool the rule forbids (`delete`)"], cells
    assert refused_not["open"] == sorted(REQUIRED), cells
    assert len(failures) == 1 + len(REQUIRED), failures
    assert cells["the allowed call: a member of mcp-agent calls `add`"] == {
        "no tool rule": "served",
        "open": "served",
    }
