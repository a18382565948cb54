"""The proof's JOSE header (`dpop/header.py`, RFC 9449 §4.3 checks 2 and 4 to 7): its shape,
`typ`, an asymmetric `alg` the server accepts, a public `jwk` of the type the algorithm needs
(never a private key, a secret key, a key named by reference instead), `crit`, and the RFC 7638
thumbprint of the key as imported (RFC 7638 §3.1's example, with its `alg` and `kid`)."""

from __future__ import annotations

import warnings

import orjson
import pytest
from joserfc.errors import SecurityWarning
from joserfc.jwk import ECKey, OKPKey, RSAKey

from mcp_oauth_gateway.dpop import ASYMMETRIC_ALGORITHMS, DpopError, ProofRules
from mcp_oauth_gateway.dpop.header import read_header

from .dpop_support import (
    HMAC_KEY,
    KEYS,
    OTHER_EC,
    b64,
    check,
    claims,
    header,
    proof,
    public_jwk,
    sign,
)

# RFC 7638 §3.1: the example RSA key and its thumbprint.
RFC7638_JWK = {
    "kty": "RSA",
    "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_B"
    "JECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2Q"
    "vzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6We"
    "Zu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw",
    "e": "AQAB",
    "alg": "RS256",
    "kid": "2011-04-29",
}
RFC7638_THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"


def refusal(value: str, **options: object) -> str:
    """The description of the invalid_dpop_proof refusal of `value`."""
    with pytest.raises(DpopError) as caught:
        check(value, **options)
    assert caught.value.error == "invalid_dpop_proof", caught.value
    return caught.value.description


def test_the_thumbprint_is_rfc_7638s_example_whatever_other_members_the_jwk_has():
    segment = b64(orjson.dumps({"typ": "dpop+jwt", "alg": "RS256", "jwk": RFC7638_JWK}))
    assert read_header(segment.encode(), ASYMMETRIC_ALGORITHMS).jkt == RFC7638_THUMBPRINT


@pytest.mark.parametrize("typ", ["dpop+jwt", "DPoP+JWT", "application/dpop+jwt"])
def test_the_type_is_dpop_jwt_in_any_case_with_or_without_its_prefix(typ: str):
    assert check(proof(head=header(typ=typ))).alg == "ES256"


@pytest.mark.parametrize("typ", [None, "JWT", "at+jwt", "dpop", "dpop+jwt ", ["dpop+jwt"], 1])
def test_another_or_no_type_is_refused(typ: object):
    head = {**header(), "typ": typ} if typ is not None else header(typ=None)
    assert "it must be 'dpop+jwt'" in refusal(proof(head=head))


@pytest.mark.parametrize("alg", ["none", "HS256", "HS512", "ES256K", "RSA-OAEP", "", 256])
def test_no_symmetric_none_or_unknown_algorithm_is_accepted(alg: object):
    head = header(alg="ES256")
    head["alg"] = alg
    signed = (
        sign(head, claims(), HMAC_KEY, "HS256") if alg == "HS256" else proof(head=head)
    ).rsplit(".", 1)[0] + ".AAAA"
    assert f"alg {alg!r} is not accepted" in refusal(signed)


def test_a_proof_signed_with_hmac_is_refused_even_with_the_secret_as_its_jwk():
    head = {"typ": "dpop+jwt", "alg": "HS256", "jwk": dict(HMAC_KEY.as_dict(private=True))}
    assert "alg 'HS256' is not accepted" in refusal(sign(head, claims(), HMAC_KEY, "HS256"))


def test_only_the_algorithms_the_server_chose_are_accepted():
    rules = ProofRules(algorithms=frozenset({"ES256"}))
    assert check(proof("ES256"), rules=rules).alg == "ES256"
    description = refusal(proof("RS256"), rules=rules)
    assert description == "the DPoP proof's alg 'RS256' is not accepted; sign with one of ES256"


@pytest.mark.parametrize("alg", ["none", "HS256", "ES256K", "RSA1_5"])
def test_rules_refuse_algorithms_that_are_not_asymmetric_signatures(alg: str):
    with pytest.raises(ValueError, match="are not accepted"):
        ProofRules(algorithms=frozenset({"ES256", alg}))


def test_crit_is_refused_even_naming_a_known_member():
    assert "crit parameters" in refusal(proof(head=header(crit=["b64"], b64=False)))
    assert "crit parameters" in refusal(proof(head=header(crit=["exp"])))
    # Present at all is enough, even empty or null (`header` drops None, so built by hand).
    for value in ([], None, "", {}):
        assert "crit parameters" in refusal(proof(head={**header(), "crit": value}))


def test_b64_other_than_true_is_refused_even_null():
    for value in (None, 0, "true", []):
        assert "b64 is not supported" in refusal(proof(head={**header(), "b64": value}))


def test_an_unencoded_payload_is_refused():
    assert "b64 is not supported" in refusal(proof(head=header(b64=False)))


@pytest.mark.parametrize(
    ("reference", "value"),
    [
        ("kid", "key-1"),
        ("jku", "https://attacker.example/jwks"),
        ("x5u", "https://attacker.example/cert"),
        ("x5c", ["MIIB"]),
    ],
)
def test_a_key_named_by_reference_instead_of_a_jwk_is_refused(reference: str, value: object):
    head = header(jwk=None, **{reference: value})
    description = refusal(proof(head=head))
    assert description == (
        f"the DPoP proof's header has no jwk: put the public key in it ({reference} cannot name it)"
    )


@pytest.mark.parametrize("reference", ["kid", "jku", "x5u"])
def test_references_beside_the_jwk_are_ignored(reference: str):
    head = header(**{reference: "https://attacker.example/other-key"})
    assert check(proof(head=head)).jkt == ECKey.import_key(public_jwk(KEYS["ES256"])).thumbprint()


@pytest.mark.parametrize("alg", ["ES256", "RS256", "EdDSA"])
def test_a_jwk_holding_the_private_key_is_refused(alg: str):
    private = dict(KEYS[alg].as_dict(private=True))
    description = refusal(proof(alg, head=header(alg, jwk=private)))
    assert "holds private key members" in description
    assert "this one has leaked" in description


@pytest.mark.parametrize("member", ["p", "q", "dp", "dq", "qi", "oth", "k"])
def test_any_private_member_is_refused_even_without_d(member: str):
    jwk = {**public_jwk(KEYS["RS256"]), member: "AQAB"}
    assert f"private key members ({member})" in refusal(
        proof("RS256", head=header("RS256", jwk=jwk))
    )


@pytest.mark.parametrize("jwk", ["a key", ["EC"], 7, True])
def test_a_jwk_that_is_not_an_object_is_refused(jwk: object):
    assert "is not a JSON object (a JWK)" in refusal(proof(head=header(jwk=jwk)))


def test_a_secret_key_as_jwk_is_refused():
    jwk = dict(HMAC_KEY.as_dict(private=False))
    assert "private key members (k)" in refusal(proof(head=header(jwk=jwk)))
    assert "kty 'oct'; alg ES256 needs EC" in refusal(proof(head=header(jwk={"kty": "oct"})))


def test_a_key_of_another_type_than_the_algorithm_needs_is_refused():
    jwk = public_jwk(KEYS["RS256"])
    assert "kty 'RSA'; alg ES256 needs EC" in refusal(proof(head=header("ES256", jwk=jwk)))


def test_a_curve_the_algorithm_does_not_sign_with_is_refused():
    p384 = public_jwk(KEYS["ES384"])
    assert "cannot verify alg ES256" in refusal(proof(head=header("ES256", jwk=p384)))
    x25519 = dict(OKPKey.generate_key("X25519").as_dict(private=False))
    assert "crv 'X25519'; use Ed25519" in refusal(proof("EdDSA", head=header("EdDSA", jwk=x25519)))


def test_a_jwk_whose_own_alg_or_use_forbids_the_proofs_alg_is_refused():
    jwk = {**public_jwk(KEYS["ES256"]), "use": "enc"}
    assert "cannot verify alg ES256" in refusal(proof(head=header(jwk=jwk)))
    jwk = {**public_jwk(KEYS["RS256"]), "alg": "PS256"}
    assert "cannot verify alg RS256" in refusal(proof("RS256", head=header("RS256", jwk=jwk)))


def test_a_point_off_the_curve_is_refused():
    jwk = {**public_jwk(KEYS["ES256"]), "y": public_jwk(OTHER_EC)["y"]}
    assert "is not a valid EC public key" in refusal(proof(head=header(jwk=jwk)))


@pytest.mark.parametrize("jwk", [{"kty": "EC", "crv": "P-256", "x": 1, "y": "AA"}, {"kty": "EC"}])
def test_a_malformed_jwk_is_refused(jwk: dict[str, object]):
    assert "is not a valid EC public key" in refusal(proof(head=header(jwk=jwk)))


def test_rsa_keys_below_2048_bits_are_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SecurityWarning)  # joserfc warns about the size too
        small = RSAKey.generate_key(1024, private=True)
        signed = sign(header("RS256", jwk=public_jwk(small)), claims(), small, "RS256")
        assert "RSA key has 1024 bits; use 2048 to 4096 bits" in refusal(signed)


def test_a_huge_rsa_public_exponent_is_refused():
    jwk = {**public_jwk(KEYS["RS256"]), "e": b64((2**40 + 1).to_bytes(6, "big"))}
    assert "public exponent is too large" in refusal(proof("RS256", head=header("RS256", jwk=jwk)))


@pytest.mark.parametrize(
    "head", [b"not base64!", b64(b"not json"), b64(b"[1,2]"), b64(b'"alg"'), b64(b"{")]
)
def test_a_header_that_is_not_a_json_object_is_refused(head: str | bytes):
    text = head.decode() if isinstance(head, bytes) else head
    value = text + "." + proof().split(".", 1)[1]
    assert refusal(value).startswith("the DPoP proof's header is not")
