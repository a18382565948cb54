"""Property-based fuzzing (hypothesis), bounded for CI; raise FUZZ_EXAMPLES for longer runs.

Token parsing and verification never crash and never accept a forged token; registration bodies,
CORS origins and resource files only ever produce clear errors."""

from __future__ import annotations

import base64
import json
import time

import httpx
import yaml
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.dataplane.tokens import TokenError, TokenRules, verify_token
from mcp_oauth_gateway.providers.base import RegistrationError
from mcp_oauth_gateway.registration import parse_registration
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from support import claims_for, jwks_of, mint, new_key

from .fuzz_settings import FUZZ
from .resources_fixture import BASE, policy

ISSUER = "http://idp/application/o/mcp/"
RULES = TokenRules(ISSUER, frozenset({"mcp-public"}))
KEY, ATTACKER = new_key("k1"), new_key("k1")
KEYSET = parse_jwks(jwks_of(KEY), version=1)
KEY_PRIVATE = KEY.private_key

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_token_text_is_refused_cleanly(token):
    try:
        verify_token(token, KEYSET, RULES, time.time())
    except TokenError:
        return
    raise AssertionError(f"accepted {token!r}")


@FUZZ
@given(
    header=st.dictionaries(st.text(max_size=8), json_values, max_size=5),
    claims=st.dictionaries(st.text(max_size=8), json_values, max_size=6),
    signature=st.binary(max_size=300),
)
def test_forged_tokens_are_never_accepted(header, claims, signature):
    token = ".".join(
        [b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(signature)]
    )
    try:
        verify_token(token, KEYSET, RULES, time.time())
    except TokenError:
        return
    raise AssertionError(f"accepted a forged token {token!r}")


JOSE_FIELDS = ("alg", "kid", "typ", "crit", "b64", "cty", "jku", "jwk", "x5c", "zip", "enc")


@FUZZ
@given(
    header=st.fixed_dictionaries(
        {},
        optional={
            name: json_values | st.sampled_from(["RS256", "k1", "JWT", "at+jwt", "none"])
            for name in JOSE_FIELDS
        },
    ),
    signed=st.booleans(),
)
def test_any_json_in_the_header_fields_is_refused_cleanly(header, signed):
    # Every field the verifier reads, with any JSON value (lists, objects, numbers where a
    # string belongs): a TokenError, never another exception (which would answer 500).
    claims = claims_for(ISSUER, "mcp-public")
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = b"x" * 256
    if signed:
        signature = KEY_PRIVATE.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    token = f"{signing_input}.{b64(signature)}"
    try:
        verify_token(token, KEYSET, RULES, time.time())
    except TokenError:
        return
    # Accepted: only a header a provider could have written, signed with the real key.
    assert signed
    assert header.get("alg") == "RS256"
    assert header.get("kid") in (None, "k1")
    assert "crit" not in header


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["alg", "kid", "typ", "jku", "x5u", "x5c", "jwk", "cty"]),
        st.text(max_size=20) | st.sampled_from(["RS256", "k1", "JWT", "none"]),
        max_size=6,
    )
)
def test_tokens_signed_by_another_key_are_refused_whatever_the_header(extra):
    header = {"kid": "k1", **{k: v for k, v in extra.items() if k not in ("alg", "kid")}}
    try:
        token = mint(ATTACKER, claims_for(ISSUER, "mcp-public"), header=header)
    except Exception:  # joserfc refuses to even sign some headers: nothing to check
        return
    try:
        verify_token(token, KEYSET, RULES, time.time())
    except TokenError:
        return
    raise AssertionError("a token signed by another key was accepted")


@FUZZ
@given(
    st.binary(max_size=400)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries(
        {"redirect_uris": st.lists(st.text(max_size=40), max_size=3)},
        optional={"client_name": json_values},
    ).map(lambda v: json.dumps(v).encode())
)
def test_registration_bodies_parse_or_fail_clearly(body):
    try:
        parsed = parse_registration(body)
    except RegistrationError as exc:
        failure = (exc.status, exc.error)
    else:
        assert isinstance(parsed["redirect_uris"], list)
        assert parsed["redirect_uris"]
        return
    assert failure in ((400, "invalid_client_metadata"), (400, "invalid_redirect_uri"))


@FUZZ
@given(
    origin=st.text(max_size=60),
    method=st.sampled_from(["OPTIONS", "POST", "GET"]),
    request_headers=st.text(
        alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40
    ),
)
async def test_cors_never_fails_and_never_reflects_unlisted_origins(
    origin, method, request_headers, tmp_path
):
    text = BASE.replace('allowOrigins: ["*"]', "allowOrigins: [https://app.example]")
    path = tmp_path / "r.yaml"
    path.write_text(text + policy())
    app = GatewayApp(ControlPlane(build_snapshot(load_paths([path]))))
    transport = httpx.ASGITransport(app=app)
    headers = {
        "Origin": origin.encode("utf-8", "replace").decode("latin-1", "replace"),
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": request_headers,
    }
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw:8080") as client:
            response = await client.request(method, "/mcp", headers=headers)
    except (httpx.InvalidURL, UnicodeEncodeError, ValueError):
        return  # the client itself refuses to send such a header
    assert response.status_code < 500
    allowed = response.headers.get("access-control-allow-origin")
    assert allowed in (None, "https://app.example")


@FUZZ
@given(st.lists(json_values, max_size=3) | st.text(max_size=300))
def test_resource_loader_reports_errors_never_raises(tmp_path_factory, documents):
    path = tmp_path_factory.mktemp("fuzz") / "r.yaml"
    if isinstance(documents, str):
        path.write_text(documents)
    else:
        path.write_text(yaml.safe_dump_all(documents))
    result = load_paths([path])
    build_snapshot(result)  # resolution never raises either
    assert all(isinstance(error, str) and error for error in result.errors)
