"""What the failover and rolling-restart benchmarks record of each request, and the pure
functions that reduce a run to its report: requests by outcome, the times from the fault to the
first 503, the first success and the last failure, and latency before, during and after.

Outcomes: `ok` (the answer the request should get, a refusal included when refusing is right),
`503` (503 with `Retry-After` and a JSON `error`: a failover answered as designed), `error`
(anything else: a 500, a 502, a 503 without `Retry-After`, a broken connection, an unexpected
refusal) and `hang` (no answer within the client's timeout). Every `error` and `hang` is a
finding."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

OUTCOMES = ("ok", "503", "error", "hang")
SLOW_FINDINGS = 20  # findings listed in full in the JSON results


@dataclass(slots=True)
class Record:
    """One request: what it was, at which replica, when (seconds from the run's start), and
    how it ended."""

    kind: str
    step: str
    replica: str
    start: float
    end: float
    status: int
    outcome: str
    detail: str = ""
    # Whether the gateway needs Redis to answer it (the Broker's endpoints do; tool calls on
    # a single-target route do not).
    redis: bool = False

    @property
    def seconds(self) -> float:
        """How long it took."""
        return self.end - self.start


@dataclass
class Recorder:
    """Every record of a run, its events (the fault, a promotion, a roll step) and the effects
    checked after it."""

    started: float = field(default_factory=time.monotonic)
    records: list[Record] = field(default_factory=list)
    events: dict[str, float] = field(default_factory=dict)
    effects: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    def now(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.started

    def add(self, record: Record, note: bool = True) -> Record:
        """Keep `record`, and note it as a finding when it is one (unless the caller will say
        better what it means: `note=False`, then `note`)."""
        self.records.append(record)
        if note:
            self.note(record)
        return record

    def note(self, record: Record) -> None:
        """A finding for `record` when it ended in an error or a hang."""
        if record.outcome in ("error", "hang"):
            self.finding(
                f"{record.outcome}: {record.kind} {record.step} at {record.replica}, "
                f"t={record.start:.2f}s, HTTP {record.status or '-'}: {record.detail[:200]}"
            )

    def event(self, name: str) -> float:
        """Note that `name` happened now; returns the time."""
        self.events[name] = self.now()
        return self.events[name]

    def count(self, effect: str, n: int = 1) -> None:
        """Count one (or `n`) of an effect checked (e.g. "lost refresh tokens")."""
        self.effects[effect] = self.effects.get(effect, 0) + n

    def finding(self, text: str) -> None:
        """Something a client must never see (kept in order)."""
        self.findings.append(text)


def by_outcome(records: list[Record]) -> dict[str, dict[str, int]]:
    """Per kind of request, how many ended each way."""
    table: dict[str, dict[str, int]] = {}
    for record in records:
        row = table.setdefault(record.kind, dict.fromkeys(OUTCOMES, 0))
        row[record.outcome] += 1
    return table


def percentile(values: list[float], share: float) -> float | None:
    """The `share` percentile (nearest rank) of `values`, None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1))
    return ordered[rank]


def fault_times(records: list[Record], fault: float) -> dict[str, float | None]:
    """Seconds from `fault` to: the first 503 answered, the first success of a request that
    needs Redis and was sent after the fault, and the end of the last request that did not
    succeed (from then on every request succeeded: the steady success rate is back)."""
    after = [r for r in records if r.end >= fault]
    first_503 = min((r.end for r in after if r.outcome == "503"), default=None)
    first_ok = min(
        (r.end for r in after if r.redis and r.start >= fault and r.outcome == "ok"), default=None
    )
    last_failure = max((r.end for r in after if r.outcome != "ok"), default=None)
    return {
        "first 503": None if first_503 is None else first_503 - fault,
        "first success": None if first_ok is None else first_ok - fault,
        "last failure": None if last_failure is None else last_failure - fault,
    }


def phases(records: list[Record], fault: float, steady: float) -> dict[str, list[Record]]:
    """The records before the fault, during it (until `steady`) and after."""
    out: dict[str, list[Record]] = {"before": [], "during": [], "after": []}
    for record in records:
        if record.end < fault:
            out["before"].append(record)
        elif record.start >= steady:
            out["after"].append(record)
        else:
            out["during"].append(record)
    return out


def latency(records: list[Record]) -> dict[str, dict[str, float | int | None]]:
    """Per kind: how many, and p50/p99 of their durations in ms."""
    by_kind: dict[str, list[float]] = {}
    for record in records:
        by_kind.setdefault(record.kind, []).append(record.seconds * 1000)
    out: dict[str, dict[str, float | int | None]] = {}
    for kind, values in by_kind.items():
        out[kind] = {
            "n": len(values),
            "p50": percentile(values, 0.5),
            "p99": percentile(values, 0.99),
        }
    return out


def summary(recorder: Recorder, start: str, end: str | None = None) -> dict[str, Any]:
    """The run reduced: outcomes, the times from event `start` (the fault), latency before it,
    during it (until event `end`, else until the last failure) and after, effects, findings."""
    fault = recorder.events.get(start, recorder.now())
    times = fault_times(recorder.records, fault)
    last = times["last failure"]
    if end is not None and end in recorder.events:
        steady = recorder.events[end]
    else:
        steady = fault + (last if last is not None else 0.0)
    split = phases(recorder.records, fault, steady)
    return {
        "outcomes": by_outcome(recorder.records),
        "events": {k: round(v - fault, 3) for k, v in recorder.events.items()},
        "times": times,
        "latency": {phase: latency(records) for phase, records in split.items()},
        "effects": dict(recorder.effects),
        "findings": {
            "count": len(recorder.findings),
            "first": recorder.findings[:SLOW_FINDINGS],
        },
    }


def records_json(records: list[Record]) -> list[dict[str, Any]]:
    """The records as JSON objects (for the raw results)."""
    return [asdict(record) for record in records]
