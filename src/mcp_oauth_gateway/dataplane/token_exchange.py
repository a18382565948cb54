"""RFC 8693 token exchange for a backend: the caller's verified access token is traded, at the
provider that issued it, for a token of the backend's own audience naming the same user.

Exchanged tokens are cached per caller token until shortly before they expire (bounded, and
dropped when the caller's keyset changes or the configuration does: the stage that owns this
object is rebuilt then). Requests of one caller that arrive while its token is being exchanged
(an MCP client's GET stream opened beside its POSTs) wait for that exchange rather than start
their own, so a session costs one exchange. A refusal or failure never falls back to the
caller's token."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import aiohttp
import orjson

from ..controlplane.discovery import DiscoveryCache
from ..controlplane.fetch import FetchError, failure_text, read_at_most
from ..controlplane.snapshot import CompiledTokenExchange

log = logging.getLogger("mcp_oauth_gateway.token_exchange")

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
CACHE_SIZE = 10_000
# An exchanged token is not used in its last seconds: the backend must still accept it.
EXPIRY_MARGIN = 30.0
DEFAULT_LIFETIME = 60.0  # when the provider says nothing about expiry
TIMEOUT = 10.0
MAX_RESPONSE = 64 * 1024


class ExchangeError(Exception):
    """The exchange did not give a token: `status` 502 (refused) or 503 (failed)."""

    def __init__(self, status: int, reason: str, description: str):
        super().__init__(description)
        self.status = status
        self.reason = reason  # for metrics: refused:<error>, unreachable, …
        self.description = description


@dataclass(frozen=True, slots=True)
class Exchanged:
    token: str
    usable_until: float  # monotonic
    keyset_version: int


def basic_auth(client_id: str, secret: str) -> str:
    """RFC 6749 §2.3.1: both parts form-urlencoded before base64."""
    raw = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
    return "Basic " + base64.b64encode(raw.encode()).decode()


def exchange_form(spec: CompiledTokenExchange, subject_token: str) -> dict[str, str]:
    """The token request (RFC 8693 §2.1)."""
    form = {
        "grant_type": GRANT,
        "subject_token": subject_token,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
    }
    for name, value in (("audience", spec.audience), ("resource", spec.resource)):
        if value is not None:
            form[name] = value
    if spec.scope is not None:
        form["scope"] = spec.scope
    return form


def read_answer(status: int, body: bytes) -> tuple[str, float]:
    """The issued token and its lifetime in seconds, or ExchangeError saying why not."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        raise ExchangeError(502, "malformed", f"the provider answered HTTP {status} without JSON")
    if status != 200:
        error = answer.get("error")
        described = answer.get("error_description")
        text = f"{error}: {described}" if isinstance(described, str) else str(error)
        raise ExchangeError(502, f"refused:{error}", f"the provider refused: {text[:300]}")
    token = answer.get("access_token")
    if not isinstance(token, str) or not token:
        raise ExchangeError(502, "malformed", "the provider's answer has no access_token")
    expires_in = answer.get("expires_in")
    lifetime = (
        float(expires_in)
        if isinstance(expires_in, int | float) and not isinstance(expires_in, bool)
        else DEFAULT_LIFETIME
    )
    return token, lifetime


class TokenExchanger:
    """Exchanges tokens for one backend, at whichever provider issued each caller's token."""

    def __init__(
        self,
        spec: CompiledTokenExchange,
        providers: Mapping[str, tuple[DiscoveryCache | None, Callable[[], int]]],
        session: Callable[[], aiohttp.ClientSession | None],
        count: Callable[[str], None] | None = None,
    ):
        self.spec = spec
        # issuer → (its discovery document, its current keyset version)
        self.providers = providers
        self.session = session
        self.count = count or (lambda outcome: None)
        self.authorization = basic_auth(spec.client_id, spec.client_secret)
        # By the caller's token, never by subject: the token carries its signed issuer, so
        # alice at one provider never gets the token exchanged for alice at another.
        self._cache: dict[str, Exchanged] = {}
        # Exchanges under way, by caller token: later requests of the caller wait for them.
        self._in_flight: dict[str, asyncio.Task[str]] = {}

    async def token_for(self, subject_token: str, issuer: str) -> str:
        """A token for the backend standing for the caller of `subject_token`."""
        discovery, keyset_version = self.providers[issuer]
        version = keyset_version()
        hit = self._cache.get(subject_token)
        if (
            hit is not None
            and hit.keyset_version == version
            and time.monotonic() < hit.usable_until
        ):
            self.count("cache_hit")
            return hit.token
        running = self._in_flight.get(subject_token)
        if running is None:
            running = asyncio.create_task(
                self._exchange_and_keep(subject_token, discovery, version)
            )
            self._in_flight[subject_token] = running
            running.add_done_callback(lambda task: self._done(subject_token, task))
            # Shielded: a caller that goes away leaves the exchange to the others waiting.
            return await asyncio.shield(running)
        token = await asyncio.shield(running)
        self.count("cache_hit")  # served by the exchange another request of the caller made
        return token

    def _done(self, subject_token: str, task: asyncio.Task[str]) -> None:
        del self._in_flight[subject_token]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone away

    async def _exchange_and_keep(
        self, subject_token: str, discovery: DiscoveryCache | None, version: int
    ) -> str:
        try:
            token, lifetime = await self._exchange(subject_token, discovery)
        except ExchangeError as exc:
            self.count(exc.reason.partition(":")[0])
            log.warning("token exchange for the backend failed: %s", exc.description)
            raise
        self.count("exchanged")
        if len(self._cache) >= CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        until = time.monotonic() + max(0.0, lifetime - EXPIRY_MARGIN)
        self._cache[subject_token] = Exchanged(token, until, version)
        return token

    async def _exchange(
        self, subject_token: str, discovery: DiscoveryCache | None
    ) -> tuple[str, float]:
        endpoint = await self._endpoint(discovery)
        session = self.session()
        if session is None:
            raise ExchangeError(503, "unreachable", "the gateway is not connected yet")
        try:
            async with asyncio.timeout(TIMEOUT):
                async with session.post(
                    endpoint,
                    data=exchange_form(self.spec, subject_token),
                    headers={"Authorization": self.authorization, "Accept": "application/json"},
                    allow_redirects=False,
                ) as response:
                    body = await read_at_most(response.content, MAX_RESPONSE)
                    status = response.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise ExchangeError(
                503,
                "unreachable",
                "the provider's token endpoint did not answer "
                f"({'timeout' if isinstance(exc, TimeoutError) else failure_text(exc)})",
            ) from exc
        if status >= 500:
            raise ExchangeError(503, "unreachable", f"the provider answered HTTP {status}")
        return read_answer(status, body)

    @staticmethod
    async def _endpoint(discovery: DiscoveryCache | None) -> str:
        if discovery is None:
            raise ExchangeError(503, "unreachable", "the provider's metadata is not configured")
        try:
            document = await discovery.get()
        except FetchError as exc:
            raise ExchangeError(
                503, "unreachable", f"the provider's metadata is unavailable: {exc}"
            ) from exc
        endpoint = document.get("token_endpoint")
        if not isinstance(endpoint, str):
            raise ExchangeError(503, "unreachable", "the provider's metadata has no token_endpoint")
        return endpoint
