#!/usr/bin/env python3
"""Generate the documentation's reference pages, one per resource kind, field by field.

    .venv/bin/python tools/gen_reference.py           write docs/reference/*.md
    .venv/bin/python tools/gen_reference.py --check   exit 1 when a committed page is out of date

GatewayPolicy, GatewayBackend and GatewayClassParameters are read from their CRDs in
deploy/crds/ (made from the models by tools/gen_crds.py, with every field's description), so
the pages say what `kubectl explain` says. The Gateway API kinds the gateway reads (Gateway,
HTTPRoute, ReferenceGrant, GatewayClass, Service) are read from the JSON schema of their
pydantic models; their fields carry no descriptions there, so `_DESCRIPTIONS` below gives one
per field, keyed by the model's schema name and the field's YAML name. A field with no
description stops the generator, so a field added to a model cannot go undocumented.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _generated as generated
import _pipeline_doc as pipeline_doc
import yaml

from mcp_oauth_gateway.resources.models import (
    Gateway,
    GatewayClass,
    HTTPRoute,
    ReferenceGrant,
    Service,
)

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "docs" / "reference"
CRD_DIR = ROOT / "deploy" / "crds"
REGENERATE = "make docs-reference"
CRDS = {
    "GatewayPolicy": "gatewaypolicies.mcp-oauth-gateway.dev.yaml",
    "GatewayBackend": "gatewaybackends.mcp-oauth-gateway.dev.yaml",
    "GatewayClassParameters": "gatewayclassparameters.mcp-oauth-gateway.dev.yaml",
}
MODELS: dict[str, Any] = {
    "Gateway": Gateway,
    "HTTPRoute": HTTPRoute,
    "ReferenceGrant": ReferenceGrant,
    "GatewayClass": GatewayClass,
    "Service": Service,
}
# What each Gateway API kind is for the gateway (the page's first paragraph).
_PURPOSES = {
    "Gateway": "The ports the gateway serves. Each port belongs to one Gateway: of two "
    "Gateways with a listener on one port, the older holds it (then the first by "
    "namespace/name), and the other's listener is not served (`Accepted=False`, reason "
    "`PortUnavailable`). In a cluster the gateway serves every Gateway whose GatewayClass names "
    "its controller and allows the Gateway's namespace.",
    "HTTPRoute": "Which requests go to which GatewayBackend: path matches on a Gateway's "
    "listeners, the CORS filter browser clients need, and the backend.",
    "ReferenceGrant": "Lets objects in another namespace refer to objects in this one (the owner "
    "of the target decides): a GatewayPolicy's Service backendRef, an HTTPRoute's GatewayBackend "
    "backendRef. Without one, a cross-namespace reference is refused.",
    "GatewayClass": "Names the controller that serves the Gateways of this class (Kubernetes "
    "mode). The gateway serves the classes whose controllerName is its own "
    "(`mcp-oauth-gateway.dev/gateway-controller` unless `--controller-name` says otherwise).",
    "Service": "Where the gateway fetches an identity provider's keys and discovery document "
    "(a GatewayPolicy's `jwks.remote.backendRef`). Standalone, only `type: ExternalName` "
    "resolves; in a cluster, `NAME.NAMESPACE.svc.<cluster domain>`.",
}
_TOP = {
    "apiVersion": "API version of the resource.",
    "kind": "Kind of the resource.",
    "metadata": "Name, namespace and labels of the object.",
    "spec": "The desired state.",
}
_META = {
    "name": "Name of the object, unique per kind within its namespace.",
    "namespace": "Namespace of the object; `default` when a file leaves it out.",
    "generation": "Set by the API server; reported back as `observedGeneration` in status.",
    "labels": "Labels, as on any Kubernetes object.",
    "annotations": "Annotations, as on any Kubernetes object.",
    "creationTimestamp": "Set by the API server (RFC 3339). Of two routes with the same match, "
    "the older one wins.",
}
_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "ObjectMeta": _META,
    "ClusterMeta": {k: v for k, v in _META.items() if k != "namespace"}
    | {"name": "Name of the object, unique in the cluster (cluster-scoped: no namespace)."},
    "GatewaySpec": {
        "gatewayClassName": "The GatewayClass. In a cluster, the gateway serves this Gateway "
        "only when the class names its controller; from files it is not read.",
        "listeners": "The ports to serve; listener names must be unique.",
    },
    "Listener": {
        "name": "Name of the listener, unique in the Gateway; a route's `parentRefs[]."
        "sectionName` names it.",
        "port": "TCP port the gateway listens on (on 127.0.0.1 unless `serve --host`).",
        "protocol": "`HTTP` only; terminate TLS in front of the gateway.",
        "hostname": "The host names this listener takes (`mcp.example.com`, or `*.example.com` "
        "for any name under it); unset: every host no other listener on the port names. A "
        "request goes to the listener with the most specific hostname matching its `Host`, and "
        "only that listener's routes can serve it; a route's `hostnames` are cut down to those "
        "within it (none within it: the route is not accepted, `NoMatchingListenerHostname`). "
        "Two listeners of a Gateway with the same port and hostname are not served "
        "(`Conflicted`, `HostnameConflict`).",
        "allowedRoutes": "Which routes may attach to this listener.",
    },
    "AllowedRoutes": {
        "namespaces": "From which namespaces routes may attach.",
        "kinds": "Which route kinds may attach; empty: HTTPRoute. A list without HTTPRoute "
        "takes no route.",
    },
    "RouteNamespaces": {
        "from": "`Same`: routes in the Gateway's namespace only; `All`: any namespace; "
        "`Selector`: the namespaces `selector` selects by their labels.",
        "selector": "With `from: Selector` (and only then), the namespaces whose routes may "
        "attach. Select by `kubernetes.io/metadata.name`, which only the API server sets: any "
        "other label lets whoever may label namespaces add theirs. In a cluster the labels "
        "come from the Namespace objects (when the controller may read them), from files from "
        "Namespace objects in the files; every namespace has `kubernetes.io/metadata.name`.",
    },
    "LabelSelector": {
        "matchLabels": "Labels a namespace must have, with exactly these values.",
        "matchExpressions": "Requirements a namespace's labels must all meet.",
    },
    "LabelSelectorRequirement": {
        "key": "The label's key.",
        "operator": "`In` or `NotIn` (the value is, or is not, one of `values`), `Exists` or "
        "`DoesNotExist` (the label is, or is not, set).",
        "values": "The values for `In` and `NotIn` (at least one); none for the others.",
    },
    "RouteGroupKind": {"group": "API group of the route kind.", "kind": "The route kind."},
    "HTTPRouteSpec": {
        "parentRefs": "The Gateways (and optionally listeners) the route attaches to.",
        "hostnames": "Host names the route answers for (the request's `Host`; `*.example.com` "
        "for any name under it); empty: all the listener takes. Through a listener with a "
        "hostname, only the names within it count.",
        "rules": "Matches and the backend they go to.",
    },
    "ParentRef": {
        "group": "`gateway.networking.k8s.io`, the only value.",
        "kind": "`Gateway`, the only value.",
        "name": "Name of the Gateway.",
        "namespace": "Namespace of the Gateway; default: the route's.",
        "sectionName": "Name of one listener of the Gateway; default: every listener.",
        "port": "Port of the listeners to attach to.",
    },
    "RouteRule": {
        "name": "A name for the rule, for people and status messages.",
        "matches": "Path matches; any of them selects the rule. PathPrefix matches whole path "
        "segments, and the longest match wins.",
        "filters": "At most one `CORS` filter.",
        "backendRefs": "The GatewayBackend the matching requests go to: the first entry.",
        "timeouts": "Time limits of the rule.",
    },
    "RouteMatch": {"path": "The path to match."},
    "PathMatch": {
        "type": "`PathPrefix` (whole segments) or `Exact`.",
        "value": "The path, starting with `/`.",
    },
    "RouteFilter": {
        "type": "`CORS`, the only filter the gateway applies.",
        "cors": "The CORS settings; required with `type: CORS`.",
    },
    "CorsPolicy": {
        "allowCredentials": "Send `Access-Control-Allow-Credentials: true`; with `*` origins "
        "the request's origin is echoed, as browsers require.",
        "allowHeaders": "Request headers a browser page may send (`*`: any).",
        "allowMethods": "Methods a browser page may use; default GET, POST, OPTIONS.",
        "allowOrigins": "Origins allowed to call (`*`: any), written as browsers write them.",
        "exposeHeaders": "Response headers a browser page may read, e.g. `Mcp-Session-Id`.",
        "maxAge": "How long, in seconds, a browser may cache a preflight answer.",
    },
    "RouteBackendRef": {
        "group": "`mcp-oauth-gateway.dev`: routes send MCP traffic to a GatewayBackend, not a "
        "Service.",
        "kind": "`GatewayBackend`, the only value.",
        "name": "Name of the GatewayBackend.",
        "namespace": "Its namespace; default: the route's. Another namespace needs a "
        "ReferenceGrant there.",
        "weight": "Accepted for Gateway API compatibility; a rule sends to its first backendRef.",
    },
    "RouteTimeouts": {
        "request": "Used as `backendRequest` when that is unset (a duration such as `30s`).",
        "backendRequest": "Time to the backend's response headers (a duration such as `30s`); "
        "default 300 s, 504 past it. Streams then run as long as they need.",
    },
    "ServiceSpec": {
        "type": "`ExternalName` is what standalone mode resolves; the others are accepted for "
        "real manifests. Other fields of a Service are accepted and ignored.",
        "externalName": "Host name the Service stands for; required with `type: ExternalName`.",
        "ports": "The Service's ports. Where the controller may read Services, a backendRef's "
        "`port` must be one of them (`ResolvedRefs=False` otherwise).",
    },
    "ServicePort": {"port": "The port number.", "name": "Name of the port."},
    "GatewayClassSpec": {
        "controllerName": "The controller that serves this class's Gateways.",
        "description": "Free text for people.",
        "parametersRef": "For a class of this gateway: a GatewayClassParameters "
        "(`mcp-oauth-gateway.dev`, cluster-scoped, no namespace) naming the namespaces that may "
        "own the class's Gateways. Unset: every namespace. One that cannot be followed: the "
        "class is `Accepted=False` (`InvalidParameters`) and none of its Gateways is served.",
    },
    "ParametersReference": {
        "group": "API group of the parameters object.",
        "kind": "Kind of the parameters object.",
        "name": "Name of the parameters object.",
        "namespace": "Namespace of the parameters object.",
    },
    "ReferenceGrantSpec": {
        "from": "The objects that may refer: group, kind and namespace.",
        "to": "The objects in this namespace they may refer to.",
    },
    "GrantFrom": {
        "group": "API group of the referring kind (`mcp-oauth-gateway.dev` for a "
        "GatewayPolicy, `gateway.networking.k8s.io` for an HTTPRoute).",
        "kind": "The referring kind, e.g. `GatewayPolicy` or `HTTPRoute`.",
        "namespace": "The namespace of the referring objects.",
    },
    "GrantTo": {
        "group": "API group of the target kind (empty for the core group: Service).",
        "kind": "The target kind, e.g. `Service` or `GatewayBackend`.",
        "name": "One object by name; unset: every object of the kind.",
    },
}


@dataclass(frozen=True)
class Row:
    """One field of a resource, as the page's table shows it."""

    path: str
    type: str
    required: bool
    default: str
    description: str
    allowed: str


def _default(node: Mapping[str, Any]) -> str:
    # An optional field's `null` default is the absence of a value: nothing to show.
    return _code(node["default"]) if node.get("default") is not None else ""


def _code(value: Any) -> str:
    # An empty string would be an empty code span, which Markdown does not show.
    text = value if isinstance(value, str) and value else json.dumps(value)
    return f"`{text}`"


def _allowed(node: Mapping[str, Any]) -> str:
    """Allowed values, patterns and bounds of a schema node (its items' too)."""
    parts: list[str] = []
    if "const" in node:
        parts.append(_code(node["const"]))
    if "enum" in node:
        parts.append(", ".join(_code(v) for v in node["enum"]))
    for key, label in (
        ("pattern", "pattern"),
        ("format", "format"),
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("maxProperties", "entries ≤"),
    ):
        if key in node:
            value = _code(node[key]) if key in ("pattern", "format") else str(node[key])
            parts.append(f"{label} {value}")
    parts += [f"rule: {rule['message']}" for rule in node.get("x-kubernetes-validations", [])]
    items = node.get("items")
    if isinstance(items, Mapping) and items.get("type") != "object":
        inner = _allowed(items)
        parts += [f"each: {inner}"] if inner else []
    return "; ".join(parts)


def _type(node: Mapping[str, Any]) -> str:
    kind = node.get("type", "object")
    if kind == "array":
        return f"array of {_type(node.get('items', {}))}"
    extra = node.get("additionalProperties")
    if kind == "object" and isinstance(extra, Mapping) and not node.get("properties"):
        return f"map of string to {_type(extra)}"
    return str(kind)


def _cell(text: str) -> str:
    # Markdown tables split cells at `|` except inside code spans, where `\|` would show as is.
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    return "".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(parts))


def crd_rows(node: Mapping[str, Any], path: str) -> Iterator[Row]:
    """The fields under an OpenAPI schema node of a CRD, depth first."""
    required = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        where = f"{path}.{name}" if path else name
        description = child.get("description", "")
        yield Row(
            where, _type(child), name in required, _default(child), description, _allowed(child)
        )
        yield from crd_rows(child, where)
        items = child.get("items")
        if isinstance(items, Mapping) and items.get("properties"):
            yield from crd_rows(items, f"{where}[]")


class _ModelSchema:
    """The JSON schema of a model, its `$ref`s resolved, described from `_DESCRIPTIONS`."""

    def __init__(self, model: Any) -> None:
        self.schema: dict[str, Any] = model.model_json_schema(by_alias=True)
        self.defs: dict[str, Any] = self.schema.get("$defs", {})

    def resolve(self, node: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any]]:
        """(the `$defs` name, the node) behind a `$ref` and an optional `anyOf` with null."""
        options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
        if len(options) == 1:
            node = {**node, **options[0]}
        ref = node.get("$ref")
        if ref is None:
            return None, node
        name = ref.rsplit("/", 1)[-1]
        return name, {**self.defs[name], **{k: v for k, v in node.items() if k != "$ref"}}

    def rows(self, node: Mapping[str, Any], owner: str, path: str) -> Iterator[Row]:
        """The fields under `node` (the model `owner`), depth first."""
        required = set(node.get("required", []))
        for name, raw in node.get("properties", {}).items():
            where = f"{path}.{name}" if path else name
            ref, child = self.resolve(raw)
            items_ref, items = self.resolve(child.get("items", {}))
            shown = {**child, "items": items} if "items" in child else child
            if ref is not None:
                shown = {**shown, "type": "object"}
            text = self.description(owner, name, path, child)
            yield Row(where, _type(shown), name in required, _default(child), text, _allowed(shown))
            if ref is not None:
                yield from self.rows(child, ref, where)
            elif items_ref is not None:
                yield from self.rows(items, items_ref, f"{where}[]")

    def description(self, owner: str, name: str, path: str, node: Mapping[str, Any]) -> str:
        """The schema's own description, else `_DESCRIPTIONS`; neither stops the generator."""
        if not path and name in _TOP:
            return _TOP[name]
        text = node.get("description") or _DESCRIPTIONS.get(owner, {}).get(name)
        if not text:
            raise SystemExit(
                f"tools/gen_reference.py: no description for {owner}.{name}: add one to "
                "_DESCRIPTIONS (or a description to the model's field)"
            )
        return str(text)


def _table(rows: list[Row]) -> str:
    lines = [
        "| Field | Type | Required | Default | Allowed | Description |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [f"`{row.path}`", row.type, "yes" if row.required else "no", row.default]
        cells += [row.allowed, row.description]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _header(kind: str, source: str) -> str:
    return (
        f"<!-- Generated by tools/gen_reference.py from {source}; do not edit.\n"
        f"     Regenerate: {REGENERATE} -->\n\n# {kind}\n\n"
    )


def _controller_checks(text: str) -> list[str]:
    """The CRD file's list of what only the controller checks (its leading comment)."""
    lines = text.split("\n---", 1)[0].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("# Checked by")), None)
    if start is None:
        return []
    items: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("# - "):
            items.append(line[4:])
        elif line.startswith("#   ") and items:
            items[-1] += " " + line[4:]
    return items


def crd_page(kind: str, file: str, text: str | None = None) -> str:
    """The reference page of a custom resource, from its CRD file (or that file's `text`)."""
    if text is None:
        text = (CRD_DIR / file).read_text(encoding="utf-8")
    crd = next(
        d for d in yaml.safe_load_all(text) if d and d.get("kind") == "CustomResourceDefinition"
    )
    spec = crd["spec"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    short = ", ".join(f"`{n}`" for n in spec["names"].get("shortNames", []))
    page = _header(kind, f"deploy/crds/{file}")
    page += f"{schema.get('description', '')}\n\n"
    page += f"- apiVersion: `{spec['group']}/{version['name']}`\n- kind: `{kind}`\n"
    page += f"- scope: {spec['scope']}" + (f"; short names {short}" if short else "") + "\n\n"
    for section in ("spec", "status"):
        node = schema["properties"].get(section)
        if node is None:
            continue
        page += f"## {section}\n\n{_cell(node.get('description', ''))}\n\n"
        page += _table(list(crd_rows(node, section)))
        page += "\n"
    # "nothing beyond this schema" (the CRD's comment for a kind without such checks) is no check.
    checks = [c for c in _controller_checks(text) if c != "nothing beyond this schema"]
    if checks:
        page += "## Checked by the controller\n\nBeyond the schema, the gateway refuses a "
        page += "policy (`Accepted=False`, reason `Invalid`) unless:\n\n"
        page += "".join(f"- {item}\n" for item in checks) + "\n"
    return page.rstrip("\n") + "\n"


def model_page(kind: str, model: Any) -> str:
    """The reference page of a Gateway API kind (or Service), from its model."""
    walk = _ModelSchema(model)
    api = walk.schema["properties"]["apiVersion"]
    versions = [api["const"]] if "const" in api else list(api.get("enum", []))
    page = _header(kind, "the JSON schema of mcp_oauth_gateway.resources.models." + kind)
    page += f"{_PURPOSES[kind]}\n\n"
    page += f"- apiVersion: {', '.join(f'`{v}`' for v in versions)}\n- kind: `{kind}`\n\n"
    page += "Fields the gateway does not know are errors, naming the field"
    page += (
        " (except in a Service, whose other fields are ignored).\n\n"
        if kind == "Service"
        else ".\n\n"
    )
    page += "## Fields\n\n" + _table(list(walk.rows(walk.schema, kind, "")))
    return page


def render() -> dict[Path, str]:
    """Every reference page, and the pipeline page with its stage list: path → text."""
    pages = {OUT_DIR / f"{kind.lower()}.md": crd_page(kind, file) for kind, file in CRDS.items()}
    pages |= {OUT_DIR / f"{kind.lower()}.md": model_page(kind, m) for kind, m in MODELS.items()}
    pages[pipeline_doc.PAGE] = pipeline_doc.page(pipeline_doc.PAGE.read_text(encoding="utf-8"))
    return pages


def main(argv: list[str] | None = None) -> int:
    """Write the pages, or with --check report those out of date."""
    description = __doc__.splitlines()[0] if __doc__ else None
    return generated.run(argv, description, render, REGENERATE)


if __name__ == "__main__":
    sys.exit(main())
