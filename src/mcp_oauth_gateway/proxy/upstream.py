"""The upstream HTTP client behind one small interface (the pool in `pool.py` implements it;
tests and benchmarks can put another behind the proxy)."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Protocol

from ..asgi import Headers
from ..controlplane.snapshot import TargetTls


class UpstreamError(Exception):
    """The backend could not be reached or broke the exchange before answering."""


class UpstreamTlsError(UpstreamError):
    """The TLS handshake with the backend failed: its certificate was not trusted, did not hold
    the server name, or the two sides agreed on nothing. Its message says which (no secret in
    it), so the client's 502 can say it too."""

    @classmethod
    def of(cls, where: str, exc: ssl.SSLError) -> UpstreamTlsError:
        """The failure of the handshake with `where` (`host:port`), in words."""
        if isinstance(exc, ssl.SSLCertVerificationError):
            why = f"certificate verify failed: {exc.verify_message}"
        else:
            why = exc.reason or exc.strerror or str(exc)
            why = why.replace("_", " ").lower() if why.isupper() else why
            if exc.reason == "WRONG_VERSION_NUMBER":
                why += " (the server does not speak TLS on this port?)"
        return cls(f"the TLS handshake with {where} failed: {why}")


class InvalidRequestHead(ValueError):
    """A request the upstream refuses to write: a header name that is not a token, or a control
    character (CR, LF, NUL and the others) in the request line or a header value, whatever stage
    produced it."""


class UpstreamResponse(Protocol):
    status: int
    headers: Headers

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, chunk by chunk, without buffering."""
        ...

    def complete_body(self) -> bytes | None:
        """The whole body when it has already arrived completely, else None."""
        ...

    def release(self) -> None:
        """Return the connection to the pool (or drop it when the body was not consumed)."""
        ...


class Upstream(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        headers_within: float,
        tls: TargetTls | None = None,
    ) -> UpstreamResponse:
        """Send a request and return once the response headers have arrived; raise
        TimeoutError when they take longer than `headers_within` seconds. An `https` URL is
        sent over TLS with `tls` (it must be given), an `http` one in the clear."""
        ...

    async def close(self) -> None:
        """Close every pooled connection."""
        ...
