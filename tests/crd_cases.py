"""The case tables the CRD tests share: documents edited field by field, each refused or accepted
by the API server's schema and by the loader alike (or left to the controller, or a known
divergence)."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from crd_support import PLURALS
from support import EXAMPLES, ROOT, yaml_load_all

# --- documents ------------------------------------------------------------------------------------


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """Every GatewayPolicy and GatewayBackend under examples/, with where it came from."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for index, document in enumerate(yaml_load_all(path.read_text(encoding="utf-8"))):
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
W = f"{M}.workloadIdentity"
WI = f"{W}.issuers[0]"
WORKLOAD_ISSUER = {
    "issuer": "https://kubernetes.default.svc.cluster.local",
    "jwks": {"kubernetes": {}},
    "audiences": ["https://mcp.example.com/mcp/oauth/token"],
    "authorization": {"policy": {"matchExpressions": ['jwt["kubernetes.io"].namespace == "a"']}},
    "scopes": ["mcp:tools"],
}


def _limit(**fields: object) -> tuple[str, object]:
    return (L, {"key": "jwt.sub", "requests": 10, **fields})


# URLs the schema refuses as the models do (issue 25, item 1: "not-a-url" was stored and the
# route lost its policy).
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
    pol(
        "dpop-required",
        "",
        (f"{PR}.dpop", "Required"),
        (f"{PR}.dpopProofs", {"algorithms": ["ES256", "EdDSA"], "maxAge": "1m"}),
        (f"{PR}.dpopProofs.requireNonce", True),
    ),
    pol("dpop-disabled", "", (f"{PR}.dpop", "Disabled")),
    pol("dpop-max-age-1h", "", (f"{PR}.dpopProofs", {"maxAge": "1h"})),
    pol(
        "workload-identity",
        "",
        (f"{M}.authorizationServerMode", "Broker"),
        (
            W,
            {
                "issuers": [
                    WORKLOAD_ISSUER,
                    WORKLOAD_ISSUER | {"issuer": "https://b/", "jwks": {"inline": JWKS}},
                ]
            },
        ),
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
    be("tls-system-cas", "", (f"{S}.tls", {})),
    be(
        "tls-ca-file",
        "",
        (f"{S}.tls", {"caFile": "/etc/mcp/ca.pem", "serverName": "mcp.example.com"}),
    ),
    be(
        "tls-service",
        "",
        (f"{T}.static", DELETE),
        (f"{T}.service", {"name": "github", "port": 443, "tls": {"serverName": "fd00::1"}}),
    ),
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
