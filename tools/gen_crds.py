#!/usr/bin/env python3
"""Generate the CustomResourceDefinitions of GatewayPolicy and GatewayBackend from the models.

    .venv/bin/python tools/gen_crds.py           write deploy/crds/*.yaml
    .venv/bin/python tools/gen_crds.py --check   exit 1 when a committed CRD is out of date

The spec schemas are read from the pydantic models in `mcp_oauth_gateway.resources.models`
(camelCase aliases, Literal enums, length and number bounds, required fields, scalar defaults),
so the API server and the file loader accept the same documents. Their descriptions, which
`kubectl explain` shows, are the docstrings under the fields (a model's own docstring for a
list's items, or for a field without one); a field with neither stops the generator.

Validators are code, not schema: every one the two kinds use must have an entry in
`_AFTER_VALIDATORS` or `_DECORATED` below, saying how it is expressed (an OpenAPI keyword when
one can say it, because editors and offline linters read those too; a CEL rule only for what
OpenAPI cannot say) or that only the controller checks it. A validator without an entry, or an
entry no model uses any more, stops the generator, so the CRDs cannot silently drift from the
models.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import itertools
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import AfterValidator, BaseModel
from pydantic.fields import FieldInfo

from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.resources import fields, models

ROOT = Path(__file__).resolve().parent.parent
RESOURCES_PACKAGE = models.__name__.rpartition(".")[0] + "."
OUT_DIR = ROOT / "deploy" / "crds"
# The Helm chart installs the same CRDs from its own crds/ (Helm reads no file outside a chart).
CHART_CRDS = ROOT / "deploy" / "helm" / "mcp-oauth-gateway" / "crds"
GROUP = models.POLICY_API_GROUP
VERSION = "v1alpha1"
REGENERATE = ".venv/bin/python tools/gen_crds.py"

Schema = dict[str, Any]

# Kubernetes evaluates `pattern` with Go's RE2: no look-around, `$` is the end of the text.
# The models' duration regex uses `(?!s)` (redundant once the pattern is anchored: after the
# minutes group only a digit or the end can follow) and `\d` (Unicode digits in Python).
DURATION_PATTERN = r"^(?:[0-9]{1,5}h)?(?:[0-9]{1,5}m)?(?:[0-9]{1,5}s)?(?:[0-9]{1,5}ms)?$"
# The longest string DURATION_PATTERN matches; bounding it keeps the CEL rules' cost small.
DURATION_MAX_LENGTH = 25
# Kubernetes matches `pattern` anywhere in the value: anchor the model's whole-value pattern.
HEADER_NAME_PATTERN = f"^{fields._HEADER_NAME.pattern}$"
DOMAIN_PATTERN = f"^{models.DOMAIN.pattern}$"
# RFC 6749 scope-token: printable ASCII but space, `"` and backslash.
SCOPE_PATTERN = r"^[!#-\[\]-~]{1,256}$"
PROTECTED_HEADERS_PATTERN = "(?i)^(" + "|".join(sorted(fields._PROTECTED)) + ")$"


@dataclass(frozen=True, slots=True)
class Rule:
    """How one model validator reaches the CRD: schema keywords, CEL rules, controller notes."""

    keywords: Mapping[str, Any] = field(default_factory=dict)
    cel: tuple[tuple[str, str], ...] = ()  # (rule, message); messages are the loader's words
    controller: str = ""  # what only the controller checks (listed in the CRD's comment)


def _http_url_rule(field: str) -> Rule:
    # The models' own grammar (HTTP_URL) as the pattern; what only the WHATWG parser can say
    # (a host it refuses, a port out of range) is the controller's.
    return Rule(
        keywords={"pattern": f"^{models.HTTP_URL.pattern}$"},
        controller=f"{field}: an http(s) URL whose host and port the WHATWG URL parser reads",
    )


def _duration_rule(bound: str, message: str) -> Rule:
    # The guard keeps a malformed duration to the pattern's error instead of a CEL
    # evaluation error on top of it.
    return Rule(
        keywords={"pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH},
        cel=((f"!self.matches('{DURATION_PATTERN}') || duration(self) {bound}", message),),
    )


def _no_refresh_scope(where: str) -> Rule:
    message = " ".join((fields.not_refresh_scope.__doc__ or "").split())
    return Rule(
        cel=(
            (
                f"!('{models.REFRESH_SCOPE}' in self)",
                f"{models.REFRESH_SCOPE} does not belong in {where}: {message}",
            ),
        )
    )


# Validators attached to a type with `Annotated[..., AfterValidator(f)]`, keyed by `f`.
_AFTER_VALIDATORS: dict[Callable[..., Any], Rule] = {
    fields._starts_with_slash: Rule(keywords={"pattern": "^/"}),
    fields._scope_token: Rule(keywords={"pattern": SCOPE_PATTERN}),
    fields.domain: Rule(keywords={"pattern": DOMAIN_PATTERN}),
    # Not CEL: a rule on these unbounded strings in unbounded lists exceeds the API server's
    # cost budget (it needs maxLength and maxItems the models do not have). The server words a
    # `not` failure poorly, so the description says what it means (`kubectl explain`).
    fields._header_name: Rule(
        keywords={
            "description": "An HTTP header name, other than those the gateway manages itself: "
            + ", ".join(sorted(fields._PROTECTED))
            + " (in any case; the API server reports one as `must not validate the schema "
            "(not)`).",
            "pattern": HEADER_NAME_PATTERN,
            "not": {"pattern": PROTECTED_HEADERS_PATTERN},
        }
    ),
    fields._redis_url: Rule(keywords={"pattern": f"^{models.REDIS_URL.pattern}$"}),
}

# `@field_validator` and `@model_validator` methods, keyed by (model, method name).
_DECORATED: dict[tuple[type[BaseModel], str], Rule] = {
    (models.RemoteJwks, "_duration"): _duration_rule(
        ">= duration('1s')", "cacheDuration must be at least 1s"
    ),
    (models.RemoteJwks, "_url"): _http_url_rule("jwks.remote.url"),
    (models.RemoteJwks, "_one_source"): Rule(
        cel=(
            ("has(self.backendRef) != has(self.url)", "set exactly one of backendRef or url"),
            (
                "!has(self.backendRef) || has(self.jwksPath)",
                "jwksPath is required with backendRef (the path of the JWKS document on that "
                "service, e.g. /application/o/<slug>/jwks/ for authentik)",
            ),
            (
                "!(has(self.url) && has(self.jwksPath))",
                "jwksPath cannot be combined with url; put the path in the url",
            ),
        )
    ),
    (models.Jwks, "_one_source"): Rule(
        cel=(("has(self.remote) != has(self.inline)", "set exactly one of remote or inline"),)
    ),
    (models.ResourceMetadata, "_resource"): _http_url_rule("mcp.resourceMetadata.resource"),
    (models.ResourceMetadata, "_minimal"): _no_refresh_scope("scopesSupported"),
    (models.Scopes, "_required"): _no_refresh_scope("scopes.required"),
    (models.McpScopeRule, "_required"): _no_refresh_scope("required"),
    (models.JwtProvider, "_known_kind"): Rule(keywords={"enum": list(models.PROVIDER_ALIASES)}),
    (models.JwtProvider, "_issuer_url"): Rule(
        # What the API server can say of it: http(s), a host without user-info, no query or
        # fragment; the controller reads the rest as the WHATWG URL parser does.
        keywords={"pattern": r"^https?://[^/?#@\s\\]+(/[^?#\s\\]*)?$"},
        controller="jwtAuthentication.providers[].issuer: an absolute http(s) URL (WHATWG) "
        "without user information, query or fragment",
    ),
    (models.SecretSource, "_env_name"): Rule(keywords={"pattern": f"^{fields.ENV_NAME.pattern}$"}),
    (models.SecretSource, "_one_source"): Rule(
        cel=(("has(self.file) != has(self.env)", "set exactly one of file or env"),)
    ),
    (models.TokenExchange, "_resource"): _http_url_rule("credentials.tokenExchange.resource"),
    (models.TokenExchange, "_target"): Rule(
        cel=(
            (
                "has(self.audience) || has(self.resource)",
                "set audience (the backend's client id at the provider) or resource (its "
                "URL): the exchanged token must be for the backend",
            ),
        )
    ),
    (models.BackendCredentialsSpec, "_one_mode"): Rule(
        cel=(
            (
                "[has(self.tokenExchange), has(self.passthrough) && self.passthrough, "
                "has(self.secretHeader)].filter(x, x).size() == 1",
                "set exactly one of tokenExchange, passthrough or secretHeader",
            ),
        )
    ),
    (models.McpAuthentication, "_known_provider"): Rule(
        keywords={"enum": list(models.PROVIDER_ALIASES)}
    ),
    (models.RateLimitSpec, "_window"): _duration_rule(
        "> duration('0s')", "window must be longer than 0"
    ),
}


class GeneratorError(Exception):
    """The models use something this generator does not know how to express."""


@dataclass(slots=True)
class _Walk:
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


def _constrain(node: Schema, metadata: Iterable[object], walk: _Walk, where: str) -> Schema:
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
        elif isinstance(item, AfterValidator) and item.func in _AFTER_VALIDATORS:
            walk.apply(node, item.func, _AFTER_VALIDATORS[item.func])
        else:
            raise GeneratorError(
                f"{where}: no schema for {item!r}; add it to tools/gen_crds.py "
                "(_AFTER_VALIDATORS, or _constrain for a new kind of bound)"
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


def _schema_for(tp: Any, walk: _Walk, where: str) -> Schema:
    """The structural schema of one annotation (`X | None` is X: None means omitted)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _constrain(_schema_for(args[0], walk, where), args[1:], walk, where)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) != 1:
            raise GeneratorError(f"{where}: unions other than `X | None` are not supported")
        return _schema_for(present[0], walk, where)
    if origin is typing.Literal:
        return _literal(args, where)
    if origin is list:
        items = _schema_for(args[0], walk, f"{where}[]")
        if items.get("type") == "object" and not items.get("description"):
            raise GeneratorError(
                f"{where}[]: {args[0].__name__} has no docstring; write one in "
                f"{args[0].__module__} (it describes each item of the list)"
            )
        return {"type": "array", "items": items}
    if origin is dict:
        return _map_schema(args[0], args[1], walk, where)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _object_schema(tp, walk, where)
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    raise GeneratorError(f"{where}: no schema for the type {tp!r}")


def _map_schema(key: Any, value: Any, walk: _Walk, where: str) -> Schema:
    """A map: structural schemas cannot constrain keys, so a key pattern becomes a CEL rule."""
    node: Schema = {
        "type": "object",
        "additionalProperties": _schema_for(value, walk, f"{where}{{}}"),
    }
    if key is str:
        return node
    keys = _schema_for(key, walk, f"{where} keys")
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
    """The field docstrings of one module of the resources package."""
    return _field_docstrings(sys.modules[module_name])


def _field_text(model: type[BaseModel], name: str) -> str | None:
    """What describes a field: its `Field(description=...)`, else its docstring."""
    text = model.model_fields[name].description
    if text is None and model.__module__.startswith(RESOURCES_PACKAGE):
        text = _docstrings_of(model.__module__).get((model.__qualname__, name))
    return text


def _prose(text: str) -> str:
    """A docstring as one line: `kubectl explain` wraps it to the terminal itself."""
    return " ".join(text.split())


def _described(node: Schema, text: str | None, where: str) -> Schema:
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
    return {"description": _prose(text), **node}


def _object_schema(model: type[BaseModel], walk: _Walk, where: str) -> Schema:
    """The schema of one model: its aliased fields, required ones, defaults, validators and
    descriptions."""
    if model.model_config.get("extra") != "forbid":
        raise GeneratorError(f"{where}: {model.__name__} does not forbid unknown fields")
    properties: Schema = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        node = _constrain(
            _schema_for(info.annotation, walk, f"{where}.{alias}"),
            info.metadata,
            walk,
            f"{where}.{alias}",
        )
        if info.is_required():
            required.append(alias)
        elif (default := _default(info)) is not None:
            node["default"] = default
        properties[alias] = _described(node, _field_text(model, name), f"{where}.{alias}")
    schema: Schema = {"type": "object", "properties": properties}
    if model.__doc__:
        schema = {"description": _prose(model.__doc__), **schema}
    if required:
        schema["required"] = required
    _apply_decorators(model, schema, walk, where)
    return schema


def _apply_decorators(model: type[BaseModel], schema: Schema, walk: _Walk, where: str) -> None:
    """Express the model's `@field_validator`s and `@model_validator`s through `_DECORATED`."""
    decorators = model.__pydantic_decorators__
    aliases = {name: info.alias or name for name, info in model.model_fields.items()}
    if decorators.validators or decorators.root_validators:
        raise GeneratorError(f"{where}: {model.__name__} uses pydantic v1 validators")
    for name, decorator in decorators.field_validators.items():
        rule = _rule_for(model, name, where)
        for field_name in decorator.info.fields:
            walk.apply(schema["properties"][aliases[field_name]], (model, name), rule)
    for name in decorators.model_validators:
        walk.apply(schema, (model, name), _rule_for(model, name, where))


def _rule_for(model: type[BaseModel], name: str, where: str) -> Rule:
    rule = _DECORATED.get((model, name))
    if rule is None:
        raise GeneratorError(
            f"{where}: {model.__name__}.{name} has no entry in _DECORATED in tools/gen_crds.py; "
            "express it there (schema keywords or CEL), or describe it as a controller check"
        )
    return rule


# --- status ----------------------------------------------------------------------------------

# metav1.Condition, as the Gateway API CRDs write it (the words are ours).
_CONDITION: Schema = {
    "description": "One aspect of the object's state, as the controller last saw it.",
    "type": "object",
    "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {
            "description": "When `status` last changed (RFC 3339); it stays while the status does.",
            "type": "string",
            "format": "date-time",
        },
        "message": {
            "description": "What the controller found, in words; for a problem, what is wrong "
            "and where.",
            "type": "string",
            "maxLength": 32768,
        },
        "observedGeneration": {
            "description": "The `metadata.generation` the condition was computed for; lower than "
            "the object's means the controller has not caught up with its latest change.",
            "type": "integer",
            "format": "int64",
            "minimum": 0,
        },
        "reason": {
            "description": "Why the condition has its status, as one CamelCase word such as "
            "`Valid` or `Invalid`.",
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "status": {
            "description": "`True`, `False` or `Unknown`.",
            "type": "string",
            "enum": ["True", "False", "Unknown"],
        },
        "type": {
            "description": "What the condition is about, e.g. `Accepted`.",
            "type": "string",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
    },
}

_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _conditions(description: str, min_items: int = 0) -> Schema:
    schema: Schema = {
        "description": description,
        "type": "array",
        "maxItems": 8,
        "items": _CONDITION,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }
    if min_items:
        schema["minItems"] = min_items
    return schema


_POLICY_CONDITIONS = (
    "`Accepted`: reason `Valid`, or `Invalid` naming every problem (the targeted routes then "
    "answer 503). `Attached`: reason `Attached`, or `TargetNotFound`, `Pending`, `Conflicted`. "
    "`ResolvedRefs`: the signing keys; `KeysetUnavailable` until fetched (the routes serve "
    "nobody), `KeysetStale` while refreshes fail."
)

# GEP-713 PolicyAncestorStatus: the Gateway a targeted route is attached to, per controller.
_ANCESTOR_REF: Schema = {
    "description": "The Gateway a targeted route is attached to.",
    "type": "object",
    "required": ["name"],
    "properties": {
        "group": {
            "description": "API group of the Gateway; default `gateway.networking.k8s.io`.",
            "type": "string",
            "default": models.GATEWAY_API_GROUP,
            "maxLength": 253,
            "pattern": "^$|" + _DNS_SUBDOMAIN,
        },
        "kind": {
            "description": "Kind of the ancestor: `Gateway`, the default.",
            "type": "string",
            "default": "Gateway",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$",
        },
        "name": {
            "description": "Name of the Gateway.",
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
        },
        "namespace": {
            "description": "Namespace of the Gateway.",
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        },
        "sectionName": {
            "description": "One listener of the Gateway, when the entry is about it alone.",
            "type": "string",
            "minLength": 1,
            "maxLength": 253,
            "pattern": _DNS_SUBDOMAIN,
        },
        "port": {
            "description": "One port of the Gateway, when the entry is about it alone.",
            "type": "integer",
            "format": "int32",
            "minimum": 1,
            "maximum": 65535,
        },
    },
}

_ANCESTORS: Schema = {
    "description": "One entry per controller and Gateway serving a targeted route (GEP-713); "
    "entries of other controllers are left as they are.",
    "type": "array",
    "maxItems": 16,
    "x-kubernetes-list-type": "atomic",
    "items": {
        "description": "The policy's status at one Gateway.",
        "type": "object",
        "required": ["ancestorRef", "controllerName", "conditions"],
        "properties": {
            "ancestorRef": _ANCESTOR_REF,
            "controllerName": {
                "description": "The controller that wrote the entry, e.g. "
                "`mcp-oauth-gateway.dev/gateway-controller`.",
                "type": "string",
                "minLength": 1,
                "maxLength": 253,
                "pattern": _DNS_SUBDOMAIN[:-1] + r"\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$",
            },
            "conditions": _conditions(
                "The policy's conditions at this Gateway, as in `status.conditions`.", min_items=1
            ),
        },
    },
}


# --- the CRDs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kind:
    """One custom resource kind and how `kubectl get` shows it."""

    model: type[BaseModel]
    plural: str
    short_names: tuple[str, ...]
    description: str
    columns: tuple[Schema, ...]
    status: Schema

    @property
    def name(self) -> str:
        return self.model.__name__

    @property
    def file(self) -> Path:
        return OUT_DIR / f"{self.plural}.{GROUP}.yaml"


def _condition_column(condition: str) -> Schema:
    return {
        "name": condition,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{condition}")].status',
    }


_AGE: Schema = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_TARGET = ".spec.mcp.targets[0].static"

KINDS = (
    Kind(
        model=models.GatewayPolicy,
        plural="gatewaypolicies",
        short_names=("gwpol",),
        description="OAuth 2.0 for the MCP servers behind the HTTPRoutes it targets: JWT "
        "authentication, MCP OAuth discovery and client registration, CEL authorization, scopes, "
        "rate limits, and what the MCP server receives.",
        # ResolvedRefs too: Accepted and Attached are True for a policy whose keyset cannot be
        # fetched, which serves nobody.
        columns=(
            _condition_column("Accepted"),
            _condition_column("Attached"),
            _condition_column("ResolvedRefs"),
            _AGE,
        ),
        status={
            "description": "Written by the gateway's controller: the policy's conditions, and "
            "the same per Gateway that serves its routes.",
            "type": "object",
            "properties": {"conditions": _conditions(_POLICY_CONDITIONS), "ancestors": _ANCESTORS},
        },
    ),
    Kind(
        model=models.GatewayBackend,
        plural="gatewaybackends",
        short_names=("gwbe",),
        description="An MCP server that HTTPRoutes send traffic to, named in their backendRefs.",
        columns=(
            {"name": "Host", "type": "string", "jsonPath": f"{_TARGET}.host"},
            {"name": "Port", "type": "integer", "jsonPath": f"{_TARGET}.port"},
            {"name": "Path", "type": "string", "jsonPath": f"{_TARGET}.path"},
            _AGE,
        ),
        status={
            "description": "Written by the gateway's controller.",
            "type": "object",
            "properties": {
                "conditions": _conditions(
                    "`Accepted`: True naming the target, or False reason `Invalid` naming the "
                    "problem."
                )
            },
        },
    ),
)

# Checks of the control plane beyond the models (controlplane/policies.py); the loader accepts
# what fails them, so the schema does too, and the controller reports them as Accepted=False.
_POLICY_COMPILE_CHECKS = (
    "every CEL expression compiles (authorization and backend.mcp.authorization "
    "matchExpressions, backend.mcp.scopes[].match, transformation.request.set[].value, "
    "rateLimit.key)",
    "jwks.inline is a JWKS document; jwks.remote.backendRef names a Service the gateway "
    "can resolve",
    "several providers: distinct issuers, a loginHintDomains domain in one provider only, no "
    "mcp.provider in Facade mode, a clientId for each in Broker mode, and iss beside sub in what "
    "the backend is told (secretHeader.identity.claims, headers set from jwt.sub)",
    "traffic sets jwtAuthentication; authorization, scopes, backend.mcp, backend.credentials "
    "and a transformation that reads jwt need it",
    "backend.credentials: its secrets can be read, and jwtAuthentication.forwardToken is not "
    "set beside it",
    "provider ProviderB (Authentik): clientId is set and is one of the audiences, and the "
    "issuer ends with '/'",
    "authorizationServerMode Broker: provider and clientId are set, and broker.redisUrl when "
    "several processes serve; broker is set only in Broker mode",
)


def spec_schema(kind: Kind, walk: _Walk) -> Schema:
    """The schema of `spec`, from the model's `spec` field."""
    info = kind.model.model_fields["spec"]
    node = _schema_for(info.annotation, walk, "spec")
    return _described(node, _field_text(kind.model, "spec"), "spec")


def crd(kind: Kind, walk: _Walk) -> Schema:
    """The CustomResourceDefinition of one kind."""
    schema: Schema = {
        "description": kind.description,
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "description": f"The API version of the object: `{GROUP}/{VERSION}`.",
                "type": "string",
            },
            "kind": {"description": f"The object's kind: `{kind.name}`.", "type": "string"},
            # No description: the API server forbids anything but `type` here.
            "metadata": {"type": "object"},
            "spec": spec_schema(kind, walk),
            "status": kind.status,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        # The label kustomize gives every object of deploy/, here too: the Helm chart installs
        # these files as they are, and both installs must be the same objects.
        "metadata": {
            "name": f"{kind.plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "mcp-oauth-gateway"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind.name,
                "listKind": f"{kind.name}List",
                "plural": kind.plural,
                "singular": kind.name.lower(),
                "shortNames": list(kind.short_names),
                "categories": ["mcp-oauth-gateway"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": list(kind.columns),
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


_HEADER = """\
# Generated by tools/gen_crds.py from src/mcp_oauth_gateway/resources/models.py; do not edit.
# Regenerate: {regenerate}
#
# Unknown fields: the schema is structural, so the API server drops fields it does not know
# unless the client asks for strict field validation. `kubectl apply` asks (--validate=strict is
# its default) and fails naming the field, as the file loader does:
#   Error from server (BadRequest): error when creating "policy.yaml": {kind} in version
#   "{version}" cannot be handled as a {kind}: strict decoding error: unknown field "spec.foo"
# `kubectl apply --validate=warn`, and clients that send no fieldValidation, get the object
# created without the field and a warning; `--validate=false` drops it silently.
#
# Checked by the controller, not by this schema (reported as Accepted=False reason=Invalid):
{checks}
"""


def _comment(lines: Iterable[str]) -> str:
    wrapped = (
        textwrap.fill(line, 98, initial_indent="# - ", subsequent_indent="#   ") for line in lines
    )
    return "\n".join(wrapped) or "# - nothing beyond this schema"


class _Dumper(yaml.SafeDumper):
    """Writes a shared sub-schema out in full each time: no YAML anchors in a CRD."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def render() -> dict[Path, str]:
    """The text of every CRD file, by path."""
    walk = _Walk()
    out: dict[Path, str] = {}
    for kind in KINDS:
        start = len(walk.controller)
        document = crd(kind, walk)
        checks = walk.controller[start:]
        if kind.model is models.GatewayPolicy:
            checks = [*checks, *_POLICY_COMPILE_CHECKS]
        header = _HEADER.format(
            regenerate=REGENERATE, kind=kind.name, version=VERSION, checks=_comment(checks)
        )
        body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
        out[kind.file] = out[CHART_CRDS / kind.file.name] = header + "---\n" + body
    stale = [key for key in (*_AFTER_VALIDATORS, *_DECORATED) if key not in walk.used]
    if stale:
        raise GeneratorError(
            f"tools/gen_crds.py has rules for validators no model uses any more: {stale}"
        )
    return out


def stale_files(rendered: Mapping[Path, str]) -> list[Path]:
    """The CRD files whose committed text differs from the generator's."""
    return [
        path
        for path, text in rendered.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="only report CRDs that are out of date"
    )
    args = parser.parse_args(argv)
    rendered = render()
    stale = stale_files(rendered)
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
