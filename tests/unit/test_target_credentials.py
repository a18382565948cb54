"""Credentials per target (`spec.backend.credentials.targets`) at load: the model's rules (one
entry per target, exactly one mode each, the default optional beside them), each entry's secrets
read and refused naming the entry, a name the route's backend has no target of making the policy
invalid (its routes answer 503 naming the field and the names the backend has), and a
single-target backend's entry put in place of the default."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mcp_oauth_gateway.controlplane import build_snapshot
from mcp_oauth_gateway.controlplane.credentials import SecretScope, compile_target_credentials
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.resources.models import BackendCredentialsSpec
from mcp_oauth_gateway.serving.route_context import failure_of

from .resources_fixture import BASE, policy, write

ONE = "    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]\n"
TWO = (
    "    targets: [{name: search, static: {host: 127.0.0.1, port: 9001}},"
    " {name: tickets, static: {host: 127.0.0.1, port: 9002}}]\n"
)
EXCHANGE = {"clientId": "gw", "clientSecret": {"env": "TC_SECRET"}, "audience": "search-aud"}
HEADER = {"header": "X-Api-Key", "value": {"env": "TC_KEY"}}
ENV = {"TC_SECRET": "s3cret", "TC_KEY": "k-1"}


def spec(value: dict) -> BackendCredentialsSpec:
    return BackendCredentialsSpec.model_validate(value)


def refusal(value: dict) -> tuple[tuple[object, ...], str]:
    with pytest.raises(ValidationError) as caught:
        spec(value)
    [error] = caught.value.errors()
    return error["loc"], error["msg"]


# --- the model ------------------------------------------------------------------------------


def test_a_repeated_target_is_refused_at_the_repeated_entry():
    loc, message = refusal(
        {"targets": [{"name": "a", "passthrough": True}, {"name": "a", "secretHeader": HEADER}]}
    )
    assert loc == ("targets", 1)
    assert "the name 'a' is used by an earlier entry" in message


def test_an_entry_without_a_mode_or_with_two_is_refused_at_the_entry():
    assert refusal({"targets": [{"name": "a"}]}) == (
        ("targets", 0),
        "Value error, set exactly one of tokenExchange, passthrough, secretHeader or userOAuth",
    )
    loc, message = refusal(
        {"targets": [{"name": "a", "passthrough": True, "tokenExchange": EXCHANGE}]}
    )
    assert loc == ("targets", 0)
    assert "set exactly one of tokenExchange, passthrough, secretHeader or userOAuth" in message


def test_the_default_may_be_omitted_beside_targets_but_not_doubled():
    alone = spec({"targets": [{"name": "a", "passthrough": True}]})
    assert (alone.token_exchange, alone.passthrough, alone.secret_header) == (None, False, None)
    _, message = refusal(
        {
            "passthrough": True,
            "secretHeader": HEADER,
            "targets": [{"name": "a", "passthrough": True}],
        }
    )
    assert (
        "set at most one of tokenExchange, passthrough, secretHeader or userOAuth beside" in message
    )


def test_without_targets_the_error_is_what_it_always_was():
    assert refusal({}) == (
        (),
        "Value error, set exactly one of tokenExchange, passthrough, secretHeader or userOAuth",
    )


# --- compile --------------------------------------------------------------------------------


def test_each_entrys_secrets_are_read_at_load():
    problems: list[str] = []
    compiled = compile_target_credentials(
        spec(
            {
                "targets": [
                    {"name": "search", "tokenExchange": EXCHANGE},
                    {"name": "tickets", "secretHeader": HEADER},
                ]
            }
        ),
        problems,
        SecretScope(environ=ENV),
    )
    assert problems == []
    by_name = dict(compiled)
    exchange = by_name["search"].token_exchange
    assert exchange is not None
    assert (exchange.client_secret, exchange.audience) == ("s3cret", "search-aud")
    header = by_name["tickets"].secret_header
    assert header is not None
    assert (header.header, header.value) == (b"x-api-key", b"k-1")


def test_an_entrys_unreadable_secret_is_named_by_the_entry():
    problems: list[str] = []
    value = {
        "targets": [{"name": "a", "passthrough": True}, {"name": "b", "tokenExchange": EXCHANGE}]
    }
    compiled = compile_target_credentials(spec(value), problems, SecretScope(environ={}))
    assert [name for name, _ in compiled] == ["a"]
    assert problems == [
        "spec.backend.credentials.targets[1].tokenExchange.clientSecret: environment variable "
        "TC_SECRET is not set in the gateway's environment"
    ]


# --- against the route's backend ------------------------------------------------------------


def credentials(text: str) -> str:
    return "  backend:\n    credentials:\n" + "".join(
        f"      {line}\n" for line in text.split("\n")
    )


def build(tmp_path, monkeypatch, targets: str, creds: str):
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    return build_snapshot(
        load_paths([write(tmp_path, BASE.replace(ONE, targets) + policy() + creds)])
    )


TYPO = credentials(
    "targets:\n"
    "  - {name: search, passthrough: true}\n"
    "  - {name: tickts, secretHeader: {header: X-Api-Key, value: {env: TC_KEY}}}"
)


def test_a_name_the_backend_has_no_target_of_makes_the_policy_invalid(tmp_path, monkeypatch):
    snapshot = build(tmp_path, monkeypatch, TWO, TYPO)
    [report] = snapshot.policies
    accepted = {c.type: c for c in report.conditions}["Accepted"]
    expected = (
        "spec.backend.credentials.targets[1].name: 'tickts' is not a target of GatewayBackend "
        "default/backend (the backend of HTTPRoute default/mcp rule 0), whose targets are "
        "search, tickets; name one of them"
    )
    assert (accepted.status, accepted.reason) == (False, "Invalid")
    assert expected in accepted.message
    # Every match of the rule fails closed with the same words, never serving a default.
    for route in snapshot.listeners[8080]:
        failure = failure_of(route)
        assert failure is not None
        assert (failure.status, failure.error) == (503, "policy_invalid")
        assert expected in failure.description


def test_names_the_backend_has_are_accepted(tmp_path, monkeypatch):
    fixed = TYPO.replace("tickts", "tickets")
    snapshot = build(tmp_path, monkeypatch, TWO, fixed)
    assert snapshot.ok, [c.message for c in snapshot.policies[0].conditions]
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.credentials is None  # no default: unlisted targets get nothing
    assert [(n, c.mode) for n, c in route.policy.target_credentials] == [
        ("search", "Passthrough"),
        ("tickets", "SecretHeader"),
    ]


def test_a_single_targets_entry_replaces_the_default_at_load(tmp_path, monkeypatch):
    creds = credentials(
        "secretHeader: {header: X-Api-Key, value: {env: TC_KEY}}\n"
        "targets: [{name: t, passthrough: true}]"
    )
    route = build(tmp_path, monkeypatch, ONE, creds).listeners[8080][0]
    assert route.policy is not None
    assert route.policy.credentials is not None
    assert route.policy.credentials.mode == "Passthrough"
    assert route.policy.target_credentials == ()


def test_a_single_target_backend_refuses_other_names_too(tmp_path, monkeypatch):
    creds = credentials("targets: [{name: search, passthrough: true}]")
    route = build(tmp_path, monkeypatch, ONE, creds).listeners[8080][0]
    assert route.policy is not None
    assert route.policy.invalid is not None
    assert "'search' is not a target of GatewayBackend default/backend" in route.policy.invalid
    assert "whose targets are t; name one of them" in route.policy.invalid
