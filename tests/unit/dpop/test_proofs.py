"""Checking a proof (`dpop/proofs.py`, RFC 9449 §4.3 and §7.1): a valid proof of every
algorithm family is accepted with its key's thumbprint; each check refuses what breaks it,
saying what to fix: the header count and size, the signature, the claims and their types,
`htm`, `htu`, `iat` (the window either way), `ath`, the token's bound key, server nonces."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.dpop import (
    MAX_JTI_LENGTH,
    MAX_PROOF_BYTES,
    DpopError,
    DpopNonces,
    ProofRules,
    access_token_hash,
)

from .dpop_support import (
    HTU,
    KEYS,
    NOW,
    OTHER_EC,
    TOKEN,
    ath,
    check,
    claims,
    header,
    proof,
    public_jwk,
    rfc7638,
    sign,
)

NONCE_KEY = b"k" * 32


def refused(value: str | bytes | list[str | bytes], code: str = "invalid_dpop_proof", **options):
    """The DpopError `value` is refused with, its code checked."""
    with pytest.raises(DpopError) as caught:
        check(value, **options)
    assert caught.value.error == code, caught.value
    return caught.value


@pytest.mark.parametrize("alg", sorted(KEYS))
def test_a_valid_proof_is_accepted_with_its_keys_thumbprint(alg: str):
    jti = f"jti-{alg}"
    accepted = check(proof(alg, jti=jti))
    assert accepted.jkt == rfc7638(public_jwk(KEYS[alg]))
    assert (accepted.jti, accepted.htm, accepted.htu, accepted.iat) == (jti, "POST", HTU, NOW)
    assert (accepted.alg, accepted.nonce) == (alg, None)


def test_access_token_hash_is_rfc_9449s():
    # RFC 9449 §7.1's example access token and the ath of its proof (Figure 13).
    token = "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"
    assert access_token_hash(token) == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
    assert access_token_hash(TOKEN) == ath()


def test_the_proof_is_bound_to_the_tokens_key():
    assert check(proof(), jkt=rfc7638(public_jwk(KEYS["ES256"]))).alg == "ES256"
    error = refused(proof(), "invalid_token", jkt=rfc7638(public_jwk(OTHER_EC)))
    assert error.description.startswith("the access token is bound to another key")


def test_a_stolen_token_with_the_thiefs_own_valid_proof_is_refused():
    thief = sign(header(jwk=public_jwk(OTHER_EC)), claims(), OTHER_EC, "ES256")
    assert check(thief).jkt == rfc7638(public_jwk(OTHER_EC))  # a sound proof, of another key
    refused(thief, "invalid_token", jkt=rfc7638(public_jwk(KEYS["ES256"])))


def test_a_signature_by_another_key_than_the_jwk_is_refused():
    forged = sign(header(), claims(), OTHER_EC, "ES256")
    assert refused(forged).description == (
        "the DPoP proof's signature does not verify with the key in its jwk"
    )


def test_changing_any_claim_of_a_signed_proof_breaks_its_signature():
    head, _, signature = proof().split(".")
    other = proof(htu="https://gw.example/other").split(".")[1]
    assert "does not verify" in refused(f"{head}.{other}.{signature}").description


@pytest.mark.parametrize("signature", ["not*base64", "AAAA=", "A"])
def test_a_signature_that_is_not_base64url_is_refused(signature: str):
    value = proof().rsplit(".", 1)[0] + "." + signature
    assert "signature is not base64url-encoded" in refused(value).description


def test_a_request_without_a_proof_is_refused():
    assert "has no DPoP header" in refused([]).description


def test_two_dpop_headers_are_refused_even_if_both_are_valid():
    assert "more than one DPoP header" in refused([proof(), proof()]).description


def test_two_proofs_joined_in_one_header_are_refused():
    assert "more than one value" in refused(proof() + ", " + proof()).description


def test_an_oversized_proof_is_refused_before_it_is_read():
    big = proof(padding="x" * MAX_PROOF_BYTES)
    assert f"longer than {MAX_PROOF_BYTES} bytes" in refused(big).description


@pytest.mark.parametrize(
    "value", ["", "a.b", "a.b.c.d", "a..c", ".b.c", "a.b.", "é.b.c", b"\xff.b.c"]
)
def test_what_is_not_a_compact_jwt_is_refused(value: str | bytes):
    error = refused(value)
    assert "is not a JWT" in error.description or "not base64url" in error.description


def test_bytes_and_surrounding_whitespace_are_read_as_the_server_hands_them():
    assert check((" " + proof() + "\t").encode()).alg == "ES256"


@pytest.mark.parametrize("name", ["jti", "htm", "htu", "iat"])
def test_each_required_claim_is_required(name: str):
    description = refused(proof(**{name: None})).description
    assert description in (
        f"the DPoP proof has no {name} claim",
        "the DPoP proof's iat is missing or not a number (seconds since 1970)",
    )


@pytest.mark.parametrize("name", ["jti", "htm", "htu"])
@pytest.mark.parametrize("value", ["", 1, ["x"], {"a": 1}, True])
def test_string_claims_of_another_type_are_refused(name: str, value: object):
    assert (
        f"{name} {value!r} is not a non-empty string" in refused(proof(**{name: value})).description
    )


@pytest.mark.parametrize("iat", ["1800000000", True, [1], {"t": 1}])
def test_an_iat_that_is_not_a_number_is_refused(iat: object):
    assert "is not a number (seconds since 1970)" in refused(proof(iat=iat)).description


def test_a_payload_that_is_not_a_json_object_is_refused():
    for body in (b"[1]", b"null", b"not json", b'"jti"'):
        value = sign(header(), body, KEYS["ES256"], "ES256")
        assert refused(value).description.startswith("the DPoP proof's payload is not")


def test_a_jti_longer_than_the_limit_is_refused():
    assert check(proof(jti="j" * MAX_JTI_LENGTH)).jti == "j" * MAX_JTI_LENGTH
    too_long = proof(jti="j" * (MAX_JTI_LENGTH + 1))
    assert f"jti is longer than {MAX_JTI_LENGTH}" in refused(too_long).description


@pytest.mark.parametrize("htm", ["GET", "post", "PUT", "POST "])
def test_a_proof_for_another_method_is_refused(htm: str):
    assert refused(proof(htm=htm)).description == (
        f"the DPoP proof is for method {htm!r}; this request is POST"
    )


@pytest.mark.parametrize(
    "htu",
    [
        "https://gw.example/mcp/",
        "https://gw.example/other",
        "http://gw.example/mcp",
        "https://gw.example:8443/mcp",
        "https://attacker.example/mcp",
        "https://gw.example./mcp",
        "https://gw.example/MCP",
        "https://gw.example/mcp%2F",
    ],
)
def test_a_proof_for_another_url_is_refused(htu: str):
    assert "; this request is to https://gw.example/mcp" in refused(proof(htu=htu)).description


@pytest.mark.parametrize(
    "htu",
    [
        "HTTPS://GW.EXAMPLE/mcp",
        "https://gw.example:443/mcp",
        "https://gw.example/mcp?query=ignored",
        "https://gw.example/mcp#fragment",
        "https://gw.example/%6Dcp",
        "https://gw.example/a/../mcp",
    ],
)
def test_a_proof_for_the_same_url_written_otherwise_is_accepted(htu: str):
    assert check(proof(htu=htu)).htu == HTU


@pytest.mark.parametrize(
    "htu", ["/mcp", "gw.example/mcp", "wss://gw.example/mcp", "https://u@gw.example/mcp"]
)
def test_an_htu_that_is_not_an_http_url_without_credentials_is_refused(htu: str):
    assert f"the DPoP proof's htu {htu!r}" in refused(proof(htu=htu)).description


@pytest.mark.parametrize("offset", [-300, -1, 0, 1, 300, 299.5])
def test_iat_within_the_window_either_way_is_accepted(offset: float):
    assert check(proof(iat=NOW + offset)).iat == NOW + offset


def test_an_old_proof_is_refused():
    description = refused(proof(iat=NOW - 301)).description
    assert description == (
        "the DPoP proof was made 301 s ago (at most 300 s accepted); "
        "make a new proof for every request"
    )


def test_a_proof_from_the_future_is_refused():
    description = refused(proof(iat=NOW + 301)).description
    assert description == (
        "the DPoP proof's iat is 301 s in the future (at most 300 s accepted); "
        "check the client's clock"
    )


def test_the_window_is_configurable():
    rules = ProofRules(iat_window=30)
    assert check(proof(iat=NOW - 30), rules=rules).iat == NOW - 30
    assert "at most 30 s accepted" in refused(proof(iat=NOW - 31), rules=rules).description
    for window in (0, -1, 7200):
        with pytest.raises(ValueError, match="iat window"):
            ProofRules(iat_window=window)


def test_with_a_token_ath_is_required():
    assert "has no ath" in refused(proof(ath=None)).description


@pytest.mark.parametrize("value", [ath("another token"), "", 1, [ath()]])
def test_an_ath_of_another_token_is_refused(value: object):
    assert "ath is not the hash of the access token" in refused(proof(ath=value)).description


def test_without_a_token_ath_is_neither_needed_nor_checked():
    assert check(proof(ath=None), access_token=None).alg == "ES256"
    assert check(proof(ath="anything"), access_token=None).alg == "ES256"


def test_a_token_that_is_not_ascii_is_refused_as_a_token():
    error = refused(proof(), "invalid_token", access_token="tökén")
    assert error.description == "the access token is not ASCII"


def test_with_nonces_a_proof_without_one_gets_a_fresh_nonce():
    nonces = DpopNonces(NONCE_KEY)
    error = refused(proof(), "use_dpop_nonce", rules=ProofRules(nonces=nonces))
    assert error.nonce == nonces.issue(NOW)
    assert "requires a nonce" in error.description
    accepted = check(proof(nonce=error.nonce), rules=ProofRules(nonces=nonces))
    assert accepted.nonce == error.nonce


@pytest.mark.parametrize("nonce", ["stale", "A" * 32])
def test_with_nonces_an_unknown_nonce_gets_a_fresh_one(nonce: str):
    nonces = DpopNonces(NONCE_KEY)
    error = refused(proof(nonce=nonce), "use_dpop_nonce", rules=ProofRules(nonces=nonces))
    assert (error.nonce, "stale or was not issued" in error.description) == (
        nonces.issue(NOW),
        True,
    )


def test_a_nonce_of_another_server_or_an_expired_one_gets_a_fresh_one():
    ours, theirs = DpopNonces(NONCE_KEY, context="rs"), DpopNonces(NONCE_KEY, context="as")
    rules = ProofRules(nonces=ours)
    refused(proof(nonce=theirs.issue(NOW)), "use_dpop_nonce", rules=rules)
    old = ours.issue(NOW - 2 * ours.period)
    assert refused(proof(nonce=old), "use_dpop_nonce", rules=rules).nonce == ours.issue(NOW)


@pytest.mark.parametrize("nonce", [1, "", ["n"]])
def test_a_nonce_claim_of_another_type_is_refused(nonce: object):
    assert "nonce is not a non-empty string" in refused(proof(nonce=nonce)).description


def test_nonces_are_asked_for_only_once_everything_else_holds():
    rules = ProofRules(nonces=DpopNonces(NONCE_KEY))
    refused(proof(htm="GET"), rules=rules)
    refused(proof(), "invalid_token", rules=rules, jkt=rfc7638(public_jwk(OTHER_EC)))
