"""The recipe "Adding a policy field" (docs/development.md), followed with a toy field on copies of
the models (the real ones are not changed): what is generated from the model picks it up (the
CRD, the Helm chart's copy, the reference page), what must not be forgotten stops the generator
(a description, a rule for a validator), a gateway without the field refuses a policy that sets
it, and a compile step that does not read the field is caught, so the recipe cannot drift from
the code. Every field the case tables and examples set is read by `compile_policy`."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import pytest
import yaml
from pydantic import BaseModel, Field, field_validator

from crd_cases import ACCEPTED, example_documents
from mcp_oauth_gateway.controlplane import policies, snapshot
from mcp_oauth_gateway.controlplane.deployment import Deployment
from mcp_oauth_gateway.controlplane.policies import PolicyResult, compile_policy
from mcp_oauth_gateway.controlplane.service_refs import ServiceRefs, policy_services
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.resources import models as m
from support import ROOT, tool_module

# --- the toy field, as step 1 of the recipe writes it -----------------------------------------


class ToyTraffic(m.Traffic):
    toy_limit: Annotated[int, Field(ge=1, le=100)] | None = None
    """Toy: at most this many of something per request, 1 to 100. Unset: no limit."""


class ToySpec(m.GatewayPolicySpec):
    traffic: ToyTraffic


class ToyPolicy(m.GatewayPolicy):
    spec: ToySpec


class UndescribedTraffic(m.Traffic):
    toy_limit: int | None = None


class UndescribedSpec(m.GatewayPolicySpec):
    traffic: UndescribedTraffic


class UndescribedPolicy(m.GatewayPolicy):
    spec: UndescribedSpec


class CheckedTraffic(m.Traffic):
    toy_name: str | None = None
    """Toy: a name, checked by a validator the generator has no rule for."""

    @field_validator("toy_name")
    @classmethod
    def _lowercase(cls, value: str | None) -> str | None:
        if value is not None and value != value.lower():
            raise ValueError("must be lowercase")
        return value


class CheckedSpec(m.GatewayPolicySpec):
    traffic: CheckedTraffic


class CheckedPolicy(m.GatewayPolicy):
    spec: CheckedSpec


TOY_PATH = "spec.traffic.toyLimit"


def _gen_crds() -> ModuleType:
    return tool_module("gen_crds")


def _crds_with(model: type[m.GatewayPolicy]) -> dict[Path, str]:
    """Every CRD file as the generator writes it with `model` in place of GatewayPolicy."""
    gen = _gen_crds()
    policy, *others = gen.KINDS
    assert policy.model is m.GatewayPolicy
    return dict(gen.render((dataclasses.replace(policy, model=model), *others)))


def _policy_crd_files(gen: ModuleType) -> list[Path]:
    """The GatewayPolicy CRD under deploy/crds and its copy in the Helm chart."""
    name = f"gatewaypolicies.{gen.GROUP}.yaml"
    return [gen.OUT_DIR / name, gen.CHART_CRDS / name]


def _toy_node(text: str) -> dict[str, Any]:
    crd = yaml.safe_load(text)
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    node: dict[str, Any] = spec["properties"]["traffic"]["properties"]["toyLimit"]
    return node


def test_step_4_the_crd_and_the_charts_copy_carry_the_new_field() -> None:
    gen = _gen_crds()
    toy = _crds_with(ToyPolicy)
    for path in _policy_crd_files(gen):
        assert _toy_node(toy[path]) == {
            "description": "Toy: at most this many of something per request, 1 to 100. "
            "Unset: no limit.",
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
        }, path
        assert "toyLimit" not in gen.render()[path], "the real model is left as it is"


def test_step_4_the_reference_page_has_a_row_for_the_new_field() -> None:
    gen, reference = _gen_crds(), tool_module("gen_reference")
    [path, _] = _policy_crd_files(gen)
    page = reference.crd_page("GatewayPolicy", path.name, _crds_with(ToyPolicy)[path])
    [row] = [line for line in page.splitlines() if line.startswith(f"| `{TOY_PATH}` |")]
    assert "| integer | no |" in row
    assert "≥ 1; ≤ 100" in row
    assert "Toy: at most this many of something per request" in row


def test_step_1_a_field_without_a_description_stops_the_generator() -> None:
    _gen_crds()
    errors = sys.modules["_crd_schema"]
    with pytest.raises(errors.GeneratorError, match=f"{TOY_PATH}: no description"):
        _crds_with(UndescribedPolicy)


def test_step_1_a_validator_without_a_rule_stops_the_generator() -> None:
    _gen_crds()
    errors = sys.modules["_crd_schema"]
    with pytest.raises(errors.GeneratorError, match=r"CheckedTraffic\._lowercase has no entry"):
        _crds_with(CheckedPolicy)


def _document(**traffic: object) -> dict[str, Any]:
    document = next(d for w, d in example_documents() if d["kind"] == "GatewayPolicy")
    document = yaml.safe_load(yaml.safe_dump(document))
    document["spec"]["traffic"].update(traffic)
    return dict(document)


def test_step_1_the_loader_reads_the_field_by_its_yaml_name_and_its_bounds() -> None:
    assert ToyPolicy.model_validate(_document(toyLimit=5)).spec.traffic.toy_limit == 5
    with pytest.raises(ValueError, match="toyLimit"):
        ToyPolicy.model_validate(_document(toyLimit=0))


def test_a_gateway_without_the_field_refuses_a_policy_that_sets_it(tmp_path: Path) -> None:
    """Fail closed: an older gateway, or a typo, never serves a policy with a setting dropped."""
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(_document(toyLimit=5)), encoding="utf-8")
    [error] = load_paths([path]).errors
    assert f"{TOY_PATH}: " in error, error
    assert "unknown field" in error, error


# --- step 2: the compile step reads every field it is given -----------------------------------


def _set_fields(value: object, path: str) -> Iterator[tuple[int, str, str]]:
    """(id of the model, field name, YAML path) of every field set in a model tree."""
    if isinstance(value, BaseModel):
        for name in sorted(value.model_fields_set):
            alias = type(value).model_fields[name].alias or name
            where = f"{path}.{alias}" if path else alias
            if not _fixed(type(value).model_fields[name].annotation):
                yield id(value), name, where
            yield from _set_fields(getattr(value, name), where)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _set_fields(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _set_fields(item, f"{path}.{key}")


def _fixed(annotation: object) -> bool:
    """A field with one allowed value (`kind: Service`) says nothing to compile."""
    present = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(present) == 1:
        annotation = present[0]
    return typing.get_origin(annotation) is typing.Literal and len(typing.get_args(annotation)) == 1


# Read by the steps before and after compiling (binding attaches a policy to its targets).
NOT_COMPILED = ("apiVersion", "kind", "metadata", "spec.targetRefs")


def unread_fields(
    policy: m.GatewayPolicy, compile_step: Callable[[m.GatewayPolicy], object]
) -> list[str]:
    """The YAML paths of the fields `policy` sets that `compile_step` never reads."""
    read: set[tuple[int, str]] = set()
    original = m.StrictModel.__getattribute__

    def tracking(self: BaseModel, name: str) -> Any:
        if name in type(self).model_fields:
            read.add((id(self), name))
        return original(self, name)

    given = [f for f in _set_fields(policy, "") if not f[2].startswith(NOT_COMPILED)]
    own = "__getattribute__" in vars(m.StrictModel)
    m.StrictModel.__getattribute__ = tracking  # type: ignore[method-assign]
    try:
        compile_step(policy)
    finally:
        if own:
            m.StrictModel.__getattribute__ = original  # type: ignore[method-assign]
        else:
            del m.StrictModel.__getattribute__
    return [where for model, name, where in given if (model, name) not in read]


def _service(key: str) -> m.Service:
    namespace, name = key.split("/")
    return m.Service.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        }
    )


def _compile(policy: m.GatewayPolicy) -> PolicyResult:
    """The policy compiled from files, with the Services its keysets name."""
    refs = ServiceRefs({key: _service(key) for key in policy_services(policy)})
    return compile_policy(policy, refs, Deployment(user_token_store="sqlite"))


def _env_names(node: object) -> Iterator[str]:
    """The environment variables a document's secrets are read from."""
    if isinstance(node, dict):
        if isinstance(node.get("env"), str):
            yield node["env"]
        for value in node.values():
            yield from _env_names(value)
    elif isinstance(node, list):
        for item in node:
            yield from _env_names(item)


def test_step_2_a_field_the_compile_step_does_not_read_is_caught() -> None:
    policy = ToyPolicy.model_validate(_document(toyLimit=5))
    results: list[PolicyResult] = []
    assert unread_fields(policy, lambda p: results.append(_compile(p))) == [TOY_PATH]
    assert results[0].valid, "served as if the field were not there"


def _policies() -> Iterator[tuple[str, dict[str, Any]]]:
    yield from ((w, d) for w, d in example_documents() if d["kind"] == "GatewayPolicy")
    yield from ((c.name, c.document()) for c in ACCEPTED if c.kind == "GatewayPolicy")


@pytest.mark.parametrize(
    ("where", "document"), list(_policies()), ids=[where for where, _ in _policies()]
)
def test_compile_policy_reads_every_field_a_served_policy_sets(
    where: str, document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _env_names(document):
        monkeypatch.setenv(name, "recipe-secret")
    policy = m.GatewayPolicy.model_validate(document)
    results: list[PolicyResult] = []
    unread = unread_fields(policy, lambda p: results.append(_compile(p)))
    if results[0].valid:
        assert unread == [], f"{where}: compile_policy ignores {unread}"
    else:
        # Refused whole (its routes answer 503): what it sets is served nowhere.
        assert results[0].compiled.invalid, where


def test_most_case_policies_are_served() -> None:
    """The check above is not vacuous: most of the cases compile to a served policy."""
    served = []
    for _, document in _policies():
        with pytest.MonkeyPatch.context() as patch:
            for name in _env_names(document):
                patch.setenv(name, "recipe-secret")
            served.append(_compile(m.GatewayPolicy.model_validate(document)).valid)
    assert sum(served) >= len(served) * 3 // 4, served


# --- the recipe names what exists ---------------------------------------------------------------


def _recipe() -> str:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    return text.split("## Adding a policy field\n", 1)[1].split("\n## ", 1)[0]


def test_every_file_the_recipe_names_exists() -> None:
    named = set(re.findall(r"`([\w/.]+\.py)`", _recipe()))
    found = (ROOT.glob(f"{top}/**/*.py") for top in ("src", "tools", "tests"))
    files = [path.relative_to(ROOT).as_posix() for paths in found for path in paths]
    assert len(named) >= 10, named
    for name in named:
        assert any(f.endswith(name) for f in files), f"the recipe names {name}, which is gone"


def test_every_name_the_recipe_gives_is_defined_where_it_says() -> None:
    text = _recipe()
    _gen_crds()
    rules = sys.modules["_crd_rules"]
    for name, module in (
        ("CONTROLLER_CHECKS", policies),
        ("compile_policy", policies),
        ("DECORATED", rules),
        ("AFTER_VALIDATORS", rules),
        ("CompiledPolicy", snapshot),
        ("JwtMode", m),
    ):
        assert f"`{name}`" in text, f"the recipe no longer names {name}"
        assert hasattr(module, name), f"the recipe names {name}, which {module.__name__} lacks"
    assert "\nFULL = " in (ROOT / "tests" / "unit" / "test_stages.py").read_text()
