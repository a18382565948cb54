"""The Gateway API kinds the gateway serves from: Gateway and HTTPRoute."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from .fields import (
    GATEWAY_API_GROUP,
    POLICY_API_GROUP,
    AbsolutePath,
    Duration,
    NonEmpty,
    Port,
    StrictModel,
    cors_origin,
    parse_duration,
)
from .label_selector import NAME_LABEL, LabelSelector


class ObjectMeta(StrictModel):
    name: NonEmpty
    namespace: NonEmpty = "default"
    generation: int = 1
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    # Set by the API server (RFC 3339, UTC): the older of two routes with the same match wins.
    creation_timestamp: str | None = None

    @property
    def key(self) -> str:
        """`namespace/name`, the identity used in references and messages."""
        return f"{self.namespace}/{self.name}"


# --- Gateway (gateway.networking.k8s.io/v1) -------------------------------------------------

# Gateway API's Hostname: lowercase RFC 1123 labels, optionally behind one leading `*.` label,
# no IP address. Matching compares names as written, so a name the API server would refuse
# (a capital letter, a `*` elsewhere) is refused here too rather than matched differently.
_HOSTNAME = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _hostname(value: str) -> str:
    if len(value) > 253 or not _HOSTNAME.fullmatch(value):
        raise ValueError(
            f"{value[:80]!r} is not a hostname: lowercase DNS labels (letters, digits, `-`), "
            "optionally after one leading `*.` (such as `mcp.example.com` or `*.example.com`)"
        )
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return value
    raise ValueError(f"{value!r} is an IP address; a hostname is a DNS name (Gateway API)")


Hostname = Annotated[str, AfterValidator(_hostname)]


class RouteNamespaces(StrictModel):
    from_: Literal["Same", "All", "Selector"] = Field("Same", alias="from")
    """`Same` (default): routes of the Gateway's namespace; `All`: of every namespace;
    `Selector`: of the namespaces `selector` selects by their labels."""
    selector: LabelSelector | None = None
    """With `from: Selector`, the namespaces whose routes the listener takes. Select by
    `kubernetes.io/metadata.name`, the label only the API server sets: any other label lets
    whoever may label namespaces add their own."""

    @model_validator(mode="after")
    def _selector(self) -> RouteNamespaces:
        if (self.from_ == "Selector") != (self.selector is not None):
            raise ValueError("set selector exactly when from is Selector")
        return self

    def admits(self, route: str, gateway: str, labels: Mapping[str, str] | None) -> bool:
        """Whether routes of namespace `route` may attach (`labels`: that namespace's)."""
        if self.from_ == "All":
            return True
        if self.from_ == "Same":
            return route == gateway
        assert self.selector is not None  # the model guarantees it
        known = {**(labels or {}), NAME_LABEL: route}
        return self.selector.selects(known)


class RouteGroupKind(StrictModel):
    group: str = GATEWAY_API_GROUP
    kind: NonEmpty


class AllowedRoutes(StrictModel):
    """Which routes a listener takes (Gateway API; the API server fills in the defaults)."""

    namespaces: RouteNamespaces = RouteNamespaces()
    kinds: list[RouteGroupKind] = []


class Listener(StrictModel):
    name: NonEmpty
    port: Port
    protocol: Literal["HTTP"] = "HTTP"
    # Requests for other hosts never reach this listener's routes (Gateway API listener
    # isolation); a route's own hostnames are cut down to those within it.
    hostname: Hostname | None = None
    allowed_routes: AllowedRoutes = AllowedRoutes()

    def takes(
        self,
        route_namespace: str,
        gateway_namespace: str,
        labels: Mapping[str, str] | None = None,
    ) -> str | None:
        """Why this listener does not take an HTTPRoute from `route_namespace` (whose labels
        are `labels`, when known), or None."""
        kinds = self.allowed_routes.kinds
        if kinds and not any(k.kind == "HTTPRoute" and k.group == GATEWAY_API_GROUP for k in kinds):
            return f"listener {self.name!r} takes no HTTPRoute (allowedRoutes.kinds)"
        namespaces = self.allowed_routes.namespaces
        if namespaces.admits(route_namespace, gateway_namespace, labels):
            return None
        if namespaces.from_ == "Same":
            return (
                f"listener {self.name!r} takes routes from namespace {gateway_namespace} only "
                "(allowedRoutes.namespaces.from: Same; set All or Selector to take this one)"
            )
        return (
            f"listener {self.name!r} takes routes from the namespaces its "
            f"allowedRoutes.namespaces.selector selects, and namespace {route_namespace} is not "
            "one of them"
        )


class GatewaySpec(StrictModel):
    gateway_class_name: str | None = None
    listeners: Annotated[list[Listener], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_listener_names(self) -> GatewaySpec:
        names = [listener.name for listener in self.listeners]
        if len(names) != len(set(names)):
            raise ValueError("listener names must be unique")
        return self


class Gateway(StrictModel):
    api_version: Literal["gateway.networking.k8s.io/v1"]
    kind: Literal["Gateway"]
    metadata: ObjectMeta
    spec: GatewaySpec


# --- HTTPRoute (gateway.networking.k8s.io/v1) ----------------------------------------------


class ParentRef(StrictModel):
    group: Literal["gateway.networking.k8s.io"] = GATEWAY_API_GROUP
    kind: Literal["Gateway"] = "Gateway"
    name: NonEmpty
    namespace: str | None = None
    section_name: str | None = None
    port: Port | None = None


class PathMatch(StrictModel):
    type: Literal["PathPrefix", "Exact"] = "PathPrefix"
    value: AbsolutePath = "/"


class RouteMatch(StrictModel):
    path: PathMatch = PathMatch()


class CorsPolicy(StrictModel):
    allow_credentials: bool = False
    allow_headers: list[NonEmpty] = []
    allow_methods: list[NonEmpty] = []
    allow_origins: list[Annotated[str, Field(min_length=1), AfterValidator(cors_origin)]] = []
    expose_headers: list[NonEmpty] = []
    max_age: Annotated[int, Field(ge=0)] = 5


class RouteFilter(StrictModel):
    type: Literal["CORS"]
    cors: CorsPolicy

    @model_validator(mode="before")
    @classmethod
    def _cors_needs_settings(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("type") == "CORS" and "cors" not in data:
            raise ValueError("a filter of type CORS needs a `cors` object")
        return data


class RouteBackendRef(StrictModel):
    group: Literal["mcp-oauth-gateway.dev"] = POLICY_API_GROUP
    kind: Literal["GatewayBackend"] = "GatewayBackend"
    name: NonEmpty
    namespace: str | None = None
    weight: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _not_a_service(cls, data: object) -> object:
        # Gateway API defaults a backendRef without group and kind to a core Service, and an
        # API server stores it that way: say what to write instead of "group should be ...".
        if (
            isinstance(data, dict)
            and data.get("kind", "Service") == "Service"
            and not data.get("group")
            and ("kind" in data or "group" in data)
        ):
            raise ValueError(
                "routes send MCP traffic to a GatewayBackend, not to a Service: set group: "
                "mcp-oauth-gateway.dev and kind: GatewayBackend (an API server fills in a "
                "backendRef without them as a Service)"
            )
        return data


class RouteTimeouts(StrictModel):
    # `backendRequest` bounds the wait for the backend's response headers; a streamed body may
    # then run as long as it needs (MCP SSE streams are long-lived by design).
    request: Duration | None = None
    backend_request: Duration | None = None

    @field_validator("request", "backend_request")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value


class RouteRule(StrictModel):
    name: str | None = None
    matches: list[RouteMatch] = [RouteMatch()]
    filters: list[RouteFilter] = []
    backend_refs: Annotated[list[RouteBackendRef], Field(min_length=1)]
    timeouts: RouteTimeouts | None = None

    @field_validator("filters")
    @classmethod
    def _one_cors_filter(cls, filters: list[RouteFilter]) -> list[RouteFilter]:
        if sum(1 for f in filters if f.type == "CORS") > 1:
            raise ValueError("at most one CORS filter per rule")
        return filters


class HTTPRouteSpec(StrictModel):
    parent_refs: Annotated[list[ParentRef], Field(min_length=1)]
    hostnames: list[Hostname] = []
    rules: Annotated[list[RouteRule], Field(min_length=1)]


class HTTPRoute(StrictModel):
    api_version: Literal["gateway.networking.k8s.io/v1"]
    kind: Literal["HTTPRoute"]
    metadata: ObjectMeta
    spec: HTTPRouteSpec
