"""Server nonces (`dpop/nonces.py`, RFC 9449 §8 and §9): stateless and rotating; a nonce is
accepted in the period it was issued in and the next one, at every replica holding the key,
and nowhere else: not after, not from another key or server context, not altered."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from joserfc.util import urlsafe_b64decode

from mcp_oauth_gateway.dpop import DpopNonces

KEY = bytes(range(32))
T0 = 1_800_000_000.0  # a period boundary for the 300 s default (1_800_000_000 / 300 = 6e6)


def test_a_nonce_lives_for_its_period_and_the_next():
    nonces = DpopNonces(KEY)
    nonce = nonces.issue(T0)
    for later in (0, 1, 299.9, 300, 599.9):
        assert nonces.check(nonce, T0 + later), later
    assert not nonces.check(nonce, T0 + 600)
    assert not nonces.check(nonce, T0 - 0.1), "a nonce is not valid before it was issued"


def test_nonces_rotate_every_period():
    nonces = DpopNonces(KEY, period=60)
    first, same, second = nonces.issue(T0), nonces.issue(T0 + 59), nonces.issue(T0 + 60)
    assert first == same != second
    assert nonces.check(first, T0 + 60)
    assert nonces.check(second, T0 + 60)
    assert not nonces.check(first, T0 + 120)
    assert nonces.check(second, T0 + 120)


def test_every_replica_with_the_key_accepts_the_others_nonces():
    one, two = DpopNonces(KEY), DpopNonces(bytes(KEY))
    assert two.check(one.issue(T0), T0 + 10)
    assert one.issue(T0) == two.issue(T0)


def test_another_key_or_context_refuses_them():
    nonce = DpopNonces(KEY, context="https://gw.example/mcp").issue(T0)
    assert not DpopNonces(b"\x01" * 32, context="https://gw.example/mcp").check(nonce, T0)
    assert not DpopNonces(KEY, context="https://gw.example/token").check(nonce, T0)
    assert not DpopNonces(KEY).check(nonce, T0)


def test_an_altered_or_forged_nonce_is_refused():
    nonces = DpopNonces(KEY)
    nonce = nonces.issue(T0)
    for index in range(len(nonce)):
        swapped = "A" if nonce[index] != "A" else "B"
        assert not nonces.check(nonce[:index] + swapped + nonce[index + 1 :], T0), index
    for junk in ("", "x", nonce + "A", nonce[:-1], "é" * 32, "=" * 32, "+" * 32):
        assert not nonces.check(junk, T0), junk


def test_the_key_is_not_the_nonce_key():
    # The same secret may serve elsewhere (the Broker store's): a nonce never is an HMAC under it.
    raw = urlsafe_b64decode(DpopNonces(KEY).issue(T0).encode())
    plain = hmac.new(KEY, raw[:8], hashlib.sha256).digest()[:16]
    assert raw[8:] != plain


@pytest.mark.parametrize(("key", "period"), [(b"short", 300.0), (KEY, 0.0), (KEY, -5.0)])
def test_a_short_key_or_no_period_is_refused(key: bytes, period: float):
    with pytest.raises(ValueError, match="DPoP nonce"):
        DpopNonces(key, period)
