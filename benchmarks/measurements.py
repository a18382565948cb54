"""What one measurement yields (wrk's figures, the server's CPU and memory), and how the rounds of a
run are reduced to the medians the report shows."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


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
    """req/s, p50 ms, p99 ms, requests, non-2xx/3xx + socket errors (+ JSON-RPC errors, when
    post.lua checked the answers)."""

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
    rpc = re.search(r"JSON-RPC errors: (\d+)", text)
    errors = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    errors += int(rpc.group(1)) if rpc else 0
    return rps, p50, p99, requests, errors


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
