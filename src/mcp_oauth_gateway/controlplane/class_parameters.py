"""Kubernetes mode: what a GatewayClass of ours allows, read from the GatewayClassParameters its
`spec.parametersRef` names: which namespaces may own its Gateways.

Gateway API has no field for this; without parametersRef, Gateways of every namespace are
served (as before the kind existed). A parametersRef that cannot be followed fails closed: the
class is not accepted and none of its Gateways is served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..resources.models import POLICY_API_GROUP, GatewayClass, GatewayClassParameters
from .objects import Entry

PARAMETERS_KIND = "GatewayClassParameters"


@dataclass(frozen=True, slots=True)
class ClassRule:
    """What one of our GatewayClasses allows, or why it is not accepted."""

    # The namespaces that may own Gateways of the class; None: every namespace.
    namespaces: frozenset[str] | None = None
    # Why the class is not accepted (reason InvalidParameters): its Gateways are not served.
    invalid: str | None = None

    def refusal(self, class_name: str, namespace: str) -> str | None:
        """Why a Gateway of this class in `namespace` is not served, or None."""
        if self.invalid is not None:
            return (
                f"GatewayClass {class_name} is not accepted ({self.invalid}); no Gateway of "
                "the class is served until it is"
            )
        if self.namespaces is None or namespace in self.namespaces:
            return None
        return (
            f"GatewayClass {class_name} does not allow Gateways in namespace {namespace} (its "
            f"parametersRef allows {', '.join(sorted(self.namespaces))}): move the Gateway to "
            "one of those namespaces, use another GatewayClass, or have a cluster admin add the "
            f"namespace to the class's {PARAMETERS_KIND} spec.allowedGatewayNamespaces"
        )


def class_rule(
    entry: Entry[GatewayClass], parameters: Mapping[str, Entry[GatewayClassParameters]]
) -> ClassRule:
    """The rule a class's parametersRef gives (see the module's docstring)."""
    ref = entry.resource.spec.parameters_ref
    if ref is None:
        return ClassRule()
    if ref.group != POLICY_API_GROUP or ref.kind != PARAMETERS_KIND:
        return ClassRule(
            invalid=(
                f"spec.parametersRef names {ref.kind} ({ref.group or 'core'}); this controller "
                f"reads only {PARAMETERS_KIND} ({POLICY_API_GROUP}): name one, or remove "
                "parametersRef to serve Gateways of every namespace"
            )
        )
    if ref.namespace:
        return ClassRule(
            invalid=(
                f"spec.parametersRef.namespace: {PARAMETERS_KIND} is cluster-scoped; remove "
                "the namespace"
            )
        )
    found = parameters.get(ref.name)
    if found is None:
        return ClassRule(
            invalid=(
                f"spec.parametersRef: {PARAMETERS_KIND} {ref.name} not found, or not valid "
                f"(kubectl get gatewayclassparameters {ref.name} -o yaml; the controller's log "
                "names what is wrong with it)"
            )
        )
    return ClassRule(namespaces=frozenset(found.resource.spec.allowed_gateway_namespaces))
