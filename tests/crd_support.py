"""The CRDs of deploy/crds and the API server's create replayed without a server (the case
tables are crd_cases)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml
from cel_expr_python import cel
from jsonschema import ValidationError, validators
from openapi_schema_validator import OAS30Validator

from support import ROOT

CRD_DIR = ROOT / "deploy" / "crds"
GROUP = "mcp-oauth-gateway.dev"
PLURALS = {"GatewayPolicy": "gatewaypolicies", "GatewayBackend": "gatewaybackends"}
CRD_FILES = {kind: CRD_DIR / f"{plural}.{GROUP}.yaml" for kind, plural in PLURALS.items()}
# Cluster-scoped, without status: tested on its own (tests/unit/test_class_parameters.py).
CLUSTER_CRD_FILES = {
    "GatewayClassParameters": CRD_DIR / f"gatewayclassparameters.{GROUP}.yaml",
}

Schema = dict[str, Any]


@cache
def crd(kind: str) -> Schema:
    document: Schema = yaml.safe_load(CRD_FILES[kind].read_text(encoding="utf-8"))
    return document


def version(kind: str) -> Schema:
    only: Schema
    (only,) = crd(kind)["spec"]["versions"]
    return only


def schema(kind: str) -> Schema:
    root: Schema = version(kind)["schema"]["openAPIV3Schema"]
    return root


def node_at(kind: str, path: str) -> Schema:
    """The schema node of a field path (`[...]`, index or filter, steps into items)."""
    node = schema(kind)
    for part in re.sub(r"\[[^\]]*\]", ".[]", path).strip(".").split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


# --- the API server, replayed -------------------------------------------------------------------


def re2_search(pattern: str, text: str) -> bool:
    """`pattern` searched as RE2 does: its `$` is the end of the text, Python's `$` also matches
    before a final newline."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, text) is not None


def _pattern(validator: Any, pattern: str, instance: object, _schema: Schema) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not re2_search(pattern, str(instance)):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


Validator = validators.extend(OAS30Validator, {"pattern": _pattern})


@dataclass(frozen=True, slots=True)
class Refusal:
    """One reason the API server refuses a document: the field, why, and the HTTP status."""

    path: str
    message: str
    status: int


def join_path(path: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{path}[{part}]"
    return f"{path}.{part}" if path else part


def _children(node: Schema, value: object, path: str) -> Iterator[tuple[Schema, object, str]]:
    """The (schema, value, path) of every child of `value` that the schema describes."""
    if isinstance(value, dict):
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, child in value.items():
            sub = properties.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                yield sub, child, join_path(path, key)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for index, child in enumerate(value):
            yield node["items"], child, join_path(path, index)


def unknown_fields(node: Schema, value: object, path: str = "") -> Iterator[str]:
    """Fields strict decoding refuses: in an object node with `properties`, any other key."""
    if isinstance(value, dict) and "properties" in node and path != "metadata":
        for key in value:
            if key not in node["properties"]:
                yield join_path(path, key)
    for sub, child, child_path in _children(node, value, path):
        yield from unknown_fields(sub, child, child_path)


def prune_and_default(node: Schema, value: object) -> object:
    """Drop nulls the schema does not allow, then fill in defaults (in the server's order)."""
    if isinstance(value, dict) and "properties" in node:
        for key, sub in node["properties"].items():
            if key in value and value[key] is None and not sub.get("nullable"):
                del value[key]
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
    for sub, child, _ in _children(node, value, ""):
        prune_and_default(sub, child)
    return value


# The CEL type of `self` for each JSON value type (by Python type name).
_CEL_TYPES = {
    "str": cel.Type.STRING,
    "dict": cel.Type.Map(cel.Type.STRING, cel.Type.DYN),
    "list": cel.Type.List(cel.Type.DYN),
    "int": cel.Type.INT,
    "bool": cel.Type.BOOL,
}


@cache
def compile_rule(rule: str, python_type: str) -> Any:
    """A CRD rule compiled with the standard CEL environment, `self` typed as the node is."""
    return cel.NewEnv(variables={"self": _CEL_TYPES[python_type]}).compile(rule)


def cel_refusals(node: Schema, value: object, path: str = "") -> Iterator[Refusal]:
    """The CEL rules (`x-kubernetes-validations`) that do not hold, at their node's path."""
    if type(value).__name__ in _CEL_TYPES:
        for entry in node.get("x-kubernetes-validations", []):
            program = compile_rule(entry["rule"], type(value).__name__)
            result = program.eval(data={"self": value})
            if result.type() != cel.Type.BOOL or result.value() is not True:
                yield Refusal(path, entry["message"], 422)
    for sub, child, child_path in _children(node, value, path):
        yield from cel_refusals(sub, child, child_path)


def _schema_refusal(error: ValidationError) -> Refusal:
    path = ""
    for part in error.absolute_path:
        path = join_path(path, part)
    if error.validator == "required":
        missing = re.match(r"'(.+)' is a required property", error.message)
        assert missing, error.message
        path = join_path(path, missing.group(1))
    return Refusal(path, error.message, 422)


def admit(kind: str, document: Mapping[str, Any]) -> list[Refusal]:
    """Why the API server refuses to create `document` (empty: it is created)."""
    root = schema(kind)
    unknown = list(unknown_fields(root, document))
    if unknown:  # strict decoding fails before any validation
        return [Refusal(path, "unknown field", 400) for path in unknown]
    stored = prune_and_default(root, copy.deepcopy(dict(document)))
    refusals = [_schema_refusal(e) for e in Validator(root).iter_errors(stored)]
    return refusals + list(cel_refusals(root, stored)) + list(list_map_refusals(root, stored))


def list_map_refusals(node: Schema, value: object, path: str = "") -> Iterator[Refusal]:
    """Items of an `x-kubernetes-list-type: map` list that repeat an earlier item's keys, named
    as the API server names them (`list[i]`)."""
    if isinstance(value, list) and node.get("x-kubernetes-list-type") == "map":
        keys = node["x-kubernetes-list-map-keys"]
        seen: set[tuple[object, ...]] = set()
        for index, item in enumerate(value):
            key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else ()
            if key in seen:
                yield Refusal(join_path(path, index), "Duplicate value", 422)
            seen.add(key)
    for sub, child, child_path in _children(node, value, path):
        yield from list_map_refusals(sub, child, child_path)


# --- a schema's parts -----------------------------------------------------------------------------

JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


def subschemas(node: Schema, path: str) -> Iterator[tuple[Schema, str, bool]]:
    """(schema, path, inside a junctor) of every direct sub-schema."""
    for key in JUNCTORS:
        value = node.get(key)
        for sub in [value] if isinstance(value, dict) else value or []:
            yield sub, f"{path}({key})", True
    for name, sub in node.get("properties", {}).items():
        yield sub, join_path(path, name), False
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            yield node[key], path + suffix, False


def rules(node: Schema, path: str = "") -> Iterator[dict[str, str]]:
    """Every CEL rule of a schema, each with the JSON type of the node it is on."""
    for entry in node.get("x-kubernetes-validations", []):
        yield {**entry, "type": node["type"]}
    for sub, sub_path, _ in subschemas(node, path):
        yield from rules(sub, sub_path)
