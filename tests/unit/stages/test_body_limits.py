"""One request-body reader and one 413 answer (issue 40): every place that reads a request body
reads it with `asgi.read_body` (or, streaming it on, counts it against the same limit) and
answers a body past its limit with the same error code and a description naming the limit and
what sets it; and no module of src/ answers 413 with another code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mcp_oauth_gateway
from mcp_oauth_gateway.asgi import (
    MAX_BODY_SETTING,
    TOO_LARGE,
    BodyTooLarge,
    Message,
    read_body,
)

from .federation_targets import Targets, rpc, stage
from .harness import drive

PACKAGE = Path(mcp_oauth_gateway.__file__).resolve().parent


def _receiver(messages: list[Message]):
    given: list[Message] = []

    async def receive() -> Message:
        given.append(messages[len(given)])
        return given[-1]

    return receive, given


def _chunk(body: bytes, more: bool = True) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_the_reader_joins_the_chunks():
    receive, _ = _receiver([_chunk(b"ab"), _chunk(b""), _chunk(b"cd", more=False)])
    assert await read_body(receive, 4) == b"abcd"


async def test_a_client_gone_first_is_none_not_an_empty_body():
    receive, _ = _receiver([_chunk(b"ab"), {"type": "http.disconnect"}])
    assert await read_body(receive, 4) is None


async def test_past_the_limit_it_stops_reading_and_names_the_limit_and_its_setting():
    receive, given = _receiver([_chunk(b"abc"), _chunk(b"de"), _chunk(b"never read", False)])
    with pytest.raises(BodyTooLarge) as raised:
        await read_body(receive, 4)
    assert len(given) == 2
    assert str(raised.value) == (
        "the request body exceeds 4 bytes, the limit set by serve --max-body-bytes"
    )
    assert "--max-body-bytes" in MAX_BODY_SETTING
    with pytest.raises(BodyTooLarge, match="exceeds 2 bytes, the limit of a form"):
        await read_body(_receiver([_chunk(b"abc", False)])[0], 2, "of a form")


async def test_a_federated_route_answers_the_same_413():
    app = stage(Targets())  # a limit of 1 MiB
    response = await drive(app, "POST", body=[b" " * (1 << 20), rpc("tools/list")])
    assert response.status == 413
    assert response.json() == {
        "error": TOO_LARGE,
        "error_description": "the request body exceeds 1048576 bytes, the limit set by "
        "serve --max-body-bytes",
    }


def _calls_413(source: str, where: str) -> list[str]:
    """`where:line [names and strings]` of each call in `source` given 413 with another code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        arguments = [*node.args, *(k.value for k in node.keywords)]
        if not any(isinstance(a, ast.Constant) and a.value == 413 for a in arguments):
            continue
        words = [
            a.id if isinstance(a, ast.Name) else str(a.value)
            for a in arguments
            if isinstance(a, ast.Name | ast.Constant)
        ]
        # A page for a person (HTML) is not an error a client reads: its title says it.
        if "TOO_LARGE" not in words and "Too large" not in words:
            found.append(f"{where}:{node.lineno} {words}")
    return found


def test_every_413_of_src_gives_the_one_error_code():
    other = [
        call
        for path in sorted(PACKAGE.rglob("*.py"))
        for call in _calls_413(path.read_text(), str(path.relative_to(PACKAGE)))
    ]
    assert other == [], "answer these with asgi.send_too_large (or TOO_LARGE):\n" + "\n".join(other)


@pytest.mark.parametrize(
    "source",
    [
        'await send_error(send, 413, "request_entity_too_large", why)',
        'raise OAuthError(413, "invalid_client_metadata", "registration body too large")',
        'await refuse(scope, send, status=413, error="request_too_big", description=why)',
    ],
)
def test_the_scan_finds_a_413_with_another_code(source):
    """The scan above would pass vacuously if it missed calls written as the old ones were."""
    assert _calls_413(f"async def f():\n    {source}\n", "m.py") != []
