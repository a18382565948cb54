"""Content codings (`Content-Encoding`) of bodies the gateway must read to judge them.

Where an MCP-level rule applies, the gateway reads the body itself; a body it passed on still
compressed would be inflated by the backend (the TypeScript SDK's Express app inflates gzip and
deflate) and run unjudged. So a coded body is decoded here, within the size limit, judged, and
passed on decoded with its `Content-Encoding` removed: the backend receives exactly the bytes
that were judged. Codings other than gzip and deflate are refused, never passed on."""

from __future__ import annotations

import zlib

from ..asgi import Headers

# gzip (RFC 1952, `x-gzip` as RFC 9110 §8.4.1.3 says to read it) and deflate, which HTTP defines
# as the zlib format (RFC 1950): what Node's createGunzip/createInflate, and so body-parser, read.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
SUPPORTED = "gzip, deflate"


class CodingError(ValueError):
    """A body whose coding the gateway does not decode, or that does not decode cleanly."""


def codings(headers: Headers) -> list[str]:
    """The content codings of a message, outermost last, `identity` left out."""
    found: list[str] = []
    for name, value in headers:
        if name == b"content-encoding":
            for item in value.decode("latin-1").split(","):
                coding = item.strip().lower()
                if coding and coding != "identity":
                    found.append(coding)
    return found


def check_codings(found: list[str]) -> str | None:
    """The one coding the gateway will decode, or None for none; CodingError otherwise."""
    if not found:
        return None
    if len(found) > 1:
        raise CodingError(
            f"the body is coded more than once ({', '.join(found)}); the gateway decodes one "
            f"content coding ({SUPPORTED})"
        )
    coding = found[0]
    if coding not in _WBITS:
        raise CodingError(
            f"the content coding {coding[:40]!r} is not one the gateway decodes ({SUPPORTED}); "
            "send the body uncompressed or with one of those"
        )
    return coding


class Decoder:
    """Incremental decoding of one coded body that may not grow past `limit` bytes."""

    def __init__(self, coding: str, limit: int):
        self.coding = coding
        self.limit = limit
        self.size = 0
        self._inflate = zlib.decompressobj(_WBITS[coding])

    def feed(self, data: bytes) -> bytes:
        """The bytes `data` decodes to; CodingError when they are corrupt or too many."""
        if self._inflate.eof:
            if data:
                self._trailing()
            return b""
        try:
            out = self._inflate.decompress(data, self.limit - self.size + 1)
        except zlib.error as exc:
            raise CodingError(f"the {self.coding} body does not decode: {exc}") from None
        self.size += len(out)
        if self.size > self.limit or self._inflate.unconsumed_tail:
            raise CodingError(f"the {self.coding} body decodes to more than {self.limit} bytes")
        if self._inflate.unused_data:
            self._trailing()
        return out

    def end(self) -> None:
        """Confirm the coded body ended where its coding says it does."""
        if not self._inflate.eof:
            raise CodingError(f"the {self.coding} body ends before its coding does (truncated)")

    def _trailing(self) -> None:
        # A second gzip member or trailing bytes: decoders differ on whether they are read
        # (Node reads further members, Python's decompressobj stops), so they are refused.
        raise CodingError(f"the {self.coding} body has data after its end")


def decode(coding: str, body: bytes, limit: int) -> bytes:
    """A whole coded body, decoded within `limit` bytes (CodingError otherwise)."""
    decoder = Decoder(coding, limit)
    out = decoder.feed(body)
    decoder.end()
    return out
