"""A GatewayBackend with several targets: the names the loader takes and refuses, and what the
compiled route carries (every target by name and address, the first as the single target)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.controlplane import build_snapshot
from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.resources import load_paths
from unit.resources_fixture import BASE, write

ONE = "    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]\n"


def with_targets(targets: str) -> str:
    assert ONE in BASE
    return BASE.replace(ONE, f"    targets: {targets}\n")


def test_several_targets_are_compiled_in_order(tmp_path):
    text = with_targets(
        "[{name: a, static: {host: 127.0.0.1, port: 9}},"
        " {name: b-2, static: {host: b.internal, port: 8001, path: /b}}]"
    )
    route = build_snapshot(load_paths([write(tmp_path, text)])).listeners[8080][0]
    assert route.targets == (
        CompiledTarget("127.0.0.1", 9, "/mcp", "a"),
        CompiledTarget("b.internal", 8001, "/b", "b-2"),
    )
    assert route.target == route.targets[0]
    assert route.federated


def test_one_target_is_not_federated(tmp_path):
    route = build_snapshot(load_paths([write(tmp_path, BASE)])).listeners[8080][0]
    assert route.targets == (CompiledTarget("127.0.0.1", 9, "/mcp", "t"),)
    assert not route.federated


@pytest.mark.parametrize(
    ("targets", "field", "why"),
    [
        (
            "[{name: a, static: {host: h, port: 1}}, {name: a, static: {host: i, port: 2}}]",
            "spec.mcp.targets[1]",
            "'a' is used by an earlier target",
        ),
        ("[{name: A, static: {host: h, port: 1}}]", "spec.mcp.targets[0].name", "target name"),
        ("[{name: a_b, static: {host: h, port: 1}}]", "spec.mcp.targets[0].name", "target name"),
        (
            "["
            + ", ".join(f"{{name: t{i}, static: {{host: h, port: {i + 1}}}}}" for i in range(17))
            + "]",
            "spec.mcp.targets",
            "at most 16",
        ),
    ],
)
def test_bad_targets_are_refused_naming_the_field(tmp_path, targets, field, why):
    text = "\n".join(load_paths([write(tmp_path, with_targets(targets))]).errors)
    assert f": {field}: " in text, text
    assert why in text, text
