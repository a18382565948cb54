"""Answers that may hold list results, filtered whatever they look like: lone surrogates (what
`JSON.stringify` writes for a string cut mid-emoji), compressed bodies, batches, SSE events,
streams resumed with GET. What the filter cannot read is replaced by a JSON-RPC error, never
passed on as it came."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from unit.fuzz_settings import FUZZ
from unit.rpc_bodies import body as rpc

from .harness import Inner, drive
from .mcp_authz_support import USER, stage

SSE = (b"content-type", b"text/event-stream")
JSON_TYPE = (b"content-type", b"application/json")
# A description cut mid-emoji: JSON.stringify writes the lone high surrogate as an escape.
CUT = (
    b'{"jsonrpc":"2.0","id":7,"result":{"tools":'
    b'[{"name":"echo","description":"hi \\ud83d"},{"name":"rm"}]}}'
)


def names_read_by_a_client(body: bytes) -> list[str]:
    """Every tool name a TypeScript client reads from a JSON body or an SSE stream (UTF-8 with
    replacement, then JSON.parse, which keeps lone surrogates)."""
    text = body.decode("utf-8", "replace")
    datas = [text]
    if text.lstrip().startswith(("data:", "id:", "event:", ":")):
        events = text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n")
        datas = [
            "\n".join(
                line[5:].removeprefix(" ") for line in e.split("\n") if line.startswith("data:")
            )
            for e in events
        ]
    names = []
    for data in datas:
        try:
            message = json.loads(data)
        except ValueError:
            continue
        for one in message if isinstance(message, list) else [message]:
            result = one.get("result") if isinstance(one, dict) else None
            if isinstance(result, dict):
                for field in ("tools", "prompts", "resources", "resourceTemplates"):
                    for item in result.get(field) or []:
                        if isinstance(item, dict):
                            names.append(item.get("name") or item.get("uri"))
    return names


async def listed(inner: Inner, method: str = "POST", request: bytes = rpc("tools/list")):
    return await drive(
        stage(inner),
        method,
        headers=[JSON_TYPE],
        body=request if method == "POST" else b"",
        scope=USER,
        inner=inner,
    )


async def test_a_result_with_a_lone_surrogate_is_filtered_and_keeps_it():
    response = await listed(Inner(headers=[JSON_TYPE], body=CUT))
    assert response.status == 200
    assert names_read_by_a_client(response.body) == ["echo"]
    # Written back with the escape the backend used: a client reads the same description.
    assert json.loads(response.body)["result"]["tools"][0]["description"] == "hi \ud83d"


async def test_an_sse_result_with_a_lone_surrogate_is_filtered():
    response = await listed(Inner.sse([b"id: 3\ndata: " + CUT + b"\n\n"]))
    assert names_read_by_a_client(response.body) == ["echo"]
    assert response.body.startswith(b"id: 3\n")


async def test_a_json_answer_that_cannot_be_read_is_a_jsonrpc_error_not_the_answer():
    unreadable = b'{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"rm"}' + b"[" * 5000
    response = await listed(Inner(headers=[JSON_TYPE], body=unreadable))
    assert response.status == 502
    assert response.json()["id"] == 7
    assert response.json()["error"]["code"] == -32603
    assert "could not filter" in response.json()["error"]["message"]
    assert names_read_by_a_client(response.body) == []


async def test_a_success_that_is_not_json_is_not_passed_on():
    response = await listed(Inner(headers=[(b"content-type", b"text/plain")], body=b"rm, echo"))
    assert response.status == 502
    assert b"rm" not in response.body.replace(b"could not filter", b"")


async def test_an_sse_event_that_cannot_be_read_becomes_an_error_event():
    bad = b'{"jsonrpc":"2.0","id":7,"result":{"tools":[{"name":"rm"}]}' + b"]" * 3
    response = await listed(Inner.sse([b"id: 5\ndata: " + bad + b"\n\n"]))
    assert response.status == 200
    event = response.body.decode()
    assert event.startswith("id: 5\ndata: ")
    error = json.loads(event.split("data: ", 1)[1])
    assert (error["id"], error["error"]["code"]) == (7, -32603)


async def test_an_event_without_data_passes_as_it_came():
    """MCP's priming event (an id and an empty `data:`) and an id alone carry no message: a
    client dispatches none, so they pass, and the events after them are filtered."""
    events = [b"id: 4\ndata: \n\n", b"id: 5\n\n", b"id: 6\ndata: " + CUT + b"\n\n"]
    response = await listed(Inner.sse(events), "GET")
    assert response.body.startswith(b"id: 4\ndata: \n\nid: 5\n\nid: 6\n")
    assert names_read_by_a_client(response.body) == ["echo"]


@pytest.mark.parametrize(
    ("coding", "compress"), [(b"gzip", gzip.compress), (b"deflate", zlib.compress)]
)
@pytest.mark.parametrize("sse", [False, True])
async def test_a_compressed_answer_is_decoded_and_filtered(coding, compress, sse):
    plain = b"data: " + CUT + b"\n\n" if sse else CUT
    whole = compress(plain)
    inner = Inner(
        headers=[SSE if sse else JSON_TYPE, (b"content-encoding", coding)],
        body=[whole[:9], whole[9:]],
    )
    response = await listed(inner)
    assert response.status == 200
    assert response.header(b"content-encoding") is None
    assert names_read_by_a_client(response.body) == ["echo"]
    # The backend was asked not to compress: an absent Accept-Encoding would allow any coding.
    assert inner.last.header(b"accept-encoding") == b"identity"


@pytest.mark.parametrize("sse", [False, True])
async def test_an_answer_in_a_coding_not_decoded_is_an_error(sse):
    inner = Inner(
        headers=[SSE if sse else JSON_TYPE, (b"content-encoding", b"br")], body=[b"\x1b\x00"]
    )
    response = await listed(inner)
    assert names_read_by_a_client(response.body) == []
    assert b"-32603" in response.body
    assert response.status == (200 if sse else 502)


async def test_a_truncated_compressed_stream_ends_with_an_error_event():
    whole = gzip.compress(b"data: " + CUT + b"\n\n")
    inner = Inner(headers=[SSE, (b"content-encoding", b"gzip")], body=[whole[:-8]])
    response = await listed(inner)
    assert b"truncated" in response.body
    assert "rm" not in names_read_by_a_client(response.body)


async def test_a_batch_answer_is_filtered_member_by_member():
    batch = b"[" + CUT.replace(b"\\ud83d", b"") + b"," + CUT.replace(b"\\ud83d", b"") + b"]"
    response = await listed(Inner(headers=[JSON_TYPE], body=batch))
    assert names_read_by_a_client(response.body) == ["echo", "echo"]


async def test_a_resumed_get_stream_has_its_list_results_filtered():
    # Last-Event-ID replays the events of an earlier POST stream, a tools/list answer among them.
    inner = Inner.sse(
        [b"id: 9\ndata: " + CUT + b"\n\n", b'data: {"jsonrpc":"2.0","method":"x"}\n\n']
    )
    response = await listed(inner, "GET")
    assert names_read_by_a_client(response.body) == ["echo"]
    assert b'"method":"x"' in response.body
    assert inner.last.header(b"accept-encoding") == b"identity"


async def test_an_answer_that_is_not_a_list_passes_byte_for_byte_on_a_get_stream():
    event = b'id: 1\ndata: {"jsonrpc":"2.0","id":3,"result":{"content":[]}}\n\n'
    response = await listed(Inner.sse([event]), "GET")
    assert response.body == event


# --- property ---------------------------------------------------------------------------------

TOOL_NAMES = st.sampled_from(["echo", "rm", "drop", "echo2"])
TEXT = st.text(st.characters(codec=None, exclude_categories=["Cs"]), max_size=12) | st.sampled_from(
    ["\ud83d", "\udfff", "a\ud800b"]
)


@st.composite
def answers(draw: st.DrawFn) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    tools = [
        {"name": draw(TOOL_NAMES), "description": draw(TEXT)}
        for _ in range(draw(st.integers(0, 4)))
    ]
    message = {"jsonrpc": "2.0", "id": 7, "result": {"tools": tools}}
    text = json.dumps(message, ensure_ascii=draw(st.booleans()))
    data = text.encode("utf-8", "surrogatepass")  # as a server that writes surrogates raw would
    sse = draw(st.booleans())
    if sse:
        ending = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
        data = b"event: message" + ending + b"data: " + data + ending + ending
    headers = [SSE if sse else JSON_TYPE]
    coding = draw(st.sampled_from([None, b"gzip", b"deflate"]))
    if coding is not None:
        data = gzip.compress(data) if coding == b"gzip" else zlib.compress(data)
        headers.append((b"content-encoding", coding))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return chunks, headers


@FUZZ
@given(answers())
async def test_a_client_never_reads_a_denied_item_whatever_the_answer_looks_like(answer):
    chunks, headers = answer
    response = await listed(Inner(headers=headers, body=chunks))
    assert response.header(b"content-encoding") is None
    assert set(names_read_by_a_client(response.body)) <= {"echo"}
