from __future__ import annotations

import pytest

from unit.route_reference import host_matches, path_matches


@pytest.mark.parametrize(
    ("kind", "value", "path", "expected"),
    [
        ("PathPrefix", "/mcp", "/mcp", True),
        ("PathPrefix", "/mcp", "/mcp/x", True),
        ("PathPrefix", "/mcp", "/mcpx", False),
        ("PathPrefix", "/mcp/", "/mcp", True),
        ("PathPrefix", "/", "/anything", True),
        ("Exact", "/mcp", "/mcp", True),
        ("Exact", "/mcp", "/mcp/", False),
        (
            "PathPrefix",
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource/mcp",
            True,
        ),
    ],
)
def test_path_matches(kind, value, path, expected):
    assert path_matches(kind, value, path) is expected


def test_host_matches():
    assert host_matches((), "anything:8080")
    assert host_matches(("mcp.example.com",), "MCP.example.com:443")
    assert host_matches(("*.example.com",), "a.example.com")
    assert not host_matches(("*.example.com",), "example.com")
    assert not host_matches(("mcp.example.com",), "evil.com")
