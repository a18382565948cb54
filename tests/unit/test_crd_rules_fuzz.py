"""One validator, two languages: where a CRD's schema and CEL rules read a value the models
also read (durations, header names), random values get the same verdict from both, so neither
can start admitting what the other refuses."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic import ValidationError as PydanticError

from crd_cases import URL, L, R, X
from crd_support import Schema, Validator, cel_refusals, node_at
from mcp_oauth_gateway.resources import fields
from mcp_oauth_gateway.resources import models as m

FUZZ = settings(max_examples=300, deadline=None)


def node_admits(node: Schema, value: object) -> bool:
    return Validator(node).is_valid(value) and not list(cel_refusals(node, value))


def model_accepts(model: type[BaseModel], data: Mapping[str, object]) -> bool:
    try:
        model.model_validate(data)
    except PydanticError:
        return False
    return True


# Letters and signs of other duration syntaxes too (days, microseconds, fractions), so a model
# that starts accepting them fails here until the schema does as well.
durations = st.text(alphabet="0123456789hmsdwu.+- ", max_size=26) | st.sampled_from(
    ["1s", "999ms", "1000ms", "0h0m1s", "5m", "1h30m", "0s", "1ms", "99999h99999m99999s99999ms"]
)


@FUZZ
@given(durations)
def test_cache_duration_rules_read_durations_as_the_model_does(text: str) -> None:
    node = node_at("GatewayPolicy", f"{R}.cacheDuration")
    remote = {"url": URL, "cacheDuration": text}
    assert node_admits(node, text) is model_accepts(m.RemoteJwks, remote), text


@FUZZ
@given(durations)
def test_window_rules_read_durations_as_the_model_does(text: str) -> None:
    node = node_at("GatewayPolicy", f"{L}.window")
    limit = {"key": "jwt.sub", "requests": 1, "window": text}
    assert node_admits(node, text) is model_accepts(m.RateLimitSpec, limit), text


header_names = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=0, max_size=20
) | st.sampled_from(sorted(fields._PROTECTED)).map(lambda s: "".join(random_case(s)))


def random_case(text: str) -> Iterator[str]:
    for index, char in enumerate(text):
        yield char.upper() if index % 2 else char


@FUZZ
@given(header_names)
def test_header_name_rules_read_names_as_the_model_does(name: str) -> None:
    node = node_at("GatewayPolicy", f"{X}.set[].name")
    assert node_admits(node, name) is model_accepts(m.HeaderValue, {"name": name, "value": "x"})
