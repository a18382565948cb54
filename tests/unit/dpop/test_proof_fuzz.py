"""Properties of `verify_proof` over what an attacker can send: arbitrary bytes and text, valid
proofs of every key family mutated anywhere, and properly signed proofs whose claims and header
are arbitrary JSON. Nothing is ever accepted that breaks a rule, and nothing but DpopError is
ever raised (a crash would be a 500, and a hole where it is caught wider)."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from mcp_oauth_gateway.dpop import DpopError, normalize_htu
from unit.fuzz_settings import FUZZ

from .dpop_support import HTU, KEYS, METHOD, NOW, TOKEN, ath, check, claims, header, proof, sign

VALID = {alg: proof(alg, jti=f"fixed-{alg}") for alg in sorted(KEYS)}
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def refused_or_none(value: str | bytes | list[str | bytes], **options: Any) -> object:
    """The Proof, or None when refused with a DpopError (any other exception fails the test)."""
    try:
        return check(value, **options)
    except DpopError as error:
        refusal = error
    assert refusal.error in ("invalid_dpop_proof", "invalid_token", "use_dpop_nonce")
    assert refusal.description
    return None


@FUZZ
@given(st.binary(max_size=10_000))
def test_arbitrary_bytes_are_refused(value: bytes):
    assert refused_or_none(value) is None


@FUZZ
@given(st.text(alphabet=B64URL + ". ,=+/\t\x00é", max_size=2000))
def test_arbitrary_text_is_refused(value: str):
    assert refused_or_none(value) is None


@FUZZ
@given(st.lists(st.binary(max_size=50), min_size=2, max_size=4))
def test_any_number_of_headers_but_one_is_refused(values: list[bytes]):
    assert refused_or_none([VALID["ES256"], *values]) is None


@FUZZ
@given(
    st.sampled_from(sorted(VALID)),
    st.integers(min_value=0),
    st.integers(min_value=0, max_value=20),
    st.text(alphabet=B64URL + ".=", max_size=8),
)
def test_a_valid_proof_changed_anywhere_is_refused(alg: str, at: int, cut: int, insert: str):
    original = VALID[alg]
    start = at % (len(original) + 1)
    mutated = original[:start] + insert + original[start + cut :]
    assume(mutated.strip() != original)
    assert refused_or_none(mutated) is None


@FUZZ
@given(st.sampled_from(sorted(VALID)), st.permutations([0, 1, 2]))
def test_a_valid_proofs_parts_in_another_order_are_refused(alg: str, order: list[int]):
    parts = VALID[alg].split(".")
    assume(order != [0, 1, 2])
    assert refused_or_none(".".join(parts[i] for i in order)) is None


@FUZZ
@given(
    jti=JSON | st.text(max_size=300),
    htm=JSON | st.sampled_from(["POST", "GET", "post"]),
    htu=JSON
    | st.sampled_from([HTU, HTU + "?q", "https://GW.example:443/mcp", "https://gw.example/x"]),
    iat=JSON | st.floats(min_value=NOW - 400, max_value=NOW + 400),
    ath_claim=JSON | st.sampled_from([ath(), ath("other")]),
    extra=st.dictionaries(st.text(max_size=5), JSON, max_size=3),
)
def test_signed_claims_are_accepted_only_when_every_rule_holds(
    jti: object, htm: object, htu: object, iat: object, ath_claim: object, extra: dict[str, object]
):
    body = {**extra, **claims(jti=jti, htm=htm, htu=htu, iat=iat, ath=ath_claim)}
    accepted = refused_or_none(sign(header(), body, KEYS["ES256"], "ES256"))
    if accepted is None:
        return
    assert isinstance(jti, str)
    assert 0 < len(jti) <= 256
    assert htm == METHOD
    assert isinstance(htu, str)
    assert normalize_htu(htu) == HTU
    assert isinstance(iat, int | float)
    assert not isinstance(iat, bool)
    assert math.fabs(iat - NOW) <= 300
    assert ath_claim == ath(TOKEN)


@FUZZ
@given(
    typ=JSON | st.sampled_from(["dpop+jwt", "JWT"]),
    alg=JSON | st.sampled_from(["ES256", "none", "HS256", "RS256"]),
    jwk=JSON,
    extra=st.dictionaries(st.sampled_from(["kid", "jku", "x5c", "crit", "b64", "cty", "zz"]), JSON),
)
def test_signed_headers_are_accepted_only_with_the_type_algorithm_and_public_key(
    typ: object, alg: object, jwk: object, extra: dict[str, object]
):
    head = {**extra, "typ": typ, "alg": alg, "jwk": jwk}
    accepted = refused_or_none(sign(head, claims(), KEYS["ES256"], "ES256"))
    assert accepted is None, "the jwk is never ES256's public key here"
    real = header(key=KEYS["ES256"], **extra, typ=typ, alg=alg)
    accepted = refused_or_none(sign(real, claims(), KEYS["ES256"], "ES256"))
    if accepted is not None:
        assert isinstance(typ, str)
        assert typ.lower() == "dpop+jwt"
        assert alg == "ES256"
        # `header` drops members given as None: judge what was signed, not what was drawn.
        assert "crit" not in real
        assert real.get("b64", True) is True
