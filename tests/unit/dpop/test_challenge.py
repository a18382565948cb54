"""The `DPoP` challenge (`dpop/challenge.py`, RFC 9449 §7.1 and §9): the algorithms always, the
error and its description when a DPoP request was refused, each value a quoted-string that
what a client sent cannot break out of."""

from __future__ import annotations

from mcp_oauth_gateway.dpop import ProofRules, dpop_challenge


def test_without_credentials_only_the_algorithms_are_named():
    assert dpop_challenge(["ES256", "PS256"]) == b'DPoP algs="ES256 PS256"'


def test_the_algorithms_are_offered_in_the_servers_order():
    rules = ProofRules(algorithms=frozenset({"RS256", "EdDSA", "ES256", "PS256"}))
    assert rules.offered == ("ES256", "EdDSA", "PS256", "RS256")
    assert dpop_challenge(rules.offered) == b'DPoP algs="ES256 EdDSA PS256 RS256"'


def test_a_refusal_names_its_error_and_description_first():
    value = dpop_challenge(["ES256"], "invalid_token", "Invalid DPoP key binding")
    assert value == (
        b'DPoP error="invalid_token", error_description="Invalid DPoP key binding", algs="ES256"'
    )


def test_a_nonce_challenge_carries_resource_metadata_and_scope():
    value = dpop_challenge(
        ["ES256"],
        "use_dpop_nonce",
        "use the DPoP-Nonce header's value",
        resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp",
        scope="mcp:tools",
    )
    assert value == (
        b'DPoP error="use_dpop_nonce", error_description="use the DPoP-Nonce header\'s value", '
        b'algs="ES256", '
        b'resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp", '
        b'scope="mcp:tools"'
    )


def test_a_description_quoting_the_client_cannot_end_the_value_or_the_header():
    value = dpop_challenge(["ES256"], "invalid_dpop_proof", 'htm "GET\\", algs="none"\r\nX: y')
    assert value == (
        b'DPoP error="invalid_dpop_proof", '
        b'error_description="htm \\"GET\\\\\\", algs=\\"none\\"  X: y", algs="ES256"'
    )
    assert b"\r" not in value
    assert b"\n" not in value


def test_characters_a_header_cannot_carry_are_replaced_not_sent():
    assert dpop_challenge(["ES256"], "invalid_dpop_proof", "jti 'ü☃'").endswith(
        b'error_description="jti \'\xfc?\'", algs="ES256"'
    )
