"""A GatewayClass says which namespaces may own its Gateways through a GatewayClassParameters
its parametersRef names: a Gateway elsewhere is not served (and never holds a port), a
parametersRef that cannot be followed refuses the class and every Gateway of it (fail
closed), and no parametersRef serves every namespace. The CRD, the RBAC and the watched kinds
agree with the model."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from crd_support import CLUSTER_CRD_FILES, Validator
from mcp_oauth_gateway.kube.kinds import BY_KIND, GATEWAY_CLASS_PARAMETERS, WATCHED
from mcp_oauth_gateway.resources.models import GatewayClassParameters
from support import controller_rbac_calls, deploy_rbac_rules, deploy_secret_reader_rules
from unit.gateway_support import CLASS, build, conditions, gateway, route, served_routes

RESTRICTED = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: mcp}
spec:
  controllerName: mcp-oauth-gateway.dev/gateway-controller
  parametersRef: {group: mcp-oauth-gateway.dev, kind: GatewayClassParameters, name: platform}
"""
PARAMETERS = """
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayClassParameters
metadata: {name: platform}
spec: {allowedGatewayNamespaces: [platform, infra]}
"""
PLATFORM = gateway("platform", "[{name: http, port: 8080}]", "2026-01-02T00:00:00Z")
# Older than the platform's: without the class's rule it would hold port 8080.
TENANT = gateway(
    "tenant", "[{name: http, port: 8080}, {name: own, port: 9090}]", "2025-01-01T00:00:00Z"
)
ROUTES = route("platform", "[{name: gw}]", name="mcp") + route("tenant", "[{name: gw}]")


def test_without_parameters_every_namespace_may_own_gateways():
    result = build(CLASS + PLATFORM + TENANT + ROUTES)
    assert served_routes(result, 9090) == ["tenant/r"]
    assert conditions(result.statuses["GatewayClass", "", "mcp"].conditions)["Accepted"][0]


def test_a_gateway_in_a_namespace_the_class_does_not_allow_is_not_served():
    result = build(RESTRICTED + PARAMETERS + PLATFORM + TENANT + ROUTES)
    # It holds no port either, however old: the platform's Gateway has 8080.
    assert served_routes(result, 8080) == ["platform/mcp"]
    assert 9090 not in result.snapshot.listeners
    status = result.statuses["Gateway", "tenant", "gw"]
    found = conditions(status.conditions)
    assert found["Accepted"][:2] == (False, "NamespaceNotAllowed")
    assert found["Accepted"][2] == (
        "GatewayClass mcp does not allow Gateways in namespace tenant (its parametersRef allows "
        "infra, platform): move the Gateway to one of those namespaces, use another "
        "GatewayClass, or have a cluster admin add the namespace to the class's "
        "GatewayClassParameters spec.allowedGatewayNamespaces"
    )
    assert found["Programmed"][:2] == (False, "Invalid")
    assert status.listeners == ()
    (parent,) = result.statuses["HTTPRoute", "tenant", "r"].parents
    accepted = conditions(parent.conditions)["Accepted"]
    assert accepted[:2] == (False, "NoMatchingParent")
    assert accepted[2].startswith("spec.parentRefs[0]: Gateway tenant/gw is not served: ")
    assert conditions(result.statuses["GatewayClass", "", "mcp"].conditions)["Accepted"][0]
    assert conditions(result.statuses["Gateway", "platform", "gw"].conditions)["Accepted"][0]


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        (
            "{group: mcp-oauth-gateway.dev, kind: GatewayClassParameters, name: missing}",
            "spec.parametersRef: GatewayClassParameters missing not found, or not valid",
        ),
        (
            "{group: '', kind: ConfigMap, name: platform, namespace: platform}",
            "spec.parametersRef names ConfigMap (core); this controller reads only "
            "GatewayClassParameters (mcp-oauth-gateway.dev)",
        ),
        (
            "{group: example.com, kind: GatewayClassParameters, name: platform}",
            "spec.parametersRef names GatewayClassParameters (example.com)",
        ),
        (
            "{group: mcp-oauth-gateway.dev, kind: GatewayClassParameters, name: platform, "
            "namespace: platform}",
            "spec.parametersRef.namespace: GatewayClassParameters is cluster-scoped; remove the "
            "namespace",
        ),
    ],
)
def test_a_parameters_ref_that_cannot_be_followed_refuses_the_class_and_its_gateways(ref, why):
    cls = RESTRICTED.replace(
        "parametersRef: {group: mcp-oauth-gateway.dev, kind: GatewayClassParameters, "
        "name: platform}",
        f"parametersRef: {ref}",
    )
    result = build(cls + PARAMETERS + PLATFORM + TENANT + ROUTES)
    assert result.snapshot.listeners == {}
    accepted = conditions(result.statuses["GatewayClass", "", "mcp"].conditions)["Accepted"]
    assert accepted[:2] == (False, "InvalidParameters")
    assert accepted[2].startswith(why), accepted[2]
    for namespace in ("platform", "tenant"):
        found = conditions(result.statuses["Gateway", namespace, "gw"].conditions)
        assert found["Accepted"][:2] == (False, "GatewayClassNotAccepted")
        assert found["Accepted"][2].startswith("GatewayClass mcp is not accepted (")
        assert found["Programmed"][0] is False


def test_files_read_no_class_and_serve_every_gateway():
    result = build(RESTRICTED + PLATFORM + TENANT + ROUTES, cluster=False)
    assert served_routes(result, 9090) == ["tenant/r"]


# --- the kind: model, CRD, watch and RBAC -----------------------------------------------------


def crd_schema() -> dict:
    document = yaml.safe_load(CLUSTER_CRD_FILES["GatewayClassParameters"].read_text())
    (version,) = document["spec"]["versions"]
    assert document["spec"]["scope"] == "Cluster"
    assert "subresources" not in version  # the controller writes no status of it
    return version["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(
    ("namespaces", "valid"),
    [
        (["platform"], True),
        (["a", "b-1", "x" * 63], True),
        ([], False),
        (["Platform"], False),
        (["-a"], False),
        (["a."], False),
        (["x" * 64], False),
        ([f"n{i}" for i in range(65)], False),
    ],
)
def test_the_crd_and_the_model_accept_the_same_namespace_lists(namespaces, valid):
    document = {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayClassParameters",
        "metadata": {"name": "p"},
        "spec": {"allowedGatewayNamespaces": namespaces},
    }
    assert Validator(crd_schema()).is_valid(document) is valid
    try:
        GatewayClassParameters.model_validate(document)
    except ValidationError:
        loaded = False
    else:
        loaded = True
    assert loaded is valid


def test_the_controller_watches_the_kind_and_the_install_lets_it():
    assert GATEWAY_CLASS_PARAMETERS in WATCHED
    assert BY_KIND["GatewayClassParameters"].namespaced is False
    # Optional: without the CRD none is known, which refuses classes naming one (tested above).
    assert GATEWAY_CLASS_PARAMETERS.optional
    calls = {("list", "mcp-oauth-gateway.dev", "gatewayclassparameters")}
    calls.add(("watch", "mcp-oauth-gateway.dev", "gatewayclassparameters"))
    assert calls <= deploy_rbac_rules()
    assert deploy_rbac_rules() | deploy_secret_reader_rules() == controller_rbac_calls()
