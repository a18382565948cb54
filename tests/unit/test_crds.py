"""The CRDs in deploy/crds accept exactly what the file loader accepts, checked without a server.

`admit()` (tests/crd_support.py) replays what the API server does with a create request sent with
`?fieldValidation=Strict`: refuse unknown fields (400), prune nulls, apply defaults, validate the
OpenAPI schema (patterns read as Go's RE2 reads them) and evaluate the CEL rules (422). The same
case tables run against a real API server in tests/e2e/test_crds_on_apiserver.py, which keeps
this replay honest.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from pydantic import Field, field_validator

from crd_cases import (
    ACCEPTED,
    CONTROLLER_ONLY,
    CR,
    DIVERGENCES,
    Case,
    Divergence,
    P,
    X,
    example_documents,
)
from crd_refusals import REFUSED
from crd_support import (
    CLUSTER_CRD_FILES,
    CRD_FILES,
    GROUP,
    PLURALS,
    Schema,
    Validator,
    admit,
    cel_refusals,
    compile_rule,
    crd,
    join_path,
    node_at,
    rules,
    schema,
    subschemas,
    version,
)
from mcp_oauth_gateway.resources import fields, load_paths
from mcp_oauth_gateway.resources import models as m
from support import ROOT, tool_module


def generator() -> ModuleType:
    """tools/gen_crds.py."""
    return tool_module("gen_crds")


def schema_walk() -> ModuleType:
    """The generator's model walker (tools/_crd_schema.py)."""
    generator()
    return sys.modules["_crd_schema"]


def loader_errors(document: Mapping[str, Any], tmp_path: Path) -> list[str]:
    """The file loader's messages for `document` (empty: it loads)."""
    path = tmp_path / "resource.yaml"
    path.write_text(yaml.safe_dump(dict(document), allow_unicode=True), encoding="utf-8")
    return load_paths([path]).errors


# --- structural schemas -----------------------------------------------------------------------

# The fields of apiextensions/v1 JSONSchemaProps that a structural schema may use.
KEYWORDS = {
    "type", "format", "description", "title", "default", "maximum", "minimum",
    "exclusiveMaximum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
    "minItems", "multipleOf", "enum", "maxProperties", "minProperties", "required", "items",
    "allOf", "oneOf", "anyOf", "not", "properties", "additionalProperties", "nullable",
    "example", "externalDocs", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys", "x-kubernetes-list-type", "x-kubernetes-map-type",
    "x-kubernetes-validations",
}  # fmt: skip
# What a junctor may not set: structure lives outside them, so pruning and defaulting see it.
STRUCTURE = {"type", "description", "default", "additionalProperties", "nullable", "properties"}
STRUCTURE |= {"items"} | {k for k in KEYWORDS if k.startswith("x-kubernetes-")}
PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "number": (int, float),
    "object": dict,
    "array": list,
}
NOT_RE2 = re.compile(r"\(\?<?[=!]|\(\?>|\\[1-9]|\\Z")
RULE_KEYS = {"rule", "message", "messageExpression", "reason", "fieldPath", "optionalOldSelf"}


def _node_problems(node: Schema, path: str) -> Iterator[str]:
    kind = PYTHON_TYPES.get(node.get("type", ""), object)
    if node.get("additionalProperties") is False or node.get("uniqueItems"):
        yield f"{path}: additionalProperties: false and uniqueItems are not allowed"
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: both properties and additionalProperties"
    if "items" in node and not isinstance(node["items"], dict):
        yield f"{path}: items must be one schema"
    for name in node.get("required", []):
        if name not in node.get("properties", {}):
            yield f"{path}: required {name!r} is not a property"
    for value in node.get("enum", []):
        if not isinstance(value, kind):
            yield f"{path}: enum value {value!r} is not a {node.get('type')}"
    if "default" in node:
        default = node["default"]
        if default is None or not Validator(node).is_valid(default):
            yield f"{path}: default {default!r} does not validate against its own schema"
        if list(cel_refusals(node, default, path)):
            yield f"{path}: default {default!r} breaks a CEL rule"
    if "pattern" in node:
        re.compile(node["pattern"])
        if NOT_RE2.search(node["pattern"]):
            yield f"{path}: pattern {node['pattern']!r} is not RE2"
    yield from _list_and_rule_problems(node, path)


def _list_and_rule_problems(node: Schema, path: str) -> Iterator[str]:
    if node.get("x-kubernetes-list-type") == "map":
        items = node.get("items", {})
        for key in node.get("x-kubernetes-list-map-keys", [None]):
            properties = items.get("properties", {})
            if key not in items.get("required", []) and "default" not in properties.get(key, {}):
                yield f"{path}: list-map key {key!r} is neither required nor defaulted"
    for entry in node.get("x-kubernetes-validations", []):
        if set(entry) - RULE_KEYS or not entry.get("rule") or not entry.get("message"):
            yield f"{path}: a CEL rule needs `rule` and `message`, got {sorted(entry)}"


def structural_problems(node: Schema, path: str = "", in_junctor: bool = False) -> Iterator[str]:
    """Violations of the rules for structural schemas that can be checked without a server."""
    unknown = set(node) - KEYWORDS
    if unknown:
        yield f"{path}: not JSONSchemaProps fields: {sorted(unknown)}"
    if in_junctor and set(node) & STRUCTURE:
        yield f"{path}: {sorted(set(node) & STRUCTURE)} inside allOf/anyOf/oneOf/not"
    untyped = not node.get("x-kubernetes-int-or-string") and not node.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not in_junctor and "type" not in node and untyped:
        yield f"{path or '<root>'}: no type"
    yield from _node_problems(node, path)
    for sub, sub_path, junctor in subschemas(node, path):
        yield from structural_problems(sub, sub_path, in_junctor or junctor)


def undescribed(node: Schema, path: str = "") -> Iterator[str]:
    """The paths `kubectl explain` would show as `<no description>`: every property, and the
    items of every list of objects, without one."""
    for name, sub in node.get("properties", {}).items():
        child = join_path(path, name)
        # The API server refuses anything but `type` on the root's metadata.
        if child != "metadata" and not str(sub.get("description", "")).strip():
            yield child
        yield from undescribed(sub, child)
    items = node.get("items")
    if isinstance(items, dict):
        if items.get("type") == "object" and not str(items.get("description", "")).strip():
            yield f"{path}[]"
        yield from undescribed(items, f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from undescribed(node["additionalProperties"], f"{path}{{}}")


def prose(text: str | None) -> str:
    """A docstring as the generator writes it: one line."""
    return " ".join((text or "").split())


# --- tests --------------------------------------------------------------------------------------


def test_committed_crds_are_what_the_generator_makes_of_the_models() -> None:
    gen = generator()
    for path, text in gen.render().items():
        committed = path.read_text(encoding="utf-8") if path.is_file() else ""
        assert committed == text, f"{path.relative_to(ROOT)} is out of date: run {gen.REGENERATE}"
    # The Helm chart's crds/ holds the same files, written by the same run.
    files = [*CRD_FILES.values(), *CLUSTER_CRD_FILES.values()]
    chart = [gen.CHART_CRDS / path.name for path in files]
    assert sorted(gen.render()) == sorted([*files, *chart])
    assert gen.main(["--check"]) == 0


def test_generator_stops_at_a_validator_it_has_no_rule_for() -> None:
    gen = generator()

    class Probe(m.StrictModel):
        name: m.NonEmpty = Field(description="Described.")

        @field_validator("name")
        @classmethod
        def _checked(cls, value: str) -> str:
            return value

    with pytest.raises(gen.GeneratorError, match=r"Probe\._checked has no entry"):
        schema_walk().object_schema(Probe, schema_walk().Walk(), "spec")


def test_generator_stops_at_a_field_without_a_description() -> None:
    gen = generator()

    class Probe(m.StrictModel):
        name: m.NonEmpty

    with pytest.raises(gen.GeneratorError, match=r"spec\.name: no description; write a docstring"):
        schema_walk().object_schema(Probe, schema_walk().Walk(), "spec")


def test_generator_stops_at_list_items_without_a_docstring() -> None:
    gen = generator()

    class Item(m.StrictModel):
        name: m.NonEmpty = Field(description="Described.")

    class Probe(m.StrictModel):
        items: list[Item] = Field(description="Described too.")

    with pytest.raises(gen.GeneratorError, match=r"spec\.items\[\]: Item has no docstring"):
        schema_walk().object_schema(Probe, schema_walk().Walk(), "spec")


def test_generator_stops_at_a_rule_no_model_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = generator()
    rules = sys.modules["_crd_rules"]
    monkeypatch.setitem(rules.DECORATED, (m.RemoteJwks, "_renamed"), rules.Rule())
    with pytest.raises(gen.GeneratorError, match="no model uses any more"):
        gen.render()


@pytest.mark.parametrize("kind", PLURALS)
def test_crd_names_scope_versions_and_status(kind: str) -> None:
    document = crd(kind)
    assert document["apiVersion"] == "apiextensions.k8s.io/v1"
    assert document["metadata"]["name"] == f"{PLURALS[kind]}.{GROUP}"
    spec = document["spec"]
    assert (spec["group"], spec["scope"]) == (GROUP, "Namespaced")
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == PLURALS[kind]
    assert spec["names"]["shortNames"]
    only = version(kind)
    assert (only["name"], only["served"], only["storage"]) == ("v1alpha1", True, True)
    assert only["subresources"] == {"status": {}}
    condition = node_at(kind, "status.conditions[]")
    assert condition["required"] == ["lastTransitionTime", "message", "reason", "status", "type"]
    assert condition["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert schema(kind)["required"] == ["spec"]


def test_policy_status_has_gep_713_ancestors() -> None:
    ancestor = node_at("GatewayPolicy", "status.ancestors[]")
    assert ancestor["required"] == ["ancestorRef", "controllerName", "conditions"]
    ref = ancestor["properties"]["ancestorRef"]
    assert {"group", "kind", "name", "namespace", "sectionName"} <= set(ref["properties"])
    assert ref["required"] == ["name"]
    assert Validator(ancestor["properties"]["controllerName"]).is_valid(
        "mcp-oauth-gateway.dev/gateway-controller"
    )


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        ("GatewayPolicy", ["Accepted", "Attached", "ResolvedRefs", "Age"]),
        ("GatewayBackend", ["Host", "Port", "Path", "Age"]),
    ],
)
def test_printer_columns_point_at_fields_of_the_schema(kind: str, columns: list[str]) -> None:
    printed = version(kind)["additionalPrinterColumns"]
    assert [column["name"] for column in printed] == columns
    types = {"string": "string", "integer": "integer", "date": "string"}
    for column in printed:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        node = node_at(kind, column["jsonPath"])
        assert node["type"] == types[column["type"]], column


@pytest.mark.parametrize("kind", PLURALS)
def test_schemas_are_structural(kind: str) -> None:
    root = schema(kind)
    assert list(structural_problems(root)) == []
    assert root["properties"]["metadata"] == {"type": "object"}


@pytest.mark.parametrize("kind", PLURALS)
def test_kubectl_explain_has_a_description_for_every_field(kind: str) -> None:
    """Issue 25, item 7: `kubectl explain gatewaypolicy.spec` said `<no description>`."""
    missing = list(undescribed(schema(kind)))
    assert not missing, (
        f"{kind}: no description at {', '.join(missing)}; write a docstring under the field in "
        "its model's module in src/mcp_oauth_gateway/resources/, then run "
        f"{generator().REGENERATE}"
    )
    assert schema(kind)["description"]


def test_descriptions_are_the_models_docstrings() -> None:
    """One source: the docstring under a field, then what a validator adds that the server
    words poorly (a protected header name is refused as `must not validate the schema (not)`)."""
    mode = node_at("GatewayPolicy", f"{P}.mode")["description"]
    assert f'"""{mode}"""' in prose(inspect.getsource(m.JwtAuthenticationSpec)), mode
    assert node_at("GatewayPolicy", "spec.targetRefs[]")["description"] == prose(
        m.PolicyTargetRef.__doc__
    )
    name = node_at("GatewayPolicy", f"{X}.set[].name")["description"]
    own = name.partition(". An HTTP header name")[0]
    assert f'"""{own}."""' in prose(inspect.getsource(m.HeaderValue)), name
    for path in (f"{X}.set[].name", f"{X}.remove[]", f"{CR}.secretHeader.header"):
        description = node_at("GatewayPolicy", path)["description"]
        assert all(header in description for header in fields._PROTECTED), (path, description)


# Client-side `kubectl apply -k deploy/` keeps the whole CRD as JSON in an annotation, and an
# object's annotations together may hold 256 KiB: descriptions count toward it.
ANNOTATIONS_LIMIT = 256 * 1024


@pytest.mark.parametrize("kind", PLURALS)
def test_crds_fit_in_a_client_side_apply_annotation(kind: str) -> None:
    size = len(json.dumps(crd(kind), separators=(",", ":")).encode())
    assert size < ANNOTATIONS_LIMIT, f"{kind}: the CRD is {size} bytes as JSON"


# The type name of the Python value for each JSON type, as `compile_rule` takes it.
JSON_TO_PYTHON = {
    "string": "str",
    "object": "dict",
    "array": "list",
    "integer": "int",
    "boolean": "bool",
}


@pytest.mark.parametrize("kind", PLURALS)
def test_cel_rules_compile_in_plain_cel(kind: str) -> None:
    """Standard CEL only (no Kubernetes library), so this file can evaluate them too."""
    found = list(rules(schema(kind)))
    for entry in found:
        compile_rule(entry["rule"], JSON_TO_PYTHON[entry["type"]])
    assert found, f"{kind}: no CEL rule found"


def test_every_cel_rule_of_the_generator_is_in_a_crd_and_compiled_above() -> None:
    """The rule tables are the count: each rule they declare is found (and so compiled) in a
    CRD, so a new rule needs no number changed here."""
    generator()
    tables = sys.modules["_crd_rules"]
    every = (*tables.AFTER_VALIDATORS.values(), *tables.DECORATED.values())
    declared = {rule for entry in every for rule, _ in entry.cel}
    found = {entry["rule"] for kind in PLURALS for entry in rules(schema(kind))}
    assert declared, "the rule tables declare no CEL rule"
    assert declared <= found, f"declared but in no CRD: {sorted(declared - found)}"


def _names(errors: list[str], field: str) -> bool:
    """Whether a loader message is about `field` (`file: Kind ns/name: field: why`)."""
    return any(f": {field}: " in error for error in errors)


@pytest.mark.parametrize(
    ("where", "document"), example_documents(), ids=[w for w, _ in example_documents()]
)
def test_every_example_is_admitted_and_loads(
    where: str, document: dict[str, Any], tmp_path: Path
) -> None:
    assert admit(document["kind"], document) == [], where
    assert loader_errors(document, tmp_path) == [], where


def test_the_examples_hold_both_kinds() -> None:
    kinds = sorted({document["kind"] for _, document in example_documents()})
    assert kinds == ["GatewayBackend", "GatewayPolicy"]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.name)
def test_refused_by_the_schema_and_by_the_loader(case: Case, tmp_path: Path) -> None:
    document = case.document()
    refusals = admit(case.kind, document)
    assert any(r.path == case.field for r in refusals), (case.field, refusals)
    assert {r.status for r in refusals} == {case.status}, refusals
    errors = loader_errors(document, tmp_path)
    assert _names(errors, case.field), (case.field, errors)


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.name)
def test_accepted_by_the_schema_and_by_the_loader(case: Case, tmp_path: Path) -> None:
    document = case.document()
    assert admit(case.kind, document) == []
    assert loader_errors(document, tmp_path) == []


@pytest.mark.parametrize("case", CONTROLLER_ONLY, ids=lambda c: c.name)
def test_left_to_the_controller(case: Case, tmp_path: Path) -> None:
    document = case.document()
    assert admit(case.kind, document) == []
    errors = loader_errors(document, tmp_path)
    assert _names(errors, case.field), (case.field, errors)


@pytest.mark.parametrize("known", DIVERGENCES, ids=lambda d: d.case.name)
def test_known_divergences_are_still_what_they_were(known: Divergence, tmp_path: Path) -> None:
    """When one of these fails, a model changed: move the case to the table it belongs in."""
    case = known.case
    refusals = admit(case.kind, case.document())
    assert (refusals == []) is known.server_admits, (known.why, refusals)
    if refusals:
        assert any(r.path == case.field for r in refusals), refusals
    errors = loader_errors(case.document(), tmp_path)
    assert (errors == []) is known.loader_accepts, (known.why, errors)


def test_case_names_are_unique_object_names() -> None:
    cases = [*REFUSED, *ACCEPTED, *CONTROLLER_ONLY, *(d.case for d in DIVERGENCES)]
    names = [(c.kind, c.name) for c in cases]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", c.name) for c in cases)
