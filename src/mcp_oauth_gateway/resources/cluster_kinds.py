"""The kinds read for references and in Kubernetes mode: Service, GatewayClass (and our
GatewayClassParameters), ReferenceGrant."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from .fields import NamespaceName, NonEmpty, Port, StrictModel
from .gateway_api import ObjectMeta

# --- Service (v1) --------------------------------------------------------------------------


class ServicePort(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    port: Port
    name: str | None = None


class ServiceSpec(BaseModel):
    # Core Services carry many fields the gateway has no use for (selector, clusterIP, ...);
    # they are accepted and ignored so real manifests load unchanged.
    model_config = ConfigDict(
        extra="allow", frozen=True, populate_by_name=True, alias_generator=to_camel
    )
    type: Literal["ExternalName", "ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    external_name: str | None = None
    ports: list[ServicePort] = []

    @model_validator(mode="after")
    def _external_name(self) -> ServiceSpec:
        if self.type == "ExternalName" and not self.external_name:
            raise ValueError("externalName is required when type is ExternalName")
        return self


class Service(StrictModel):
    api_version: Literal["v1"]
    kind: Literal["Service"]
    metadata: ObjectMeta
    spec: ServiceSpec


# --- GatewayClass and ReferenceGrant (Kubernetes mode) --------------------------------------


class ParametersReference(StrictModel):
    group: str
    kind: NonEmpty
    name: NonEmpty
    namespace: str | None = None


class GatewayClassSpec(StrictModel):
    controller_name: NonEmpty
    description: str | None = None
    # Another controller's class may name any kind; ours must name a GatewayClassParameters
    # (controlplane/class_parameters.py says so in the class's status).
    parameters_ref: ParametersReference | None = None


class ClusterMeta(StrictModel):
    """Metadata of a cluster-scoped object (no namespace)."""

    name: NonEmpty
    generation: int = 1
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None  # set by the API server

    @property
    def namespace(self) -> str:
        """Cluster-scoped objects have none; "" keeps keys uniform."""
        return ""

    @property
    def key(self) -> str:
        """The name: cluster-scoped objects are unique by name alone."""
        return self.name


class GatewayClass(StrictModel):
    api_version: Literal["gateway.networking.k8s.io/v1"]
    kind: Literal["GatewayClass"]
    metadata: ClusterMeta
    spec: GatewayClassSpec


# A Kubernetes namespace name: an RFC 1123 label.


class GatewayClassParametersSpec(StrictModel):
    allowed_gateway_namespaces: Annotated[list[NamespaceName], Field(min_length=1, max_length=64)]
    """The namespaces whose Gateways the class's controller serves, by name (1 to 64). A
    Gateway of the class in any other namespace is not served: its status says
    `Accepted=False`, reason `NamespaceNotAllowed`, naming the class. Names, not a label
    selector: whoever may label a namespace could otherwise add it. Without parametersRef on
    the class, Gateways of every namespace are served."""


class GatewayClassParameters(StrictModel):
    """What a GatewayClass of mcp-oauth-gateway allows, named by the class's
    `spec.parametersRef` (group `mcp-oauth-gateway.dev`, kind `GatewayClassParameters`, no
    namespace: the object is cluster-scoped)."""

    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayClassParameters"]
    metadata: ClusterMeta
    spec: GatewayClassParametersSpec
    """Which namespaces may own Gateways of the GatewayClasses that name this object. A class
    naming one that does not exist or is not valid is `Accepted=False`, reason
    `InvalidParameters`, and none of its Gateways is served."""


class GrantFrom(StrictModel):
    group: str
    kind: NonEmpty
    namespace: NonEmpty


class GrantTo(StrictModel):
    group: str
    kind: NonEmpty
    name: str | None = None


class ReferenceGrantSpec(StrictModel):
    from_: Annotated[list[GrantFrom], Field(min_length=1, alias="from")]
    to: Annotated[list[GrantTo], Field(min_length=1)]


class ReferenceGrant(StrictModel):
    api_version: Literal["gateway.networking.k8s.io/v1beta1", "gateway.networking.k8s.io/v1"]
    kind: Literal["ReferenceGrant"]
    metadata: ObjectMeta
    spec: ReferenceGrantSpec

    def permits(
        self, group: str, kind: str, namespace: str, to_group: str, to_kind: str, to_name: str
    ) -> bool:
        """Whether this grant lets `kind` objects in `namespace` refer to the named object
        (in the grant's own namespace)."""
        return any(
            f.group == group and f.kind == kind and f.namespace == namespace
            for f in self.spec.from_
        ) and any(
            t.group == to_group and t.kind == to_kind and t.name in (None, to_name)
            for t in self.spec.to
        )


# --- Namespace (v1): its labels, which a listener's allowedRoutes selector reads -------------


class Namespace(StrictModel):
    api_version: Literal["v1"]
    kind: Literal["Namespace"]
    metadata: ClusterMeta
    spec: dict[str, Any] = {}
    """Read and ignored (the API server's finalizers)."""
    status: dict[str, Any] = {}
    """Read and ignored (`kubectl get namespace -o yaml` writes its phase)."""
