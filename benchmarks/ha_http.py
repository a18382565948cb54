"""Requests to the gateway replicas, each recorded with its outcome: where a request goes (a
load balancer, or each replica in turn with the route's public host, as a load balancer passes
it on), and how its answer is judged."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import httpx
from ha_record import Record, Recorder

TIMEOUT = 30.0  # a request unanswered this long is a hang (the gateway bounds its own waits)


@dataclass
class Front:
    """The way to the replicas: `bases` are (name, base URL) pairs, taken in turn; a request
    for `public`'s URLs goes to the chosen base with `public`'s host as its Host header."""

    public: str
    bases: list[tuple[str, str]]
    _turn: int = field(default=0)

    def address(self, url: str, choice: int | None = None) -> tuple[str, dict[str, str], str]:
        """(the URL to send to, headers to add, the replica's name) for a public `url`."""
        if choice is None:
            choice, self._turn = self._turn, self._turn + 1
        name, base = self.bases[choice % len(self.bases)]
        if base == self.public or not url.startswith(self.public):
            return url, {}, name
        host = httpx.URL(self.public).netloc.decode()
        return base + url[len(self.public) :], {"Host": host}, name


def judged(response: httpx.Response, expected: Collection[int]) -> tuple[str, str]:
    """(outcome, detail) of an answer: `ok` when its status is one of `expected`; `503` when
    it is a 503 with Retry-After and a JSON error, or an HTML page for a browser (a failover
    answered as designed); else `error`."""
    if response.status_code in expected:
        return "ok", ""
    detail = response.text[:300]
    if response.status_code != 503 or not response.headers.get("retry-after", "").isdigit():
        return "error", detail
    if response.headers.get("content-type", "").startswith("text/html"):
        return "503", "an error page"
    try:
        body = response.json()
    except ValueError:
        return "error", f"503 with Retry-After but neither JSON nor a page: {detail}"
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return "503", str(body.get("error_description", ""))[:300]
    return "error", detail


@dataclass
class Sender:
    """Sends requests through `front` and records each in `recorder`."""

    http: httpx.AsyncClient
    front: Front
    recorder: Recorder

    async def send(
        self,
        kind: str,
        step: str,
        method: str,
        url: str,
        expected: Collection[int],
        redis: bool = True,
        choice: int | None = None,
        note: bool = True,
        **request: Any,
    ) -> tuple[Record, httpx.Response | None]:
        """Send one request; its record, and the answer when there was one (an error or a
        hang noted as a finding unless `note` is False)."""
        target, headers, replica = self.front.address(url, choice)
        request["headers"] = {**request.get("headers", {}), **headers}
        started = self.recorder.now()
        response: httpx.Response | None = None
        try:
            response = await self.http.request(method, target, timeout=TIMEOUT, **request)
        except httpx.TimeoutException as exc:
            outcome, status, detail = "hang", 0, f"no answer in {TIMEOUT:.0f} s ({exc!r})"
        except httpx.HTTPError as exc:
            outcome, status, detail = "error", 0, f"{type(exc).__name__}: {exc}"
        else:
            status = response.status_code
            outcome, detail = judged(response, expected)
        record = Record(
            kind, step, replica, started, self.recorder.now(), status, outcome, detail, redis
        )
        return self.recorder.add(record, note), response
