"""The kinds the controller reads, where the API server serves them, and the RBAC they need."""

from __future__ import annotations

from dataclasses import dataclass

GATEWAY_API = "gateway.networking.k8s.io"
POLICY_API = "mcp-oauth-gateway.dev"


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind the controller lists and watches."""

    kind: str
    group: str  # "" for core
    version: str
    plural: str
    namespaced: bool = True
    # Whose status the controller writes (through the status subresource).
    writes_status: bool = True
    # Absent on some servers (core Services on the test API server): not fatal.
    optional: bool = False
    # What an optional kind's absence means, for the log.
    when_absent: str = ""

    @property
    def api_version(self) -> str:
        """`group/version`, or `version` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version


GATEWAY_CLASS = Kind("GatewayClass", GATEWAY_API, "v1", "gatewayclasses", namespaced=False)
GATEWAY = Kind("Gateway", GATEWAY_API, "v1", "gateways")
HTTP_ROUTE = Kind("HTTPRoute", GATEWAY_API, "v1", "httproutes")
REFERENCE_GRANT = Kind(
    "ReferenceGrant",
    GATEWAY_API,
    "v1beta1",
    "referencegrants",
    writes_status=False,
    optional=True,
    when_absent="no reference into another namespace is permitted",
)
GATEWAY_CLASS_PARAMETERS = Kind(
    "GatewayClassParameters",
    POLICY_API,
    "v1alpha1",
    "gatewayclassparameters",
    namespaced=False,
    writes_status=False,
    # Without the CRD (or the right to read it) none is known, which refuses every class whose
    # parametersRef names one: absent never means "every namespace".
    optional=True,
    when_absent="a GatewayClass whose parametersRef names one is not accepted",
)
GATEWAY_BACKEND = Kind("GatewayBackend", POLICY_API, "v1alpha1", "gatewaybackends")
GATEWAY_POLICY = Kind("GatewayPolicy", POLICY_API, "v1alpha1", "gatewaypolicies")
SERVICE = Kind(
    "Service",
    "",
    "v1",
    "services",
    writes_status=False,
    optional=True,
    when_absent="a missing Service or port is not reported",
)

NAMESPACE = Kind(
    "Namespace",
    "",
    "v1",
    "namespaces",
    namespaced=False,
    writes_status=False,
    optional=True,
    when_absent="a listener's namespace selector sees only the kubernetes.io/metadata.name label",
)

WATCHED = (
    GATEWAY_CLASS,
    GATEWAY_CLASS_PARAMETERS,
    GATEWAY,
    HTTP_ROUTE,
    REFERENCE_GRANT,
    GATEWAY_BACKEND,
    GATEWAY_POLICY,
    SERVICE,
    NAMESPACE,
)
BY_KIND = {kind.kind: kind for kind in WATCHED}

# Leader election (coordination.k8s.io/v1 Lease).
LEASE = Kind("Lease", "coordination.k8s.io", "v1", "leases", writes_status=False)

# Read per namespace, only where some policy may use a Secret (kube/secrets.py); never all of
# them, so the install can grant it namespace by namespace.
SECRET = Kind(
    "Secret",
    "",
    "v1",
    "secrets",
    writes_status=False,
    optional=True,
    when_absent="the policies that name a Secret there are not accepted",
)
