"""The gateway's requests as a user's OAuth client (`useroauth.oauth_client`), the decisions
without a server: the authorization URL, the RFC 9207 `iss` check, how the client
authenticates, and how a token endpoint's answer is read (the I/O is tested against real
authorization servers in tests/e2e/test_useroauth_client.py)."""

from __future__ import annotations

import base64
import dataclasses
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from mcp_oauth_gateway.useroauth.metadata import AuthServer
from mcp_oauth_gateway.useroauth.oauth_client import (
    IssuerMismatch,
    TokenAnswer,
    UpstreamOAuthError,
    authorization_url,
    check_iss,
    client_auth,
    read_token_answer,
    refusal,
    token_answer,
)
from mcp_oauth_gateway.useroauth.transport import MAX_BODY, Reply

SERVER = AuthServer(
    issuer="https://auth.example/t",
    authorization_endpoint="https://auth.example/t/authorize?tenant=a",
    token_endpoint="https://auth.example/t/token",
    revocation_endpoint=None,
    iss_parameter_supported=True,
    code_challenge_methods=("S256",),
    scopes_supported=(),
    resource="https://mcp.example/mcp",
)
ENDPOINT = SERVER.token_endpoint


def reply(status: int, body: object, content_type: str = "application/json") -> Reply:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return Reply(status, content_type, None, raw, too_large=False)


def test_the_authorization_url_keeps_the_endpoints_query_and_adds_the_flows():
    url = authorization_url(
        SERVER,
        "client 1",
        "https://gw.example/mcp/connect/callback",
        "st&te",
        "challenge",
        ["repo", "read:org"],
        "https://mcp.example/mcp",
    )
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == "https://auth.example/t/authorize"
    assert parse_qs(parts.query) == {
        "tenant": ["a"],
        "response_type": ["code"],
        "client_id": ["client 1"],
        "redirect_uri": ["https://gw.example/mcp/connect/callback"],
        "state": ["st&te"],
        "code_challenge": ["challenge"],
        "code_challenge_method": ["S256"],
        "scope": ["repo read:org"],
        "resource": ["https://mcp.example/mcp"],
    }


def test_no_scope_and_no_resource_are_left_out():
    url = authorization_url(SERVER, "c", "https://gw.example/cb", "s", "ch", None, None)
    assert set(parse_qs(urlsplit(url).query)) == {
        "tenant",
        "response_type",
        "client_id",
        "redirect_uri",
        "state",
        "code_challenge",
        "code_challenge_method",
    }
    assert "scope" not in authorization_url(SERVER, "c", "https://gw/cb", "s", "ch", [], None)


@pytest.mark.parametrize("scopes", [["a b"], ["a\u00a0b"], ["a", ""], ['"x"']])
def test_a_scope_that_would_read_as_other_scopes_is_refused(scopes):
    with pytest.raises(ValueError, match=r"userOAuth\.scopes"):
        authorization_url(SERVER, "c", "https://gw.example/cb", "s", "ch", scopes, None)


def test_iss_must_be_the_issuer():
    check_iss(SERVER, "https://auth.example/t")
    for wrong in ("https://auth.example/t/", "https://evil.example/t", ""):
        with pytest.raises(IssuerMismatch, match="RFC 9207") as refused:
            check_iss(SERVER, wrong)
        assert refused.value.error == "invalid_request"


def test_a_missing_iss_is_refused_only_where_the_server_promised_one():
    with pytest.raises(IssuerMismatch, match="has no iss"):
        check_iss(SERVER, None)
    check_iss(dataclasses.replace(SERVER, iss_parameter_supported=False), None)


def test_without_a_known_issuer_nothing_is_compared():
    check_iss(dataclasses.replace(SERVER, issuer=None), "https://anything.example")


def test_a_public_client_names_itself_in_the_form():
    assert client_auth(SERVER, "public", None) == ({"client_id": "public"}, {})


def test_basic_is_preferred_and_form_encodes_both_halves():
    server = dataclasses.replace(
        SERVER, token_endpoint_auth_methods=("client_secret_post", "client_secret_basic")
    )
    form, headers = client_auth(server, "id:1", "s3cr+t/é")
    assert form == {}
    scheme, _, encoded = headers["Authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(encoded).decode() == "id%3A1:s3cr%2Bt%2F%C3%A9"


def test_the_rfc_8414_default_is_basic():
    assert "Authorization" in client_auth(SERVER, "id", "secret")[1]


def test_post_when_only_post_is_listed():
    server = dataclasses.replace(SERVER, token_endpoint_auth_methods=("client_secret_post",))
    assert client_auth(server, "id", "secret") == (
        {"client_id": "id", "client_secret": "secret"},
        {},
    )


def test_a_secret_the_server_accepts_no_way_is_refused():
    server = dataclasses.replace(SERVER, token_endpoint_auth_methods=("private_key_jwt",))
    with pytest.raises(ValueError, match="private_key_jwt") as refused:
        client_auth(server, "id", "the-secret")
    assert "the-secret" not in str(refused.value)


def test_a_token_answer():
    answer = read_token_answer(
        {
            "access_token": "at",
            "refresh_token": "rt",
            "token_type": "bearer",
            "expires_in": 3600,
            "scope": "repo",
            "id_token": "ignored",
        }
    )
    assert answer == TokenAnswer("at", "rt", "Bearer", 3600, "repo")


def test_the_tokens_never_appear_in_its_repr():
    text = repr(TokenAnswer("secret-access", "secret-refresh", "Bearer", None, None))
    assert "secret" not in text


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"access_token": None}, "no access_token"),
        ({"access_token": ""}, "no access_token"),
        ({"access_token": 7}, "no access_token"),
        ({"token_type": None}, "token_type is missing"),
        ({"token_type": "DPoP"}, "'DPoP', not Bearer"),
        ({"token_type": "mac"}, "'mac', not Bearer"),
        ({"refresh_token": 5}, "refresh_token is not a string"),
        ({"scope": ["a"]}, "scope is not a string"),
        ({"expires_in": -1}, "expires_in"),
        ({"expires_in": "soon"}, "expires_in"),
        ({"expires_in": True}, "expires_in"),
        ({"expires_in": 1.5}, "expires_in"),
    ],
)
def test_an_unusable_token_answer_is_refused(changes, why):
    document = {"access_token": "at", "token_type": "Bearer", **changes}
    with pytest.raises(ValueError, match=why):
        read_token_answer({k: v for k, v in document.items() if v is not None})


@pytest.mark.parametrize(("given", "read"), [(3600, 3600), ("3600", 3600), (60.0, 60), (0, 0)])
def test_expires_in_as_servers_write_it(given, read):
    answer = read_token_answer({"access_token": "a", "token_type": "BEARER", "expires_in": given})
    assert answer.expires_in == read


def test_an_empty_refresh_token_is_none():
    answer = read_token_answer({"access_token": "a", "token_type": "Bearer", "refresh_token": ""})
    assert answer.refresh_token is None


def test_a_200_holding_an_error_is_an_error():
    """GitHub answers a bad code with HTTP 200 and an `error` member."""
    github = {
        "error": "bad_verification_code",
        "error_description": "The code passed is incorrect or expired.",
    }
    with pytest.raises(UpstreamOAuthError) as refused:
        token_answer(ENDPOINT, reply(200, github))
    assert refused.value.error == "bad_verification_code"
    assert refused.value.status == 200
    assert not refused.value.temporary


def test_invalid_grant_is_told_apart():
    error = refusal(ENDPOINT, reply(400, {"error": "invalid_grant", "error_description": "gone"}))
    assert error.invalid_grant
    assert not error.temporary
    assert error.description == "gone"
    other = refusal(ENDPOINT, reply(401, {"error": "invalid_client"}))
    assert not other.invalid_grant
    assert not other.temporary


@pytest.mark.parametrize(
    ("status", "body", "error", "temporary"),
    [
        (503, b"<html>down</html>", "server_error", True),
        (500, {"error": "server_error"}, "server_error", True),
        (400, {"error": "temporarily_unavailable"}, "temporarily_unavailable", True),
        (429, b"", "invalid_response", True),
        (404, b"not found", "invalid_response", False),
        (200, b"access_token=x&token_type=bearer", "invalid_response", False),
        (200, [1, 2], "invalid_response", False),
        (400, {"error": 7}, "invalid_response", False),
    ],
)
def test_what_an_answer_that_is_no_token_means(status, body, error, temporary):
    with pytest.raises(UpstreamOAuthError) as refused:
        token_answer(ENDPOINT, reply(status, body, "text/plain"))
    assert (refused.value.error, refused.value.temporary) == (error, temporary)
    assert refused.value.status == status


def test_a_form_encoded_200_is_not_read_as_tokens():
    """What GitHub sends without `Accept: application/json`: refused, and the token in it
    never reaches the message."""
    body = b"access_token=gho_secret&scope=repo&token_type=bearer"
    with pytest.raises(UpstreamOAuthError) as refused:
        token_answer(ENDPOINT, reply(200, body, "application/x-www-form-urlencoded"))
    assert "gho_secret" not in str(refused.value)
    assert "not a JSON object (application/x-www-form-urlencoded)" in str(refused.value)


def test_an_answer_larger_than_the_limit_is_not_read():
    big = Reply(200, "application/json", None, b"{" + b" " * MAX_BODY, too_large=True)
    with pytest.raises(UpstreamOAuthError, match="larger than 256 KiB"):
        token_answer(ENDPOINT, big)


def test_the_message_names_the_endpoint_as_shown_and_never_the_token():
    with pytest.raises(UpstreamOAuthError) as refused:
        token_answer(
            "https://auth.example/token?key=hidden",
            reply(200, {"access_token": "tok-123", "token_type": "DPoP"}),
        )
    message = str(refused.value)
    assert message.startswith("https://auth.example/token?key=***: invalid_response")
    assert "tok-123" not in message
    assert "hidden" not in message
