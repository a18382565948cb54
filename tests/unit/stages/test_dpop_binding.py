"""The pure decisions of DPoP at the resource server (`dataplane/dpop_binding.py`): the scheme
and token of an `Authorization` value, the key a token is bound to, what each `dpop` mode
makes of a scheme and a binding, and what the challenge and the metadata offer. The stage
applying them: `test_authn_dpop.py`."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.controlplane.snapshot import CompiledDpop
from mcp_oauth_gateway.dataplane.dpop_binding import (
    bound_key,
    mode_refusal,
    offered_algorithms,
    parse_credentials,
    resource_metadata,
)
from mcp_oauth_gateway.dataplane.tokens import TokenError
from unit.tokens_support import ALL_DPOP_ALGS


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"Bearer abc", ("Bearer", "abc")),
        (b"bearer  abc ", ("Bearer", "abc")),
        (b"DPoP abc", ("DPoP", "abc")),
        (b"DPOP abc", ("DPoP", "abc")),
        (b"DPoP", None),
        (b"DPoP   ", None),
        (b"DPoPabc", None),
        (b"Basic YWxpY2U6eA==", None),
        (b"Token abc", None),
        (None, None),
    ],
)
def test_parse_credentials(raw, expected):
    assert parse_credentials(raw) == expected


def test_bound_key_reads_cnf_jkt():
    assert bound_key({"sub": "a"}) is None
    assert bound_key({"cnf": {}}) is None
    assert bound_key({"cnf": {"jkt": None}}) is None
    assert bound_key({"cnf": {"jkt": "abc"}}) == "abc"
    # Keycloak qualifies its binding with a member of its own.
    assert bound_key({"cnf": {"jkt": "abc", "kc-jkt-type": "DPoP"}}) == "abc"


@pytest.mark.parametrize(
    "cnf",
    [
        {"x5t#S256": "x"},
        {"jwk": {}},
        {"jkt": "a", "kid": "k"},
        {"jkt": "a", "osc": {}},
        {"private-binding": "x"},  # unknown, and no jkt it could qualify: a binding unread
        {"jkt": None, "kc-jkt-type": "DPoP"},
        [],
    ],
)
def test_bound_key_refuses_a_binding_it_cannot_check(cnf):
    with pytest.raises(TokenError):
        bound_key({"cnf": cnf})


# mode, scheme, bound → refused?
MODES = [
    ("Allowed", "Bearer", False, False),
    ("Allowed", "Bearer", True, True),  # RFC 9449 §7.2: a bound token as Bearer
    ("Allowed", "DPoP", True, False),
    ("Allowed", "DPoP", False, True),
    ("Required", "Bearer", False, True),
    ("Required", "Bearer", True, True),
    ("Required", "DPoP", True, False),
    ("Required", "DPoP", False, True),
    ("Disabled", "Bearer", False, False),
    ("Disabled", "Bearer", True, True),
    ("Disabled", "DPoP", True, True),
    ("Disabled", "DPoP", False, True),
]


@pytest.mark.parametrize(("mode", "scheme", "bound", "refused"), MODES)
def test_what_each_mode_refuses(mode, scheme, bound, refused):
    assert (mode_refusal(mode, scheme, "jkt" if bound else None) is not None) is refused


def test_only_a_bound_token_with_the_dpop_scheme_is_accepted_where_dpop_is_required():
    accepted = [(s, b) for m, s, b, r in MODES if m == "Required" and not r]
    assert accepted == [("DPoP", True)]


def test_the_metadata_says_required_only_when_every_provider_requires_it():
    required, allowed, disabled = (
        CompiledDpop("Required", frozenset({"ES256"})),
        CompiledDpop("Allowed", frozenset({"EdDSA", "ES256"})),
        CompiledDpop("Disabled"),
    )
    assert resource_metadata([required]) == {
        "dpop_signing_alg_values_supported": ["ES256"],
        "dpop_bound_access_tokens_required": True,
    }
    assert resource_metadata([required, allowed]) == {
        "dpop_signing_alg_values_supported": ["ES256", "EdDSA"],
        "dpop_bound_access_tokens_required": False,
    }
    # A Disabled provider's Bearer tokens are accepted: not every token must be bound.
    assert resource_metadata([required, disabled])["dpop_bound_access_tokens_required"] is False
    assert resource_metadata([disabled]) == {}
    assert offered_algorithms([disabled]) == ()
    assert list(offered_algorithms([CompiledDpop()])) == ALL_DPOP_ALGS
