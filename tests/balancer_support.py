"""Requests to gateway replicas the way a load balancer spreads them (each to a replica's own
port, the public host in `Host`), every answer recorded, and what makes an answer a clear one;
a driver of calls to a rate-limited route; and the waits of the failover tests."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol, Self

import httpx

from redis_failover_support import Gateway
from support import INITIALIZE

BOUND = 45.0  # seconds one request may take before it counts as a hang
RETRY_BOUND = 90.0  # seconds an operation is sent again through 503s before it counts as lost
PACE = 0.05  # seconds between a 503 and the next try (the clients' Retry-After, shortened)
TOKEN_OPS = ("redeem", "refresh")


@dataclass
class Answer:
    """One request and what came back (`status` None: nothing did)."""

    op: str
    replica: str
    status: int | None
    body: str = ""
    retry_after: str | None = None
    error: str | None = None
    took: float = 0.0  # seconds from sending to the answer
    at: float = field(default_factory=time.monotonic)


def unclear(answer: Answer, hidden: Iterable[str]) -> str | None:
    """Why `answer` is not a clear one (None when it is): no answer, a 5xx other than 503, a
    503 without its JSON error, description and Retry-After, or a body naming a password or
    a Redis address (`hidden`: the passwords, and the Redis ports as `127.0.0.1:PORT`)."""
    where = f"{answer.op} at {answer.replica}"
    if answer.status is None:
        return f"{where}: no answer ({answer.error})"
    for secret in hidden:
        if re.search(re.escape(secret) + r"(?!\d)", answer.body):
            return f"{where}: HTTP {answer.status} names {secret!r}: {answer.body[:300]}"
    if answer.status >= 500 and answer.status != 503:
        return f"{where}: HTTP {answer.status}: {answer.body[:300]}"
    if answer.status != 503:
        return None
    try:
        body = json.loads(answer.body)
    except ValueError:
        return f"{where}: 503 without a JSON body: {answer.body[:300]}"
    if body.get("error") != "temporarily_unavailable" or not body.get("error_description"):
        return f"{where}: 503 is not temporarily_unavailable with a description: {body}"
    if not (answer.retry_after or "").isdigit():
        return f"{where}: 503 without Retry-After ({answer.retry_after!r})"
    return None


class Balancer:
    """Requests through the replicas in turn; `answers` holds every answer, `problems` every
    broken promise a driver saw."""

    def __init__(self, public: str, replicas: dict[str, Gateway]):
        self.public = public
        self.replicas = replicas
        self.answers: list[Answer] = []
        self.problems: list[str] = []
        self._turn = itertools.count()
        self._http = httpx.AsyncClient(timeout=BOUND, follow_redirects=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    # -- requests ---------------------------------------------------------------------------

    def _next(self) -> str:
        names = sorted(self.replicas)
        return names[next(self._turn) % len(names)]

    async def send(
        self, op: str, method: str, url: str, replica: str | None = None, **request
    ) -> tuple[str, httpx.Response | None]:
        """`url` (at the public address) through `replica` (the next in turn when None)."""
        replica = replica or self._next()
        public = httpx.URL(url)
        target = httpx.URL(self.replicas[replica].base).join(public.raw_path.decode())
        headers = {"Host": public.netloc.decode(), **request.pop("headers", {})}
        start = time.monotonic()
        try:
            response = await self._http.request(method, target, headers=headers, **request)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.answers.append(
                Answer(op, replica, None, error=error, took=time.monotonic() - start)
            )
            return replica, None
        retry_after = response.headers.get("retry-after")
        took = time.monotonic() - start
        answer = Answer(op, replica, response.status_code, response.text, retry_after, took=took)
        self.answers.append(answer)
        return replica, response

    async def retried(
        self, op: str, attempt: Callable[[str], Awaitable[tuple[str, httpx.Response | None]]]
    ) -> httpx.Response | None:
        """`attempt` on the replicas in turn until it is answered with anything but 503 (None
        when it never is within RETRY_BOUND, recorded as a problem)."""
        deadline = time.monotonic() + RETRY_BOUND
        while time.monotonic() < deadline:
            _, response = await attempt(self._next())
            if response is not None and response.status_code != 503:
                return response
            await asyncio.sleep(PACE)
        self.problems.append(f"{op}: still unavailable after {RETRY_BOUND} s")
        return None

    def since(self, moment: float) -> list[Answer]:
        """The answers that came back after `moment` (time.monotonic())."""
        return [a for a in self.answers if a.at > moment]

    def served(self, moment: float, names: Iterable[str] | None = None) -> bool:
        """Whether each replica (of `names`) has issued tokens since `moment`."""
        issued = {a.replica for a in self.since(moment) if a.op in TOKEN_OPS and a.status == 200}
        return set(names or self.replicas) <= issued

    def summary(self) -> dict[str, int]:
        """How many answers of each operation and status (what a failing test shows)."""
        counts: dict[str, int] = {}
        for answer in self.answers:
            name = f"{answer.op} {answer.status or answer.error}"
            counts[name] = counts.get(name, 0) + 1
        counts["longest (ms)"] = int(1000 * max((a.took for a in self.answers), default=0))
        return counts

    def unclear(self, hidden: Iterable[str]) -> list[str]:
        """Every answer that is not a clear one."""
        return [u for a in self.answers if (u := unclear(a, hidden)) is not None]


class Limited:
    """Calls to the rate-limited route by a few subjects in turn, each `per_subject` times,
    through the replicas in turn: 200 while a bucket lasts, then 429, or 503 while Redis
    fails; buckets may refill after a failover (documented)."""

    def __init__(self, replicas: dict[str, Gateway], token: Callable[[str], str]):
        self.replicas = replicas
        self.token = token
        self.answers: list[Answer] = []
        self._stopping = asyncio.Event()

    async def call(self, replica: str, subject: str) -> Answer:
        """One MCP initialize on /limited as `subject`."""
        headers = {
            "Authorization": f"Bearer {self.token(subject)}",
            "Accept": "application/json, text/event-stream",
        }
        url = f"{self.replicas[replica].base}/limited"
        try:
            async with httpx.AsyncClient(timeout=BOUND) as http:
                response = await http.post(url, json=INITIALIZE, headers=headers)
            answer = Answer(
                "limited",
                replica,
                response.status_code,
                response.text,
                response.headers.get("retry-after"),
            )
        except httpx.HTTPError as exc:
            answer = Answer("limited", replica, None, error=f"{type(exc).__name__}: {exc}")
        self.answers.append(answer)
        return answer

    async def run(self, per_subject: int = 5) -> None:
        """Call until `stop()`."""
        names, run = sorted(self.replicas), secrets.token_hex(4)
        for n in itertools.count():
            if self._stopping.is_set():
                return
            await self.call(names[n % len(names)], f"limited-{run}-{n // per_subject}")
            await asyncio.sleep(PACE)

    def stop(self) -> None:
        self._stopping.set()

    def unclear(self, hidden: Iterable[str]) -> list[str]:
        """Every answer that is neither 200, a 429 with Retry-After, nor a clear 503."""
        found = []
        for answer in self.answers:
            if answer.status == 429:
                if not (answer.retry_after or "").isdigit() or "rate_limited" not in answer.body:
                    found.append(f"limited: 429 without Retry-After or its error: {answer}")
            elif answer.status != 200 and (problem := unclear(answer, hidden)) is not None:
                found.append(problem)
            elif answer.status not in (200, 503):
                found.append(f"limited: HTTP {answer.status}: {answer.body[:200]}")
        return found


class Driver(Protocol):
    """What `driving` runs."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


@asynccontextmanager
async def driving(*drivers: Driver) -> AsyncIterator[None]:
    """The drivers run for the block; each finishes what it is doing at its end."""
    tasks = [asyncio.create_task(driver.run()) for driver in drivers]
    try:
        yield
    finally:
        for driver in drivers:
            driver.stop()
        async with asyncio.timeout(RETRY_BOUND + BOUND):
            await asyncio.gather(*tasks)


async def until(predicate: Callable[[], bool], bound: float, what: str) -> None:
    """Wait, the drivers running, until `predicate()` (cheap, on the loop) holds."""
    try:
        async with asyncio.timeout(bound):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {bound} s waiting for {what}") from None
