"""Where discovery looks (`useroauth.discovery`): the protected resource metadata URLs of a
backend (RFC 9728 §3.1, §5.1) and the metadata URLs of an issuer (RFC 8414 §3.1, OpenID Connect
Discovery), in the order the MCP specification gives."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.useroauth.discovery import (
    DiscoveryError,
    authorization_server_metadata_urls,
    resource_metadata_url,
)

BACKEND = "https://mcp.example/public/mcp"
PRM = "https://mcp.example/.well-known/oauth-protected-resource/public/mcp"


def test_the_url_the_challenge_names_is_the_only_one_tried():
    header = 'Bearer resource_metadata="https://meta.example/prm"'
    assert resource_metadata_url(header, BACKEND) == ["https://meta.example/prm"]


@pytest.mark.parametrize(
    ("backend", "expected"),
    [
        (BACKEND, [PRM, "https://mcp.example/.well-known/oauth-protected-resource"]),
        (
            "https://mcp.example/public/mcp/",
            [PRM, "https://mcp.example/.well-known/oauth-protected-resource"],
        ),
        ("https://mcp.example", ["https://mcp.example/.well-known/oauth-protected-resource"]),
        ("https://mcp.example/", ["https://mcp.example/.well-known/oauth-protected-resource"]),
        (
            "http://127.0.0.1:8123/mcp?tenant=a",
            [
                "http://127.0.0.1:8123/.well-known/oauth-protected-resource/mcp?tenant=a",
                "http://127.0.0.1:8123/.well-known/oauth-protected-resource",
            ],
        ),
        (
            "https://mcp.example:443/mcp",
            [
                "https://mcp.example/.well-known/oauth-protected-resource/mcp",
                "https://mcp.example/.well-known/oauth-protected-resource",
            ],
        ),
    ],
)
def test_without_a_challenge_the_path_form_then_the_root(backend, expected):
    assert resource_metadata_url(None, backend) == expected
    assert resource_metadata_url('Bearer error="invalid_token"', backend) == expected


def test_two_different_urls_in_the_challenges_are_refused():
    header = (
        'Bearer resource_metadata="https://a.example/prm", '
        'DPoP resource_metadata="https://b.example/prm"'
    )
    with pytest.raises(DiscoveryError) as refused:
        resource_metadata_url(header, BACKEND)
    message = str(refused.value)
    assert "2 different resource_metadata URLs" in message
    assert "https://a.example/prm" in message
    assert "https://b.example/prm" in message
    assert "set userOAuth.issuer" in message


@pytest.mark.parametrize(
    ("named", "why"),
    [
        ("/relative/prm", "not an absolute http(s) URL"),
        ("ftp://mcp.example/prm", "not an absolute http(s) URL"),
        ("https://user:pw@mcp.example/prm", "not an absolute http(s) URL"),
        ("https://mcp.example/prm#x", "not an absolute http(s) URL"),
        ("http://mcp.example/prm", "anyone on the way"),
    ],
)
def test_a_named_url_that_is_not_usable_is_refused(named, why):
    with pytest.raises(DiscoveryError, match="step 1") as refused:
        resource_metadata_url(f'Bearer resource_metadata="{named}"', BACKEND)
    assert why in str(refused.value)
    assert "pw" not in str(refused.value)


def test_an_http_backend_may_name_http_metadata():
    header = 'Bearer resource_metadata="http://mcp.svc:8000/.well-known/oauth-protected-resource"'
    assert resource_metadata_url(header, "http://mcp.svc:8000/mcp") == [
        "http://mcp.svc:8000/.well-known/oauth-protected-resource"
    ]


@pytest.mark.parametrize(
    ("issuer", "expected"),
    [
        (
            "https://auth.example",
            [
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration",
            ],
        ),
        (
            "https://auth.example/",
            [
                "https://auth.example/.well-known/oauth-authorization-server",
                "https://auth.example/.well-known/openid-configuration",
            ],
        ),
        (
            "https://auth.example/tenant1",
            [
                "https://auth.example/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example/.well-known/openid-configuration/tenant1",
                "https://auth.example/tenant1/.well-known/openid-configuration",
            ],
        ),
        (
            # authentik's issuers end in a slash; it is dropped before a suffix is added.
            "http://127.0.0.1:9000/application/o/myapp/",
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server/application/o/myapp",
                "http://127.0.0.1:9000/.well-known/openid-configuration/application/o/myapp",
                "http://127.0.0.1:9000/application/o/myapp/.well-known/openid-configuration",
            ],
        ),
        (
            "https://kc.example:8443/realms/mcp",
            [
                "https://kc.example:8443/.well-known/oauth-authorization-server/realms/mcp",
                "https://kc.example:8443/.well-known/openid-configuration/realms/mcp",
                "https://kc.example:8443/realms/mcp/.well-known/openid-configuration",
            ],
        ),
    ],
)
def test_issuer_metadata_urls(issuer, expected):
    assert authorization_server_metadata_urls(issuer) == expected
