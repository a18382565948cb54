"""The structural schema of a pydantic model, field by field, with the descriptions taken from
the docstrings under the fields (gen_crds)."""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import sys
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import annotated_types
from _crd_rules import AFTER_VALIDATORS, DECORATED, Rule, Schema
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from mcp_oauth_gateway.provider_kinds import ProviderKind


class GeneratorError(Exception):
    """The models use something this generator does not know how to express."""


@dataclass(slots=True)
class Walk:
    """Which validator entries the walk used, to find entries no model needs any more."""

    used: set[object] = field(default_factory=set)
    controller: list[str] = field(default_factory=list)

    def apply(self, node: Schema, key: object, rule: Rule) -> None:
        self.used.add(key)
        node.update(rule.keywords)
        if rule.cel:
            node.setdefault("x-kubernetes-validations", []).extend(
                {"rule": r, "message": m} for r, m in rule.cel
            )
        if rule.controller and rule.controller not in self.controller:
            self.controller.append(rule.controller)


def _constrain(node: Schema, metadata: Iterable[object], walk: Walk, where: str) -> Schema:
    """Add the bounds and validators of `Annotated[...]` metadata to `node`."""
    noun = {"array": "Items", "object": "Properties"}.get(node.get("type", ""), "Length")
    for item in metadata:
        if isinstance(item, FieldInfo):
            _constrain(node, item.metadata, walk, where)
        elif isinstance(item, annotated_types.MinLen):
            node[f"min{noun}"] = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            node[f"max{noun}"] = item.max_length
        elif isinstance(item, annotated_types.Ge):
            node["minimum"] = item.ge
        elif isinstance(item, annotated_types.Le):
            node["maximum"] = item.le
        elif isinstance(item, AfterValidator) and item.func in AFTER_VALIDATORS:
            walk.apply(node, item.func, AFTER_VALIDATORS[item.func])
        else:
            raise GeneratorError(
                f"{where}: no schema for {item!r}; add it to tools/gen_crds.py "
                "(AFTER_VALIDATORS, or _constrain for a new kind of bound)"
            )
    return node


def _literal(values: tuple[object, ...], where: str) -> Schema:
    kinds = {type(v) for v in values}
    if kinds == {str}:
        return {"type": "string", "enum": list(values)}
    raise GeneratorError(f"{where}: Literal of {kinds} is not supported")


_SCALARS: dict[type, Schema] = {str: {"type": "string"}, int: {"type": "integer"}}
_SCALARS[bool] = {"type": "boolean"}
# Its spellings (aliases included) come from the field's validator rule.
_SCALARS[ProviderKind] = {"type": "string"}


def schema_for(tp: Any, walk: Walk, where: str) -> Schema:
    """The structural schema of one annotation (`X | None` is X: None means omitted)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _constrain(schema_for(args[0], walk, where), args[1:], walk, where)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) != 1:
            raise GeneratorError(f"{where}: unions other than `X | None` are not supported")
        return schema_for(present[0], walk, where)
    if origin is typing.Literal:
        return _literal(args, where)
    if origin is list:
        items = schema_for(args[0], walk, f"{where}[]")
        if items.get("type") == "object" and not items.get("description"):
            raise GeneratorError(
                f"{where}[]: {args[0].__name__} has no docstring; write one in "
                f"{args[0].__module__} (it describes each item of the list)"
            )
        return {"type": "array", "items": items}
    if origin is dict:
        return _map_schema(args[0], args[1], walk, where)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return object_schema(tp, walk, where)
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        return _literal(tuple(member.value for member in tp), where)
    raise GeneratorError(f"{where}: no schema for the type {tp!r}")


def _map_schema(key: Any, value: Any, walk: Walk, where: str) -> Schema:
    """A map: structural schemas cannot constrain keys, so a key pattern becomes a CEL rule."""
    node: Schema = {
        "type": "object",
        "additionalProperties": schema_for(value, walk, f"{where}{{}}"),
    }
    if key is str:
        return node
    keys = schema_for(key, walk, f"{where} keys")
    pattern, unknown = keys.pop("pattern", None), set(keys) - {"type", "maxLength", "minLength"}
    if keys.get("type") != "string" or pattern is None or unknown:
        raise GeneratorError(f"{where}: map keys can only be strings with a pattern")
    node["x-kubernetes-validations"] = [
        {"rule": f"self.all(k, k.matches(r'{pattern}'))", "message": f"keys must match {pattern}"}
    ]
    return node


def _default(info: FieldInfo) -> object:
    """The default worth writing into the schema, or None.

    Scalars and non-empty lists of scalars only: an omitted optional field, an empty list and
    a nested object mean the same to the loader as their absence, and leaving them out keeps
    stored objects as close as possible to what was applied.
    """
    value = info.get_default(call_default_factory=True)
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _field_docstrings(module: types.ModuleType) -> dict[tuple[str, str], str]:
    """(class, field) → the docstring written under the field in the module's source.

    Read here rather than by pydantic (`use_attribute_docstrings`), which costs every gateway
    process ~50 ms at import for text only the CRDs use.
    """
    found: dict[tuple[str, str], str] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt, doc in itertools.pairwise(node.body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant)
                and isinstance(doc.value.value, str)
            ):
                found[node.name, stmt.target.id] = doc.value.value
    return found


@functools.cache
def _docstrings_of(module_name: str) -> dict[tuple[str, str], str]:
    """The field docstrings of one module (the resources package's, or a test's own models)."""
    return _field_docstrings(sys.modules[module_name])


def field_text(model: type[BaseModel], name: str) -> str | None:
    """What describes a field: its `Field(description=...)`, else the docstring under it in the
    class that declares it last (a subclass that only narrows a field's type keeps the text of
    the model it extends)."""
    text = model.model_fields[name].description
    for owner in model.__mro__:
        if text is not None or owner is BaseModel:
            break
        if issubclass(owner, BaseModel) and name in inspect.get_annotations(owner):
            text = _docstrings_of(owner.__module__).get((owner.__qualname__, name))
    return text


def prose(text: str) -> str:
    """A docstring as one line: `kubectl explain` wraps it to the terminal itself."""
    return " ".join(text.split())


def described(node: Schema, text: str | None, where: str) -> Schema:
    """`node` with `text` (a field's docstring) as its description, written first.

    A description already on an object node is its model's docstring, which the field's
    replaces; on any other node it is a validator's note (`Rule` keywords), which follows it.
    """
    own = node.pop("description", None)
    if text and own and node.get("type") != "object":
        text = f"{text} {own}"
    text = text or own
    if not text:
        raise GeneratorError(
            f"{where}: no description; write a docstring under the field in "
            "its model's module in src/mcp_oauth_gateway/resources/ (what it means, its "
            "default, its form)"
        )
    return {"description": prose(text), **node}


def object_schema(model: type[BaseModel], walk: Walk, where: str) -> Schema:
    """The schema of one model: its aliased fields, required ones, defaults, validators and
    descriptions."""
    if model.model_config.get("extra") != "forbid":
        raise GeneratorError(f"{where}: {model.__name__} does not forbid unknown fields")
    properties: Schema = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        node = _constrain(
            schema_for(info.annotation, walk, f"{where}.{alias}"),
            info.metadata,
            walk,
            f"{where}.{alias}",
        )
        if info.is_required():
            required.append(alias)
        elif (default := _default(info)) is not None:
            node["default"] = default
        properties[alias] = described(node, field_text(model, name), f"{where}.{alias}")
    schema: Schema = {"type": "object", "properties": properties}
    if model.__doc__:
        schema = {"description": prose(model.__doc__), **schema}
    if required:
        schema["required"] = required
    _apply_decorators(model, schema, walk, where)
    return schema


def _apply_decorators(model: type[BaseModel], schema: Schema, walk: Walk, where: str) -> None:
    """Express the model's `@field_validator`s and `@model_validator`s through `DECORATED`."""
    decorators = model.__pydantic_decorators__
    aliases = {name: info.alias or name for name, info in model.model_fields.items()}
    if decorators.validators or decorators.root_validators:
        raise GeneratorError(f"{where}: {model.__name__} uses pydantic v1 validators")
    for name, decorator in decorators.field_validators.items():
        key, rule = _rule_for(model, name, where)
        for field_name in decorator.info.fields:
            walk.apply(schema["properties"][aliases[field_name]], key, rule)
    for name in decorators.model_validators:
        walk.apply(schema, *_rule_for(model, name, where))


def _rule_for(model: type[BaseModel], name: str, where: str) -> tuple[object, Rule]:
    """The entry of a validator, under the model that defines it (a subclass inherits it)."""
    for owner in model.__mro__:
        rule = DECORATED.get((owner, name))
        if rule is not None:
            return (owner, name), rule
    raise GeneratorError(
        f"{where}: {model.__name__}.{name} has no entry in DECORATED in tools/_crd_rules.py; "
        "express it there (schema keywords or CEL), or describe it as a controller check"
    )
