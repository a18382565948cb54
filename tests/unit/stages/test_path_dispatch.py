"""`PathDispatch` (`dataplane/oauth_endpoints.py`) on its own: which requests its handlers answer
(exact paths, trailing slashes ignored) and which go on to the rest of the pipeline. The pipeline
puts it outside the CORS filter for the Broker's browser pages."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.dataplane.oauth_endpoints import PathDispatch, endpoint_path

from .harness import Inner, drive


def dispatch() -> tuple[PathDispatch, Inner, Inner, Inner]:
    page, root, rest = (
        Inner(headers=[(b"content-type", b"text/html")], body=b"<p>page</p>"),
        Inner(body=b"root"),
        Inner(),
    )
    return PathDispatch({"/mcp/authorize": page, "/": root}, rest), page, root, rest


@pytest.mark.parametrize("path", ["/mcp/authorize", "/mcp/authorize/", "/mcp/authorize///"])
async def test_a_handler_answers_its_path_with_or_without_trailing_slashes(path):
    app, page, _, rest = dispatch()
    response = await drive(app, "POST", path, query=b"client_id=c&state=s", body=b"a=1", inner=page)
    assert response.reached
    assert response.body == b"<p>page</p>"
    assert rest.seen == []
    # The handler gets the request as it came: path, query and body untouched.
    assert page.last.scope["path"] == path
    assert page.last.scope["query_string"] == b"client_id=c&state=s"
    assert page.last.body == b"a=1"


@pytest.mark.parametrize("path", ["/", "//"])
async def test_the_root_path_is_one_path_however_many_slashes(path):
    app, page, root, rest = dispatch()
    response = await drive(app, "GET", path, inner=root)
    assert response.reached
    assert (page.seen, rest.seen) == ([], [])


@pytest.mark.parametrize(
    "path",
    [
        "/mcp/authorize/x",  # exact paths only: nothing below a handler's path
        "/mcp/authorizex",
        "/mcp/Authorize",  # paths are case-sensitive
        "/mcp",
        "/mcp/authorize%2F",
    ],
)
async def test_every_other_path_goes_on_to_the_pipeline(path):
    app, page, root, rest = dispatch()
    response = await drive(app, "POST", path, body=[b"{", b"}"], inner=rest)
    assert response.reached
    assert response.body == b'{"ok": true}'
    assert (page.seen, root.seen) == ([], [])
    assert rest.last.scope["path"] == path
    assert (rest.last.body, rest.last.body_messages) == (b"{}", 2)


@pytest.mark.parametrize(
    ("path", "key"),
    [("/mcp/", "/mcp"), ("/mcp", "/mcp"), ("/", "/"), ("///", "/"), ("/a//b/", "/a//b")],
)
def test_every_stage_looks_endpoints_up_by_the_same_key(path, key):
    assert endpoint_path({"path": path}) == key
