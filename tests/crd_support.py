"""The CRDs of deploy/crds, the API server's create replayed without a server, and case tables."""

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

from support import EXAMPLES, ROOT

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


# --- documents ------------------------------------------------------------------------------------


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """Every GatewayPolicy and GatewayBackend under examples/, with where it came from."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            if isinstance(document, dict) and document.get("kind") in PLURALS:
                found.append((f"{path.relative_to(ROOT)}#{index}", document))
    return found


def base(kind: str) -> dict[str, Any]:
    """The provider-B example of `kind`: the document every case edits."""
    for where, document in example_documents():
        if "provider-b" in where and document["kind"] == kind:
            return copy.deepcopy(document)
    raise AssertionError(f"examples/provider-b has no {kind}")


DELETE = object()
_PART = re.compile(r"([A-Za-z_]+)|\[(\d+)\]")


def edit(document: dict[str, Any], path: str, value: object) -> None:
    """Set (DELETE: remove) the field at `spec.a.b[0].c`; objects on the way are created, and
    an index one past the end appends."""
    parts: list[str | int] = [int(index) if index else name for name, index in _PART.findall(path)]
    node: Any = document
    for part in parts[:-1]:
        if isinstance(part, str) and part not in node:
            node[part] = {}
        node = node[part]
    last = parts[-1]
    if value is DELETE:
        del node[last]
    elif isinstance(last, int) and last == len(node):
        node.append(copy.deepcopy(value))
    else:
        node[last] = copy.deepcopy(value)


@dataclass(frozen=True, slots=True)
class Case:
    """One document: the example of `kind` with `edits` applied, named `name` on the server."""

    name: str
    kind: str
    edits: tuple[tuple[str, object], ...] = ()
    field: str = ""  # the field both the API server and the loader name when they refuse
    status: int = 422  # what the API server answers a refused create: 422, or 400 (unknown field)

    def document(self) -> dict[str, Any]:
        document = base(self.kind)
        document["metadata"] = {"name": self.name, "namespace": "default"}
        for path, value in self.edits:
            edit(document, path, value)
        return document


def pol(name: str, field: str = "", *edits: tuple[str, object], status: int = 422) -> Case:
    return Case(name, "GatewayPolicy", edits, field, status)


def be(name: str, field: str = "", *edits: tuple[str, object], status: int = 422) -> Case:
    return Case(f"backend-{name}", "GatewayBackend", edits, field, status)


P = "spec.traffic.jwtAuthentication"
PR = f"{P}.providers[0]"
J = f"{PR}.jwks"
R = f"{J}.remote"
M = f"{P}.mcp"
A = "spec.traffic.authorization"
X = "spec.traffic.transformation.request"
L = "spec.traffic.rateLimit"
SC = "spec.traffic.scopes"
CR = "spec.backend.credentials"
SECRET_HEADER = {"header": "X-Api-Key", "value": {"env": "API_KEY"}}
SECRET_REF = {"name": "backend-keys", "key": "api-key.v1"}
B = "spec.backend.mcp.scopes"
T = "spec.mcp.targets[0]"
S = f"{T}.static"
URL = "https://idp.example/application/o/mcp/jwks/"
JWKS = '{"keys": []}'
TARGET = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "mcp"}
RULE = {"policy": {"matchExpressions": ["true"]}}
HEADER = {"name": "X-User", "value": "jwt.sub"}
SERVER = {"name": "mcp-server", "static": {"host": "127.0.0.1", "port": 8000}}


def _limit(**fields: object) -> tuple[str, object]:
    return (L, {"key": "jwt.sub", "requests": 10, **fields})


# URLs the schema refuses as the models do (issue 25, item 1: "not-a-url" was stored and the
# route lost its policy).
REFUSED_URLS = [
    pol("url-not-a-url", f"{R}.url", (R, {"url": "not a url"})),
    pol("url-not-http", f"{R}.url", (R, {"url": "ftp://idp.example/jwks"})),
    pol("url-no-slashes", f"{R}.url", (R, {"url": "http:idp.example/jwks"})),
    pol("url-user-info", f"{R}.url", (R, {"url": "http://user:pw@idp.example/jwks"})),
    pol("url-fragment", f"{R}.url", (R, {"url": "http://idp.example/jwks#k"})),
    pol("url-space", f"{R}.url", (R, {"url": "http://idp.example/j wks"})),
    pol(
        "resource-relative",
        f"{M}.resourceMetadata.resource",
        (f"{M}.resourceMetadata.resource", "127.0.0.1/mcp"),
    ),
    pol(
        "resource-fragment",
        f"{M}.resourceMetadata.resource",
        (f"{M}.resourceMetadata.resource", "http://a/mcp#x"),
    ),
    pol("broker-redis-url", f"{M}.broker.redisUrl", (f"{M}.broker", {"redisUrl": "http://r:6379"})),
    pol("limit-redis-url", f"{L}.redisUrl", _limit(redisUrl="http://127.0.0.1:6379")),
    pol("limit-redis-url-space", f"{L}.redisUrl", _limit(redisUrl=" redis://127.0.0.1:6379")),
]


# Refused by the schema (or its CEL rules) and by the loader, both naming `field`.
REFUSED = [
    *REFUSED_URLS,
    # Whole-value matches, ASCII digits: a trailing newline or another script's digit is refused
    # by both (Python's `$` and `\d` would admit them; RE2 and the models do not).
    pol(
        "header-trailing-newline", f"{X}.set[0].name", (f"{X}.set", [HEADER | {"name": "X-User\n"}])
    ),
    pol("duration-trailing-newline", f"{R}.cacheDuration", (f"{R}.cacheDuration", "5m\n")),
    pol("duration-other-digits", f"{R}.cacheDuration", (f"{R}.cacheDuration", "\u0665m")),
    pol("enum-action", f"{A}.action", (f"{A}.action", "Block")),
    pol("enum-mode", f"{P}.mode", (f"{P}.mode", "Lax")),
    pol("enum-provider", f"{M}.provider", (f"{M}.provider", "Okta")),
    pol("enum-as-mode", f"{M}.authorizationServerMode", (f"{M}.authorizationServerMode", "Proxy")),
    pol(
        "enum-bearer-method",
        f"{M}.resourceMetadata.bearerMethodsSupported[0]",
        (f"{M}.resourceMetadata.bearerMethodsSupported", ["query"]),
    ),
    pol("enum-target-kind", "spec.targetRefs[0].kind", ("spec.targetRefs[0].kind", "Gateway")),
    pol("enum-target-group", "spec.targetRefs[0].group", ("spec.targetRefs[0].group", "x.io")),
    pol("enum-backendref-kind", f"{R}.backendRef.kind", (f"{R}.backendRef.kind", "Pod")),
    pol("enum-backendref-group", f"{R}.backendRef.group", (f"{R}.backendRef.group", "core")),
    pol(
        "enum-tool-action",
        "spec.backend.mcp.authorization.action",
        ("spec.backend.mcp.authorization", {"action": "Block", **RULE}),
    ),
    pol("required-spec", "spec", ("spec", DELETE)),
    pol("required-target-refs", "spec.targetRefs", ("spec.targetRefs", DELETE)),
    pol("required-target-name", "spec.targetRefs[0].name", ("spec.targetRefs[0].name", DELETE)),
    pol("required-traffic", "spec.traffic", ("spec.traffic", DELETE)),
    pol("required-providers", f"{P}.providers", (f"{P}.providers", DELETE)),
    pol("required-issuer", f"{PR}.issuer", (f"{PR}.issuer", DELETE)),
    pol("required-jwks", J, (J, DELETE)),
    pol("required-backendref-name", f"{R}.backendRef.name", (f"{R}.backendRef.name", DELETE)),
    pol("required-backendref-port", f"{R}.backendRef.port", (f"{R}.backendRef.port", DELETE)),
    pol("required-policy", f"{A}.policy", (f"{A}.policy", DELETE)),
    pol("required-expressions", f"{A}.policy.matchExpressions", (f"{A}.policy", {})),
    pol("required-limit-key", f"{L}.key", (L, {"requests": 10})),
    pol("required-header-value", f"{X}.set[0].value", (f"{X}.set", [{"name": "X-User"}])),
    pol("type-issuer", f"{PR}.issuer", (f"{PR}.issuer", 42)),
    pol("type-target-refs", "spec.targetRefs", ("spec.targetRefs", "mcp")),
    pol("type-forward-token", f"{P}.forwardToken", (f"{P}.forwardToken", "maybe")),
    pol("unknown-spec-field", "spec.targetRef", ("spec.targetRef", [TARGET]), status=400),
    pol("unknown-remote-field", f"{R}.timeout", (f"{R}.timeout", "5s"), status=400),
    pol("unknown-mcp-field", f"{M}.clientID", (f"{M}.clientID", "mcp-public"), status=400),
    pol("jwks-both", J, (f"{J}.inline", JWKS)),
    pol("jwks-neither", J, (J, {})),
    pol("remote-both", R, (f"{R}.url", URL)),
    pol("remote-neither", R, (R, {"cacheDuration": "5m"})),
    pol("remote-backendref-without-path", R, (f"{R}.jwksPath", DELETE)),
    pol("remote-url-with-path", R, (R, {"url": URL, "jwksPath": "/jwks/"})),
    pol("bound-port-low", f"{R}.backendRef.port", (f"{R}.backendRef.port", 0)),
    pol("bound-port-high", f"{R}.backendRef.port", (f"{R}.backendRef.port", 65536)),
    pol("bound-target-refs-empty", "spec.targetRefs", ("spec.targetRefs", [])),
    pol("bound-target-refs-17", "spec.targetRefs", ("spec.targetRefs", [TARGET] * 17)),
    pol("bound-providers-empty", f"{P}.providers", (f"{P}.providers", [])),
    pol("bound-audiences-empty", f"{PR}.audiences", (f"{PR}.audiences", [])),
    pol("bound-audience-blank", f"{PR}.audiences[0]", (f"{PR}.audiences", [""])),
    pol("bound-audiences-65", f"{PR}.audiences", (f"{PR}.audiences", ["a"] * 65)),
    pol("bound-issuer-blank", f"{PR}.issuer", (f"{PR}.issuer", "")),
    pol("bound-issuer-long", f"{PR}.issuer", (f"{PR}.issuer", "https://i/" + "a" * 247)),
    pol(
        "bound-expressions-empty",
        f"{A}.policy.matchExpressions",
        (f"{A}.policy.matchExpressions", []),
    ),
    pol(
        "bound-expression-blank",
        f"{A}.policy.matchExpressions[0]",
        (f"{A}.policy.matchExpressions", [""]),
    ),
    pol(
        "bound-expressions-257",
        f"{A}.policy.matchExpressions",
        (f"{A}.policy.matchExpressions", ["true"] * 257),
    ),
    pol(
        "bound-expression-long",
        f"{A}.policy.matchExpressions[0]",
        (f"{A}.policy.matchExpressions", ["x" * 16385]),
    ),
    pol("bound-inline-short", f"{J}.inline", (J, {"inline": "x"})),
    pol("bound-jwks-path-long", f"{R}.jwksPath", (f"{R}.jwksPath", "/" + "a" * 1024)),
    pol("bound-client-id-blank", f"{M}.clientId", (f"{M}.clientId", "")),
    pol("bound-limit-requests", f"{L}.requests", _limit(requests=0)),
    pol(
        "bound-header-value-long",
        f"{X}.set[0].value",
        (f"{X}.set", [{"name": "X-User", "value": "x" * 4097}]),
    ),
    pol("pattern-jwks-path", f"{R}.jwksPath", (f"{R}.jwksPath", "application/o/mcp/jwks/")),
    pol("pattern-cache-duration", f"{R}.cacheDuration", (f"{R}.cacheDuration", "5 minutes")),
    pol("pattern-cache-duration-days", f"{R}.cacheDuration", (f"{R}.cacheDuration", "1d")),
    pol("bound-cache-duration-blank", f"{R}.cacheDuration", (f"{R}.cacheDuration", "")),
    pol("cel-cache-duration-500ms", f"{R}.cacheDuration", (f"{R}.cacheDuration", "500ms")),
    pol("cel-cache-duration-zero", f"{R}.cacheDuration", (f"{R}.cacheDuration", "0h0s")),
    pol("cel-window-zero", f"{L}.window", _limit(window="0ms")),
    pol("pattern-window", f"{L}.window", _limit(window="1w")),
    pol("header-protected", f"{X}.set[0].name", (f"{X}.set", [HEADER | {"name": "Authorization"}])),
    pol("header-protected-any-case", f"{X}.remove[0]", (f"{X}.remove", ["HOST"])),
    pol("header-not-a-token", f"{X}.remove[0]", (f"{X}.remove", ["X User"])),
    pol(
        "scope-offline-access-advertised",
        f"{M}.resourceMetadata.scopesSupported",
        (f"{M}.resourceMetadata.scopesSupported", ["openid", "offline_access"]),
    ),
    pol("scope-with-space", f"{SC}.required[0]", (SC, {"required": ["mcp tools"]})),
    pol("scope-with-quote", f"{SC}.required[0]", (SC, {"required": ['mcp"x']})),
    pol("scope-offline-access-required", f"{SC}.required", (SC, {"required": ["offline_access"]})),
    pol("scope-implied-not-a-scope", f"{SC}.implies.admin[0]", (SC, {"implies": {"admin": [""]}})),
    pol("scope-rule-without-scopes", f"{B}[0].required", (B, [{"match": "true", "required": []}])),
    pol("scope-rule-without-match", f"{B}[0].match", (B, [{"required": ["mcp:admin"]}])),
    pol("credentials-no-mode", CR, (CR, {})),
    pol("credentials-two-modes", CR, (CR, {"passthrough": True, "secretHeader": SECRET_HEADER})),
    pol(
        "credentials-secret-both-sources",
        f"{CR}.secretHeader.value",
        (CR, {"secretHeader": {**SECRET_HEADER, "value": {"env": "A", "file": "/a"}}}),
    ),
    pol(
        "credentials-secret-ref-and-env",
        f"{CR}.secretHeader.value",
        (
            CR,
            {"secretHeader": {**SECRET_HEADER, "value": {"env": "A", "secretRef": SECRET_REF}}},
        ),
    ),
    pol(
        "credentials-secret-ref-upper-name",
        f"{CR}.secretHeader.value.secretRef.name",
        (
            CR,
            {
                "secretHeader": {
                    **SECRET_HEADER,
                    "value": {"secretRef": SECRET_REF | {"name": "Key"}},
                }
            },
        ),
    ),
    pol(
        "credentials-secret-ref-key-with-slash",
        f"{CR}.secretHeader.value.secretRef.key",
        (
            CR,
            {
                "secretHeader": {
                    **SECRET_HEADER,
                    "value": {"secretRef": SECRET_REF | {"key": "a/b"}},
                }
            },
        ),
    ),
    pol(
        "credentials-secret-ref-bad-namespace",
        f"{CR}.secretHeader.value.secretRef.namespace",
        (
            CR,
            {
                "secretHeader": {
                    **SECRET_HEADER,
                    "value": {"secretRef": SECRET_REF | {"namespace": "a.b"}},
                }
            },
        ),
    ),
    pol(
        "credentials-secret-ref-no-key",
        f"{CR}.secretHeader.value.secretRef.key",
        (CR, {"secretHeader": {**SECRET_HEADER, "value": {"secretRef": {"name": "api"}}}}),
    ),
    pol(
        "credentials-secret-bad-env",
        f"{CR}.secretHeader.value.env",
        (CR, {"secretHeader": {**SECRET_HEADER, "value": {"env": "API KEY"}}}),
    ),
    pol(
        "credentials-exchange-no-target",
        f"{CR}.tokenExchange",
        (CR, {"tokenExchange": {"clientId": "gw", "clientSecret": {"env": "S"}}}),
    ),
    pol("credentials-target-no-mode", f"{CR}.targets[0]", (CR, {"targets": [{"name": "a"}]})),
    pol(
        "credentials-target-two-modes",
        f"{CR}.targets[0]",
        (CR, {"targets": [{"name": "a", "passthrough": True, "secretHeader": SECRET_HEADER}]}),
    ),
    pol(
        "credentials-target-repeated",
        f"{CR}.targets[1]",
        (CR, {"targets": [{"name": "a", "passthrough": True}, {"name": "a", "passthrough": True}]}),
    ),
    pol(
        "credentials-target-name-upper",
        f"{CR}.targets[0].name",
        (CR, {"targets": [{"name": "A", "passthrough": True}]}),
    ),
    pol(
        "credentials-two-defaults-beside-targets",
        CR,
        (
            CR,
            {
                "passthrough": True,
                "secretHeader": SECRET_HEADER,
                "targets": [{"name": "a", "passthrough": True}],
            },
        ),
    ),
    be("required-mcp", "spec.mcp", ("spec.mcp", DELETE)),
    be("required-targets", "spec.mcp.targets", ("spec.mcp.targets", DELETE)),
    be("required-target-name", f"{T}.name", (f"{T}.name", DELETE)),
    be("one-address-none", T, (f"{T}.static", DELETE)),
    be("one-address-both", T, (f"{T}.service", {"name": "mcp", "port": 80})),
    be("pattern-host-user-info", f"{S}.host", (f"{S}.host", "allowed.example@169.254.169.254")),
    be("pattern-host-port", f"{S}.host", (f"{S}.host", "mcp:8000")),
    be("pattern-host-path", f"{S}.host", (f"{S}.host", "mcp/x")),
    be("pattern-host-space", f"{S}.host", (f"{S}.host", "mcp x")),
    be(
        "required-service-name",
        f"{T}.service.name",
        (f"{T}.static", DELETE),
        (f"{T}.service", {"port": 80}),
    ),
    be(
        "required-service-port",
        f"{T}.service.port",
        (f"{T}.static", DELETE),
        (f"{T}.service", {"name": "mcp"}),
    ),
    be("required-host", f"{S}.host", (f"{S}.host", DELETE)),
    be("required-port", f"{S}.port", (f"{S}.port", DELETE)),
    be("bound-targets-empty", "spec.mcp.targets", ("spec.mcp.targets", [])),
    be(
        "bound-targets-17",
        "spec.mcp.targets",
        ("spec.mcp.targets", [SERVER | {"name": f"t{i}"} for i in range(17)]),
    ),
    be(
        "unique-target-names",
        "spec.mcp.targets[1]",
        ("spec.mcp.targets", [SERVER, SERVER | {"static": {"host": "b", "port": 1}}]),
    ),
    be("pattern-target-name-upper", f"{T}.name", (f"{T}.name", "Mcp")),
    be("pattern-target-name-underscore", f"{T}.name", (f"{T}.name", "a_b")),
    be("pattern-target-name-dash-first", f"{T}.name", (f"{T}.name", "-a")),
    be("pattern-target-name-32", f"{T}.name", (f"{T}.name", "a" * 32)),
    be("pattern-target-name-blank", f"{T}.name", (f"{T}.name", "")),
    be("bound-host-blank", f"{S}.host", (f"{S}.host", "")),
    be("bound-port-low", f"{S}.port", (f"{S}.port", 0)),
    be("bound-port-high", f"{S}.port", (f"{S}.port", 65536)),
    be("type-port", f"{S}.port", (f"{S}.port", "eighty")),
    be("pattern-path", f"{S}.path", (f"{S}.path", "mcp")),
    be("enum-protocol", f"{S}.protocol", (f"{S}.protocol", "SSE")),
    be("pattern-target-timeout", f"{T}.timeout", (f"{T}.timeout", "soon")),
    be("cel-target-timeout-zero", f"{T}.timeout", (f"{T}.timeout", "0s")),
    be("unknown-static-field", f"{S}.tls", (f"{S}.tls", True), status=400),
    be("unknown-spec-field", "spec.targets", ("spec.targets", []), status=400),
]

# Accepted by the schema and by the loader (some then refused by the controller's compile step,
# which reports Accepted=False: the CRD comment lists those checks).
ACCEPTED = [
    pol("example"),
    be(
        "targets-16",
        "",
        ("spec.mcp.targets", [SERVER | {"name": f"t-{i}"} for i in range(15)] + [SERVER]),
    ),
    be("target-name-31", "", (f"{T}.name", "0" + "a-" * 15)),
    be("target-timeout", "", (f"{T}.timeout", "1m30s")),
    be(
        "service-target", "", (f"{T}.static", DELETE), (f"{T}.service", {"name": "mcp", "port": 80})
    ),
    be(
        "service-target-elsewhere",
        "",
        (f"{T}.static", DELETE),
        (f"{T}.service", {"name": "mcp", "namespace": "tools", "port": 80, "path": "/x"}),
    ),
    be("host-ipv6", "", (f"{S}.host", "fd00::1")),
    be("host-name", "", (f"{S}.host", "mcp-server.tools.svc.cluster.local")),
    pol("remote-url", "", (R, {"url": URL, "cacheDuration": "1h30m"})),
    pol("inline-jwks", "", (J, {"inline": JWKS})),
    pol("provider-authentik", "", (f"{M}.provider", "Authentik")),
    pol("provider-keycloak", "", (f"{M}.provider", "Keycloak"), (f"{M}.clientId", DELETE)),
    pol("no-provider", "", (f"{M}.provider", DELETE)),
    pol("no-mcp", "", (M, DELETE)),
    pol("no-authorization", "", (A, DELETE)),
    pol("action-deny", "", (f"{A}.action", "Deny")),
    pol("action-require", "", (f"{A}.action", "Require")),
    pol("defaults-omitted", "", (f"{P}.mode", DELETE), (f"{A}.action", DELETE)),
    pol("nulls-for-optional-fields", "", (f"{PR}.audiences", None), (f"{R}.url", None)),
    pol("cache-duration-1s", "", (f"{R}.cacheDuration", "1s")),
    pol("cache-duration-1000ms", "", (f"{R}.cacheDuration", "1000ms")),
    pol("cache-duration-longest", "", (f"{R}.cacheDuration", "99999h99999m99999s99999ms")),
    pol("transformation", "", (X, {"set": [HEADER], "remove": ["X-Forwarded-User"]})),
    pol("rate-limit", "", _limit(window="1ms", redisUrl="redis://127.0.0.1:6379/0")),
    pol(
        "broker-mode",
        "",
        (f"{M}.authorizationServerMode", "Broker"),
        (f"{M}.broker", {"redisUrl": "rediss://127.0.0.1:6380"}),
    ),
    pol("target-refs-16", "", ("spec.targetRefs", [TARGET | {"sectionName": "r"}] * 16)),
    pol("audiences-64", "", (f"{PR}.audiences", [f"a{i}" for i in range(64)])),
    pol(
        "tool-authorization",
        "",
        ("spec.backend.mcp.authorization", {"action": "Deny", **RULE}),
    ),
    pol(
        "resource-metadata",
        "",
        (f"{M}.resourceMetadata.resourceName", "MCP"),
        (f"{M}.resourceMetadata.resourceDocumentation", "https://docs.example/mcp"),
    ),
    pol("provider-b-without-client-id", "", (f"{M}.clientId", DELETE)),
    pol("cel-that-does-not-compile", "", (f"{A}.policy.matchExpressions", ["jwt.groups.("])),
    pol(
        "two-providers",
        "",
        (f"{P}.providers[1]", {"issuer": "https://b/", "jwks": {"inline": JWKS}}),
    ),
    pol(
        "credentials-secret-ref",
        "",
        (
            CR,
            {
                "secretHeader": {**SECRET_HEADER, "value": {"secretRef": SECRET_REF}},
                "targets": [
                    {
                        "name": "a",
                        "tokenExchange": {
                            "clientId": "gw",
                            "clientSecret": {"secretRef": SECRET_REF | {"namespace": "shared"}},
                            "audience": "a",
                        },
                    }
                ],
            },
        ),
    ),
    pol(
        "credentials-per-target-only",
        "",
        (
            CR,
            {
                "targets": [
                    {"name": "a", "passthrough": True},
                    {"name": "b", "secretHeader": SECRET_HEADER},
                ]
            },
        ),
    ),
    pol(
        "credentials-per-target-and-default",
        "",
        (CR, {"secretHeader": SECRET_HEADER, "targets": [{"name": "a", "passthrough": True}]}),
    ),
    be("example"),
    be("defaults-omitted", "", (f"{S}.path", DELETE), (f"{S}.protocol", DELETE)),
    be("port-65535", "", (f"{S}.port", 65535)),
]

# Accepted by the schema, refused by the loader at `field`: checks only the controller makes
# in Kubernetes (Accepted=False), listed in the CRD's comment.
# What only the WHATWG URL parser can say of a URL the schema's pattern admits: the controller
# refuses such a policy, and its routes answer 503 (a stand-in claims them).
CONTROLLER_ONLY = [
    pol("url-port-out-of-range", f"{R}.url", (R, {"url": "http://idp.example:99999/jwks"})),
    pol("url-unclosed-ipv6", f"{R}.url", (R, {"url": "http://[::1/jwks"})),
    pol(
        "resource-bad-host",
        f"{M}.resourceMetadata.resource",
        (f"{M}.resourceMetadata.resource", "http://a%zz/mcp"),
    ),
]


@dataclass(frozen=True, slots=True)
class Divergence:
    """A document the API server and the loader decide differently, and why."""

    case: Case
    server_admits: bool
    loader_accepts: bool
    why: str


# Known differences; each is a property of the models the schema cannot (or should not) copy.
DIVERGENCES = [
    Divergence(
        pol(
            "snake-case-field",
            f"{R}.jwks_path",
            (f"{R}.jwks_path", "/j/"),
            (f"{R}.jwksPath", DELETE),
            status=400,
        ),
        server_admits=False,
        loader_accepts=True,
        why="models set populate_by_name=True, so the loader also takes Python field names",
    ),
    Divergence(
        pol("string-port", f"{R}.backendRef.port", (f"{R}.backendRef.port", "9000")),
        server_admits=False,
        loader_accepts=True,
        why="pydantic's lax mode turns the string '9000' into an int; the API server does not",
    ),
    Divergence(
        pol("string-bool", f"{P}.forwardToken", (f"{P}.forwardToken", "yes")),
        server_admits=False,
        loader_accepts=True,
        why="pydantic's lax mode reads 'yes' as true",
    ),
    Divergence(
        pol("null-for-defaulted-field", f"{P}.mode", (f"{P}.mode", None)),
        server_admits=True,
        loader_accepts=False,
        why="the API server drops a null it does not allow and applies the default; pydantic "
        "refuses null for a field that is not Optional",
    ),
]


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
