"""Header transformations from verified claims reach the real MCP backend; clients cannot spoof
them; values with control characters are refused."""

from __future__ import annotations

import uuid

import httpx
import pytest

from conftest import gateway_beside

TRANSFORMATION = """    transformation:
      request:
        set:
          - {name: X-User, value: 'jwt.sub'}
          - {name: X-Groups, value: 'jwt.groups.join(",")'}
          - {name: X-Email, value: 'jwt.email'}
          - {name: X-Path, value: 'request.path'}
        remove: [X-Internal-Secret]
"""


@pytest.fixture(scope="module")
def transformed(stack_b, tmp_path_factory, logs):
    yield from gateway_beside(
        stack_b, tmp_path_factory.mktemp("transform"), logs, "gateway-transform", TRANSFORMATION
    )


def send(base: str, token: str, **headers: str) -> tuple[httpx.Response, dict[str, str]]:
    stack_mark = uuid.uuid4().hex
    response = httpx.post(
        f"{base}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        headers={
            "Authorization": f"Bearer {token}",
            "Mcp-Param-Mark": stack_mark,
            "Accept": "application/json, text/event-stream",
            **headers,
        },
    )
    return response, stack_mark  # type: ignore[return-value]


def seen_by_backend(stack_b, mark: str) -> dict[str, str]:
    for request in httpx.get(f"http://{stack_b.backend}/debug/requests").json():
        headers = dict(request["headers"])
        if headers.get("mcp-param-mark") == mark:
            return headers
    raise AssertionError("the request did not reach the backend")


def test_claims_become_headers_and_spoofs_are_dropped(transformed, stack_b):
    response, mark = send(
        transformed,
        stack_b.token(),
        **{"X-User": "mallory", "X-Internal-Secret": "s3cret", "X-Email": "spoof@evil"},
    )
    assert response.status_code == 200
    headers = seen_by_backend(stack_b, mark)
    assert headers["x-user"] == "alice"
    assert headers["x-groups"] == "mcp-agent,users"
    assert headers["x-path"] == "/mcp"
    assert "x-internal-secret" not in headers
    assert "x-email" not in headers, "a missing claim leaves the header unset (spoof dropped)"


def test_control_characters_in_a_value_are_refused(transformed, stack_b):
    response, _ = send(transformed, stack_b.token(sub="alice\r\nX-Admin: yes"))
    assert response.status_code == 400
    assert "control characters" in response.json()["error_description"]
