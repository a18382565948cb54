"""The signature check on the request path (`tokens.parse_token` and `signature_verifies`:
joserfc's header rules once per header, strict base64url, and the signature check prepared from
joserfc's algorithm models once per keyset) decides exactly what joserfc's own
`extract_compact` + `validate_compact` decide, for every algorithm we accept and for tokens
mutated the ways a forger would: flipped bits in any part, non-canonical or padded base64url,
truncated or extended signatures, the algorithm swapped, another key's signature, odd headers
signed with the real key."""

from __future__ import annotations

import base64
import binascii
import os

import pytest
from cryptography.hazmat.primitives.asymmetric.padding import PKCS1v15 as PKCS1
from cryptography.hazmat.primitives.hashes import SHA256
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey, RSAKey
from joserfc.util import urlsafe_b64decode

from mcp_oauth_gateway.controlplane.keys import parse_jwks
from mcp_oauth_gateway.dataplane.tokens import (
    TokenError,
    b64url_decode,
    parse_token,
    signature_verifies,
)

# joserfc warns whenever it hands out EdDSA (RFC 9864 deprecates the name, not the check).
pytestmark = pytest.mark.filterwarnings("ignore:EdDSA is deprecated")
SETTINGS = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SIGNERS = {
    "RS256": RSAKey.generate_key(2048, parameters={"kid": "rsa"}),
    "RS512": RSAKey.generate_key(2048, parameters={"kid": "rsa512"}),
    "PS256": RSAKey.generate_key(2048, parameters={"kid": "pss"}),
    "ES256": ECKey.generate_key("P-256", parameters={"kid": "p256"}),
    "ES384": ECKey.generate_key("P-384", parameters={"kid": "p384"}),
    "EdDSA": OKPKey.generate_key("Ed25519", parameters={"kid": "ed"}),
}
KEYSET = parse_jwks({"keys": [k.as_dict(private=False) for k in SIGNERS.values()]}, version=1)
CLAIMS = {"iss": "https://idp/", "sub": "alice", "exp": 4102444800, "groups": ["mcp-agent"]}


def signed(alg: str) -> str:
    key = SIGNERS[alg]
    return jwt.encode({"alg": alg, "kid": key.kid, "typ": "JWT"}, CLAIMS, key, algorithms=[alg])


def library_decision(token: str, alg: str) -> bool:
    """What joserfc decides with the public key, from scratch."""
    public = KEYSET.find(SIGNERS[alg].kid)
    assert public is not None
    try:
        compact = jws.extract_compact(token.encode("ascii"))
        return bool(jws.validate_compact(compact, public.key, [alg]))
    except (JoseError, ValueError, TypeError, UnicodeError):
        return False


def our_decision(token: str, alg: str) -> bool:
    key = KEYSET.find(SIGNERS[alg].kid)
    assert key is not None
    try:
        compact = parse_token(token)
        check = key.checks.get(str(compact.header.fields.get("alg")))
        if check is None:
            return False
        return signature_verifies(compact, check)
    except TokenError:
        return False


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _flip(segment: str, at: int, char: str) -> str:
    if not segment:
        return char
    at %= len(segment)
    return segment[:at] + char + segment[at + 1 :]


B64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/="


@pytest.mark.parametrize("alg", sorted(SIGNERS))
def test_a_valid_token_verifies_both_ways(alg):
    token = signed(alg)
    assert library_decision(token, alg) is True
    assert our_decision(token, alg) is True


@SETTINGS
@given(
    alg=st.sampled_from(sorted(SIGNERS)),
    part=st.integers(0, 2),
    at=st.integers(0, 2000),
    char=st.sampled_from(B64_CHARS),
)
def test_a_changed_character_is_decided_alike(alg, part, at, char):
    parts = signed(alg).split(".")
    parts[part] = _flip(parts[part], at, char)
    token = ".".join(parts)
    assert our_decision(token, alg) == library_decision(token, alg), token


@SETTINGS
@given(
    alg=st.sampled_from(sorted(SIGNERS)),
    cut=st.integers(0, 600),
    extra=st.binary(max_size=8),
    padding=st.sampled_from(["", "=", "==", "A", "AA"]),
)
def test_truncated_extended_or_padded_signatures_are_decided_alike(alg, cut, extra, padding):
    head, payload, signature = signed(alg).split(".")
    raw = base64.urlsafe_b64decode(signature + "==")
    for changed in (
        _b64(raw[: cut % (len(raw) + 1)]),
        _b64(raw + extra),
        signature + padding,
        signature[:-1] + padding,
    ):
        token = f"{head}.{payload}.{changed}"
        assert our_decision(token, alg) == library_decision(token, alg), token


@SETTINGS
@given(signer=st.sampled_from(sorted(SIGNERS)), claimed=st.sampled_from(sorted(SIGNERS)))
def test_another_keys_or_algorithms_signature_is_decided_alike(signer, claimed):
    """A signature made with one key and algorithm, presented under another's kid and alg."""
    _, payload, signature = signed(signer).split(".")
    target = SIGNERS[claimed]
    head = _b64(f'{{"alg":"{claimed}","kid":"{target.kid}","typ":"JWT"}}'.encode())
    token = f"{head}.{payload}.{signature}"
    expected = library_decision(token, claimed)
    assert our_decision(token, claimed) == expected
    if signer != claimed:
        assert expected is False


def test_a_key_whose_curve_does_not_fit_its_alg_is_skipped_with_the_reason():
    """A P-256 key listed with alg ES384 can verify nothing: skipped, the others kept."""
    jwk = {**SIGNERS["ES256"].as_dict(private=False), "alg": "ES384", "kid": "mismatch"}
    keyset = parse_jwks({"keys": [jwk, SIGNERS["RS256"].as_dict(private=False)]}, version=1)
    assert keyset.find("mismatch") is None
    assert any("mismatch" in reason for reason in keyset.skipped)


@SETTINGS
@given(segment=st.binary(max_size=64) | st.text(B64_CHARS, max_size=64).map(str.encode))
def test_base64url_is_decoded_as_joserfc_decodes_it(segment):
    """Any bytes: both refuse, or both give the same bytes (padding, `+`/`/`, non-canonical
    last characters, lengths of 4n+1, non-ASCII)."""
    try:
        expected: bytes | None = urlsafe_b64decode(segment)
    except (binascii.Error, ValueError):
        expected = None
    try:
        ours: bytes | None = b64url_decode(segment)
    except (binascii.Error, ValueError):
        ours = None
    assert ours == expected, segment


HEADERS = [
    '{"alg":"RS256","kid":"rsa","typ":"JWT","jku":"not a url"}',
    '{"alg":"RS256","kid":"rsa","x5c":"not a list"}',
    '{"alg":"RS256","kid":"rsa","zip":"DEF"}',
    '{"alg":"RS256","kid":"rsa","b64":false}',
    '{"alg":"RS256","kid":"rsa","b64":false,"crit":["b64"]}',
    '{"alg":"RS256","kid":"rsa","b64":true}',
    '{"alg":"RS256","kid":"rsa","crit":["exp"],"exp":1}',
    '{"alg":"RS256","kid":"rsa","unknown":1}',
    '{"kid":"rsa"}',
    '["alg","RS256"]',
    '"RS256"',
    '{"alg":"RS256","kid":"rsa","alg":"RS256"}',
]


@pytest.mark.parametrize("header", HEADERS)
def test_a_signed_odd_header_is_never_accepted_where_joserfc_refuses(header):
    """Headers a forger controls, signed with the real key, are decided as joserfc decides,
    except that a header with `crit` (RFC 7797's unencoded payload) is refused: verify_token
    refuses `crit` for every token anyway."""
    key = SIGNERS["RS256"]
    head = _b64(header.encode())
    payload = _b64(b'{"iss":"https://idp/","exp":4102444800}')
    signature = _b64(key.get_op_key("sign").sign(f"{head}.{payload}".encode(), PKCS1(), SHA256()))
    token = f"{head}.{payload}.{signature}"
    expected = library_decision(token, "RS256")
    if '"crit"' in header:
        assert our_decision(token, "RS256") is False, header
    else:
        assert our_decision(token, "RS256") is expected, header


def test_a_key_whose_operations_exclude_verify_is_skipped_at_load():
    """`key_ops: ["sign"]`: joserfc would refuse it on every request; it is skipped once, with
    the reason, and the keyset's other keys still verify."""
    jwk = {**SIGNERS["RS256"].as_dict(private=False), "kid": "signonly", "key_ops": ["sign"]}
    keyset = parse_jwks({"keys": [jwk, SIGNERS["RS512"].as_dict(private=False)]}, version=1)
    assert keyset.find("signonly") is None
    assert any("signonly" in r and "key_op" in r for r in keyset.skipped), keyset.skipped
    assert keyset.find(SIGNERS["RS512"].kid) is not None
