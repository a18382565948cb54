"""Bodies the tool-level authorization might read differently from the backend: compressed,
not UTF-8, lone surrogates, numbers and nesting beyond what is parsed, keys that differ only in
case, bodies on other methods. Each is either judged exactly as every backend reads it or
refused with a JSON-RPC error; none reaches the inside unjudged, none gives a 500.

The property tests build bodies from the shapes parsers disagree on and read whatever reached
the inside with models of lenient backends (the TypeScript SDK's body-parser, Go's
encoding/json, first-key-wins parsers): whatever they read, a denied tool is never called."""

from __future__ import annotations

import contextlib
import gzip
import json
import zlib
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unit.fuzz_settings import FUZZ

from .harness import Inner, drive
from .mcp_authz_support import USER, stage

ALLOWED = "echo"
JSON_TYPE = (b"content-type", b"application/json")


def call(name: str = "rm") -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}
    ).encode()


async def post(body: bytes, *headers: tuple[bytes, bytes], content_type: bytes = JSON_TYPE[1]):
    inner = Inner()
    headers = ((b"content-type", content_type), *headers)
    response = await drive(
        stage(inner), "POST", headers=headers, body=body, scope=USER, inner=inner
    )
    return response, inner


# --- content codings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coding", "compress"),
    [
        (b"gzip", gzip.compress),
        (b"x-gzip", gzip.compress),
        (b"deflate", zlib.compress),
        (b"GZIP", gzip.compress),
        (b"identity, gzip", gzip.compress),
    ],
)
async def test_a_coded_body_is_decoded_and_judged(coding, compress):
    denied, _ = await post(compress(call("rm")), (b"content-encoding", coding))
    assert not denied.reached
    assert denied.json()["error"] == {"code": -32602, "message": "Unknown tool: rm"}
    _allowed, inner = await post(compress(call(ALLOWED)), (b"content-encoding", coding))
    # The backend receives exactly the bytes that were judged, and nothing says they are coded.
    assert inner.last.body == call(ALLOWED)
    assert inner.last.header(b"content-encoding") is None
    assert inner.last.header(b"content-length") == str(len(call(ALLOWED))).encode()


@pytest.mark.parametrize(
    ("headers", "body", "why"),
    [
        ([(b"content-encoding", b"br")], b"\x0b\x02\x80", "'br' is not one the gateway decodes"),
        ([(b"content-encoding", b"zstd")], b"(\xb5/\xfd", "is not one the gateway decodes"),
        ([(b"content-encoding", b"gzip, gzip")], gzip.compress(gzip.compress(call())), "more"),
        (
            [(b"content-encoding", b"gzip"), (b"content-encoding", b"deflate")],
            zlib.compress(gzip.compress(call())),
            "coded more than once",
        ),
        ([(b"content-encoding", b"gzip")], call(), "does not decode"),
        ([(b"content-encoding", b"gzip")], gzip.compress(call())[:-6], "truncated"),
        ([(b"content-encoding", b"gzip")], gzip.compress(call(ALLOWED)) * 2, "after its end"),
        ([(b"content-encoding", b"gzip")], gzip.compress(b" " * 5_000_000), "more than"),
        ([(b"content-encoding", b"deflate")], zlib.compress(call())[2:-4], "does not decode"),
    ],
    # Named: a gzip body holds the time it was made, so ids made of the bytes would differ
    # between the collections of two xdist workers, which then refuse to run.
    ids=[
        "br",
        "zstd",
        "gzip-twice",
        "gzip-then-deflate",
        "gzip-not-coded",
        "gzip-truncated",
        "gzip-then-more",
        "gzip-too-large",
        "deflate-truncated",
    ],
)
async def test_a_body_whose_coding_cannot_be_read_is_refused(headers, body, why):
    response, _ = await post(body, *headers)
    assert not response.reached
    assert response.status == 400
    assert response.json()["error"]["code"] == -32700
    assert why in response.json()["error"]["message"]
    assert response.header(b"accept-encoding") == b"gzip, deflate"


@pytest.mark.parametrize("charset", [b"utf-16", b"UTF-16LE", b"iso-8859-1", b'"utf-32"'])
async def test_a_body_declared_in_another_charset_is_refused(charset):
    response, _ = await post(call(ALLOWED), content_type=b"application/json; charset=" + charset)
    assert not response.reached
    assert response.json()["error"]["code"] == -32700


@pytest.mark.parametrize("charset", [b"utf-8", b"UTF-8", b'"utf-8"'])
async def test_a_body_declared_utf8_is_read(charset):
    response, _ = await post(call(ALLOWED), content_type=b"application/json; charset=" + charset)
    assert response.reached


# --- the bodies of the report, each refused ---------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","x":"\xff"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","n":'
        + b"7" * 5000
        + b"}}",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","a":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo\\ud800"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{"name":"rm"}}',
    ],
    ids=["invalid UTF-8", "5000 digits", "nested 100000 deep", "lone surrogate", "case"],
)
async def test_what_the_gateway_cannot_read_exactly_never_reaches_the_backend(body):
    response, _ = await post(body)
    assert not response.reached
    assert response.status == 400
    assert response.json()["error"]["code"] in (-32700, -32600)


# --- properties -------------------------------------------------------------------------------

_FOLD = str.casefold


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    return {"__pairs__": pairs}  # every reader model decides which copy of a key it reads


@dataclass(frozen=True)
class Reader:
    """How one kind of backend parser reads keys and strings."""

    fold: bool = False  # keys matched ignoring case (Go, System.Text.Json's web defaults)
    first: bool = False  # the first of repeated keys wins (cJSON), else the last
    replace_surrogates: bool = False  # lone surrogates become U+FFFD (Go)
    c_strings: bool = False  # keys and strings end at a NUL (C parsers)

    def text(self, value: object) -> object:
        if isinstance(value, str) and self.c_strings:
            value = value.split("\x00", 1)[0]
        if isinstance(value, str) and self.replace_surrogates:
            value = value.encode("utf-8", "replace").decode("utf-8")
        return value

    def lookup(self, obj: object, field: str) -> object:
        if not isinstance(obj, dict):
            return None
        found = None
        for key, value in obj["__pairs__"]:
            key = self.text(key)
            if key == field or (self.fold and _FOLD(key) == field):
                if self.first:
                    return value
                found = value
        return found

    def call_of(self, text: str) -> tuple | None:
        """(method, name) as this reader reads `text`, or None when it cannot parse it."""
        try:
            message = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            return None
        method = self.text(self.lookup(message, "method"))
        name = self.text(self.lookup(self.lookup(message, "params"), "name"))
        return method, name


def _no_constant(name: str) -> object:
    raise ValueError(name)


def inflated(body: bytes, coding: bytes | None) -> bytes:
    """The body as body-parser inflates it for the TypeScript SDK."""
    if coding in (b"gzip", b"deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32).decompress(body)
    return body


def backend_readings(body: bytes) -> list[tuple | None]:
    """What lenient backends make of `body`: the TypeScript SDK (body-parser: UTF-8 with
    replacement, BOM skipped, last key wins), Go (case-insensitive keys, last wins, U+FFFD for
    bad bytes and lone surrogates), C parsers (strings end at NUL; first or last key wins),
    Python's json.loads."""
    lenient = body.decode("utf-8", "replace")
    readings = [
        Reader().call_of(lenient.removeprefix("\ufeff")),
        Reader(fold=True, replace_surrogates=True).call_of(lenient),
        Reader(first=True, c_strings=True).call_of(lenient),
        Reader(c_strings=True).call_of(lenient),
    ]
    with contextlib.suppress(UnicodeDecodeError, LookupError):
        readings.append(Reader().call_of(body.decode(json.detect_encoding(body))))
    return readings


KEYS = st.sampled_from(
    [
        "method",
        "METHOD",
        "Method",
        "method\\u0000",
        "name\\u0000x",
        "params",
        "Params",
        "param\u017f",
        "jsonrpc",
        "id",
        "name",
        "Name",
        "NAME",
        "arguments",
    ]
)
NAMES = st.sampled_from(["echo", "rm", "Echo", "echo\\ud800", "rm\\udfff", "echo\\u0000", "é"])
METHODS = st.sampled_from(
    ["tools/call", "Tools/Call", "tools/call ", "ping", "tools/list", "tools/call\\u0000x"]
)


@st.composite
def json_texts(draw: st.DrawFn) -> str:
    """A JSON-RPC-like object written by hand so keys may repeat and differ only in case."""
    pairs = [("jsonrpc", '"2.0"'), ("id", draw(st.sampled_from(["1", '"a"', "1.0", "null"])))]
    pairs.append(("method", f'"{draw(METHODS)}"'))
    params = [("name", f'"{draw(NAMES)}"')]
    for _ in range(draw(st.integers(0, 3))):
        params.append((draw(KEYS), f'"{draw(NAMES)}"'))
    pairs.append(("params", "{" + ",".join(f'"{k}":{v}' for k, v in params) + "}"))
    for _ in range(draw(st.integers(0, 3))):
        value = draw(
            st.sampled_from(
                [
                    f'"{draw(METHODS)}"',
                    '{"name":"rm"}',
                    "NaN",
                    "1e999",
                    "9" * 4400,
                    "[" * 50 + "]" * 50,
                    '"\\ud83d"',
                ]
            )
        )
        pairs.insert(draw(st.integers(0, len(pairs))), (draw(KEYS), value))
    return "{" + ",".join(f'"{k}":{v}' for k, v in pairs) + "}"


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    text = draw(json_texts())
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    raw = text.encode(encoding, "surrogatepass" if encoding != "latin-1" else "replace")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80"])) + raw[at:]
    headers: list[tuple[bytes, bytes]] = []
    coding = draw(st.sampled_from([None, None, b"gzip", b"deflate", b"br"]))
    if coding is not None:
        raw = gzip.compress(raw) if coding == b"gzip" else zlib.compress(raw)
        headers.append((b"content-encoding", coding))
    return raw, headers


@FUZZ
@given(bodies())
async def test_a_denied_tool_is_never_called_whatever_the_body_looks_like(case):
    body, headers = case
    response, inner = await post(body, *headers)
    assert response.status in (200, 400), response.body
    if not response.reached:
        return
    forwarded = inner.last
    for reading in backend_readings(
        inflated(forwarded.body, forwarded.header(b"content-encoding"))
    ):
        if reading is not None and reading[0] == "tools/call":
            assert reading[1] == ALLOWED, (forwarded.body, reading)


@FUZZ
@given(st.binary(max_size=300), st.sampled_from([None, b"gzip", b"deflate", b"br", b"a, b"]))
async def test_any_bytes_in_any_coding_are_judged_or_refused_never_a_500(body, coding):
    headers = [(b"content-encoding", coding)] if coding else []
    response, inner = await post(body, *headers)
    assert response.status in (200, 400, 413)
    if response.reached:
        json.loads(inner.last.body)  # only what the gateway read as JSON goes inward
