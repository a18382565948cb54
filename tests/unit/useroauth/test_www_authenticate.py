"""Reading `WWW-Authenticate` (`useroauth.www_authenticate`): one or several challenges, quoted
commas and escapes, parameters without quotes, and what a malformed header yields."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.useroauth.www_authenticate import (
    Challenge,
    bearer_parameter,
    challenges,
    parameter,
)

PRM = "https://mcp.example/.well-known/oauth-protected-resource/mcp"


def test_the_mcp_sdk_challenge():
    header = (
        'Bearer error="invalid_token", error_description="Authentication required", '
        f'resource_metadata="{PRM}"'
    )
    assert challenges(header) == [
        Challenge(
            "bearer",
            (
                ("error", "invalid_token"),
                ("error_description", "Authentication required"),
                ("resource_metadata", PRM),
            ),
        )
    ]


def test_several_challenges_keep_their_own_parameters():
    header = f'Basic realm="files", Bearer resource_metadata="{PRM}", scope="read write"'
    found = challenges(header)
    assert [c.scheme for c in found] == ["basic", "bearer"]
    assert found[0].params == (("realm", "files"),)
    assert found[1].values("resource_metadata") == [PRM]
    assert bearer_parameter(header, "scope") == ["read write"]


def test_a_scope_of_another_scheme_is_not_the_bearer_scope():
    header = 'DPoP algs="ES256", scope="admin", Bearer realm="x"'
    assert bearer_parameter(header, "scope") == []
    assert parameter(header, "scope") == ["admin"]


def test_a_comma_inside_quotes_does_not_split():
    header = f'Bearer realm="a, b=c", resource_metadata="{PRM}"'
    (only,) = challenges(header)
    assert only.values("realm") == ["a, b=c"]
    assert only.values("resource_metadata") == [PRM]


def test_an_escaped_quote_is_part_of_the_value():
    (only,) = challenges(r'Bearer error_description="say \"hi\", then go"')
    assert only.values("error_description") == ['say "hi", then go']


def test_a_value_without_quotes():
    assert parameter(f"Bearer resource_metadata={PRM}", "resource_metadata") == [PRM]


def test_names_are_read_case_insensitively_and_spaces_around_the_equals_allowed():
    header = f'bEaReR Resource_Metadata = "{PRM}"'
    assert challenges(header)[0].scheme == "bearer"
    assert parameter(header, "resource_metadata") == [PRM]


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer", 'Bearer error="invalid_token"', 'Bearer realm="resource_metadata"'],
)
def test_no_resource_metadata(header):
    assert parameter(header, "resource_metadata") == []


def test_a_lone_scheme_after_a_comma_is_a_challenge_of_its_own():
    found = challenges(f'Bearer resource_metadata="{PRM}", Negotiate, Basic')
    assert [c.scheme for c in found] == ["bearer", "negotiate", "basic"]
    assert found[1].params == ()


def test_a_token68_challenge_has_no_parameters():
    found = challenges(
        f'Negotiate YIIBzQYGKwYBBQUCoIIBwTCCAb2g==, Bearer resource_metadata="{PRM}"'
    )
    assert found[0] == Challenge("negotiate")
    assert found[1].values("resource_metadata") == [PRM]


def test_an_unclosed_quote_reads_as_nothing():
    assert challenges(f'Bearer resource_metadata="{PRM}", realm="unclosed') == []


def test_a_parameter_swallowed_by_an_earlier_quote_is_not_read():
    header = f'Bearer realm="unclosed, resource_metadata="{PRM}'
    assert parameter(header, "resource_metadata") == []


def test_parameters_before_any_scheme_belong_to_nothing():
    assert parameter(f'resource_metadata="{PRM}"', "resource_metadata") == []


def test_several_fields_joined_and_repeated_values_counted_once():
    header = f'Bearer resource_metadata="{PRM}", DPoP resource_metadata="{PRM}"'
    assert parameter(header, "resource_metadata") == [PRM]


def test_different_values_are_all_reported():
    other = "https://elsewhere.example/.well-known/oauth-protected-resource"
    header = f'Bearer resource_metadata="{PRM}", Bearer resource_metadata="{other}"'
    assert parameter(header, "resource_metadata") == [PRM, other]
    repeated = f'Bearer resource_metadata="{PRM}", resource_metadata="{other}"'
    assert parameter(repeated, "resource_metadata") == [PRM, other]
