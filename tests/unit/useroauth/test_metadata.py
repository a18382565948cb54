"""What the gateway accepts of an upstream's metadata (`useroauth.metadata`): the issuer must be
the one the URL was built from, the resource must name the backend, PKCE S256 must be offered,
and every endpoint must be https (http only on loopback); each refusal says what is wrong."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.useroauth.metadata import (
    AuthServer,
    Endpoints,
    MetadataProblem,
    endpoint_url,
    from_endpoints,
    issuer_url,
    read_resource_metadata,
    read_server_metadata,
    resource_matches,
    same_issuer,
)

ISSUER = "https://auth.example/tenant1"


def server_document(**changes: object) -> dict[str, object]:
    document: dict[str, object] = {
        "issuer": ISSUER,
        "authorization_endpoint": "https://auth.example/tenant1/authorize",
        "token_endpoint": "https://auth.example/tenant1/token",
        "revocation_endpoint": "https://auth.example/tenant1/revoke",
        "code_challenge_methods_supported": ["plain", "S256"],
        "scopes_supported": ["openid", "repo"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
        "authorization_response_iss_parameter_supported": True,
    }
    document.update(changes)
    return {k: v for k, v in document.items() if v is not None}


def test_a_complete_document():
    assert read_server_metadata(server_document(), ISSUER) == AuthServer(
        issuer=ISSUER,
        authorization_endpoint="https://auth.example/tenant1/authorize",
        token_endpoint="https://auth.example/tenant1/token",
        revocation_endpoint="https://auth.example/tenant1/revoke",
        iss_parameter_supported=True,
        code_challenge_methods=("plain", "S256"),
        scopes_supported=("openid", "repo"),
        resource=None,
        token_endpoint_auth_methods=("client_secret_post", "client_secret_basic"),
    )


def test_optional_fields_absent():
    document = server_document(
        revocation_endpoint=None,
        code_challenge_methods_supported=None,
        scopes_supported=None,
        token_endpoint_auth_methods_supported=None,
        authorization_response_iss_parameter_supported=None,
    )
    server = read_server_metadata(document, ISSUER)
    assert server.revocation_endpoint is None
    assert server.code_challenge_methods == ("S256",)  # OAuth 2.1: every server has it
    assert server.token_endpoint_auth_methods == ("client_secret_basic",)  # RFC 8414 default
    assert server.iss_parameter_supported is False


@pytest.mark.parametrize(
    "found",
    [
        "https://auth.example/tenant1/",  # a trailing slash is another issuer
        "https://auth.example/tenant2",
        "https://evil.example/tenant1",
        "HTTPS://auth.example/tenant1",
        None,
        ["https://auth.example/tenant1"],
    ],
)
def test_an_issuer_that_is_not_the_one_asked_for_is_refused(found):
    with pytest.raises(MetadataProblem) as refused:
        read_server_metadata(server_document(issuer=found), ISSUER)
    message = str(refused.value)
    assert "RFC 8414 §3.3" in message
    assert f"not {ISSUER!r}" in message
    assert f"is {found!r}" in message if isinstance(found, str) else "is " in message


def test_a_root_issuer_may_lack_the_slash_its_url_was_given_with():
    assert same_issuer("https://auth.example/", "https://auth.example")
    assert not same_issuer("https://auth.example", "https://auth.example/")
    assert not same_issuer("https://auth.example/a/", "https://auth.example/a")
    document = server_document(issuer="https://auth.example")
    assert read_server_metadata(document, "https://auth.example/").issuer == "https://auth.example"


@pytest.mark.parametrize("methods", [["plain"], [], ["s256"]])
def test_no_s256_is_refused(methods):
    with pytest.raises(MetadataProblem, match="no S256"):
        read_server_metadata(server_document(code_challenge_methods_supported=methods), ISSUER)


@pytest.mark.parametrize(
    "field", ["authorization_endpoint", "token_endpoint", "revocation_endpoint"]
)
@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("http://auth.example/x", "http on a host that is not loopback"),
        ("http://10.0.0.1/x", "http on a host that is not loopback"),
        ("http://127.0.0.2.example/x", "http on a host that is not loopback"),
        ("/token", "not an absolute http(s) URL"),
        ("javascript:alert(1)", "not an absolute http(s) URL"),
        ("https://u:secret@auth.example/x", "not an absolute http(s) URL"),
        ("https://auth.example/x#frag", "not an absolute http(s) URL"),
        ("", "not a URL"),
        (42, "not a URL"),
    ],
)
def test_an_unusable_endpoint_is_refused_naming_it(field, value, why):
    with pytest.raises(MetadataProblem) as refused:
        read_server_metadata(server_document(**{field: value}), ISSUER)
    assert field in str(refused.value)
    assert why in str(refused.value)


def test_missing_required_endpoints_are_refused():
    for field in ("authorization_endpoint", "token_endpoint"):
        with pytest.raises(MetadataProblem, match=f"{field}` is missing"):
            read_server_metadata(server_document(**{field: None}), ISSUER)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9000/token", "http://localhost/token", "http://[::1]:80/token"]
)
def test_http_on_loopback_is_allowed(url):
    assert endpoint_url(url, "x") == url.replace(":80/", "/")


def test_http_elsewhere_only_when_allowed():
    with pytest.raises(MetadataProblem):
        endpoint_url("http://keycloak.auth.svc:8080/token", "x")
    assert endpoint_url("http://keycloak.auth.svc:8080/token", "x", allow_http=True)


def test_an_authorization_endpoint_keeps_its_query_but_not_one_the_gateway_sets():
    kept = read_server_metadata(
        server_document(authorization_endpoint="https://auth.example/authorize?tenant=a"), ISSUER
    )
    assert kept.authorization_endpoint == "https://auth.example/authorize?tenant=a"
    for query in ("client_id=evil", "redirect_uri=https://evil.example/", "st%61te=x"):
        with pytest.raises(MetadataProblem, match="which the gateway sets itself"):
            read_server_metadata(
                server_document(authorization_endpoint=f"https://auth.example/a?{query}"), ISSUER
            )


@pytest.mark.parametrize(
    "field",
    [
        "code_challenge_methods_supported",
        "scopes_supported",
        "token_endpoint_auth_methods_supported",
    ],
)
def test_a_list_that_is_not_one_of_strings_is_refused(field):
    with pytest.raises(MetadataProblem, match=f"`{field}` is"):
        read_server_metadata(server_document(**{field: "S256"}), ISSUER)


def test_only_a_literal_true_promises_iss():
    document = server_document(authorization_response_iss_parameter_supported="true")
    assert read_server_metadata(document, ISSUER).iss_parameter_supported is False


BACKEND = "https://mcp.example/tenant/mcp"


@pytest.mark.parametrize(
    "resource",
    [
        BACKEND,
        BACKEND + "/",
        "https://mcp.example/tenant",
        "https://mcp.example/",
        "https://mcp.example",
        "https://mcp.example:443/tenant/mcp",
    ],
)
def test_a_resource_at_or_above_the_backend_matches(resource):
    assert resource_matches(resource, BACKEND)


@pytest.mark.parametrize(
    "resource",
    [
        "https://mcp.example/tenant/mcpx",
        "https://mcp.example/tenant/mcp/sub",
        "https://mcp.example/other/mcp",
        "http://mcp.example/tenant/mcp",
        "https://mcp.example:8443/tenant/mcp",
        "https://evil.example/tenant/mcp",
        "https://mcp.example/tenant/mcp#x",
        "https://mcp.example/tenant/mcp?a=1",
        "not a url",
    ],
)
def test_another_resource_does_not_match(resource):
    assert not resource_matches(resource, BACKEND)


def test_a_resource_with_a_query_must_be_the_backend_itself():
    assert resource_matches("https://mcp.example/mcp?t=a", "https://mcp.example/mcp?t=a")
    assert not resource_matches("https://mcp.example/mcp?t=a", "https://mcp.example/mcp?t=b")


def test_resource_metadata():
    document = {
        "resource": BACKEND,
        "authorization_servers": ["https://auth.example/a", "https://auth.example/b"],
        "scopes_supported": ["read"],
    }
    found = read_resource_metadata(document, BACKEND)
    assert found.authorization_servers == ("https://auth.example/a", "https://auth.example/b")
    assert found.scopes_supported == ("read",)


def test_a_resource_of_another_server_is_refused_naming_both():
    document = {"resource": "https://other.example/mcp", "authorization_servers": [ISSUER]}
    with pytest.raises(MetadataProblem) as refused:
        read_resource_metadata(document, BACKEND)
    assert "'https://other.example/mcp'" in str(refused.value)
    assert repr(BACKEND) in str(refused.value)


@pytest.mark.parametrize(
    "document",
    [
        {"authorization_servers": [ISSUER]},
        {"resource": BACKEND},
        {"resource": BACKEND, "authorization_servers": []},
        {"resource": BACKEND, "authorization_servers": ISSUER},
        {"resource": BACKEND, "authorization_servers": [""]},
        {"resource": BACKEND, "authorization_servers": [7]},
    ],
)
def test_resource_metadata_without_its_required_members_is_refused(document):
    with pytest.raises(MetadataProblem):
        read_resource_metadata(document, BACKEND)


def test_explicit_endpoints():
    github = Endpoints(
        "https://github.com/login/oauth/authorize", "https://github.com/login/oauth/access_token"
    )
    server = from_endpoints(github, None)
    assert server.issuer is None
    assert server.revocation_endpoint is None
    assert server.code_challenge_methods == ("S256",)
    assert server.token_endpoint_auth_methods == ("client_secret_post",)


@pytest.mark.parametrize(
    ("explicit", "issuer", "why"),
    [
        (Endpoints("http://gh.example/a", "https://gh.example/t"), None, "authorization endpoint"),
        (Endpoints("https://gh.example/a", "http://gh.example/t"), None, "token endpoint"),
        (
            Endpoints("https://gh.example/a", "https://gh.example/t", "http://gh.example/r"),
            None,
            "revocation endpoint",
        ),
        (
            Endpoints("https://gh.example/a", "https://gh.example/t"),
            "https://gh.example/?x=1",
            "has a query",
        ),
        (
            Endpoints(
                "https://gh.example/a", "https://gh.example/t", auth_method="private_key_jwt"
            ),
            None,
            "private_key_jwt",
        ),
    ],
)
def test_explicit_endpoints_that_are_not_usable(explicit, issuer, why):
    with pytest.raises(MetadataProblem, match=why):
        from_endpoints(explicit, issuer)


def test_an_issuer_is_https_without_query():
    assert issuer_url("https://auth.example/t/", "issuer") == "https://auth.example/t/"
    with pytest.raises(MetadataProblem, match="not loopback"):
        issuer_url("http://auth.example", "issuer")
