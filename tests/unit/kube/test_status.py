"""Status merging: transition times kept while a condition's status holds, other controllers'
entries never touched, an unchanged status not written."""

from __future__ import annotations

from mcp_oauth_gateway.controlplane.status import Condition, ListenerStatus, ObjectStatus
from mcp_oauth_gateway.kube import status
from mcp_oauth_gateway.kube.objects import Invalid

OURS = "mcp-oauth-gateway.dev/gateway-controller"
THEIRS = "example.com/other"


def cond(type_: str, ok: bool, at: str, reason: str = "R", message: str = "m") -> dict[str, object]:
    return Condition(type_, ok, reason, message, 1, at).as_dict()


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    current = [cond("Accepted", True, "T1"), cond("Attached", False, "T1")]
    wanted = [cond("Accepted", True, "T2", message="new"), cond("Attached", True, "T2")]
    merged = status.merge_conditions(current, wanted)
    assert merged[0]["lastTransitionTime"] == "T1"
    assert merged[0]["message"] == "new"
    assert merged[1]["lastTransitionTime"] == "T2"


def test_route_status_keeps_other_controllers_entries_and_replaces_ours() -> None:
    ref = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}
    theirs = {"parentRef": {**ref, "name": "x"}, "controllerName": THEIRS, "conditions": []}
    old_ours = {
        "parentRef": ref,
        "controllerName": OURS,
        "conditions": [cond("Accepted", True, "T1")],
    }
    gone = {"parentRef": {**ref, "name": "gone"}, "controllerName": OURS, "conditions": []}
    current = {"parents": [theirs, old_ours, gone]}
    wanted = [{"parentRef": ref, "conditions": [cond("Accepted", True, "T2")]}]
    merged = status.route_status(current, wanted, OURS)
    assert merged["parents"][0] == theirs
    assert len(merged["parents"]) == 2
    ours = merged["parents"][1]
    assert ours["controllerName"] == OURS
    assert ours["conditions"][0]["lastTransitionTime"] == "T1"


def test_gateway_listener_whose_port_is_not_bound_is_not_programmed() -> None:
    computed = ObjectStatus(
        (
            Condition("Accepted", True, "Accepted", "ok", 1, "T"),
            Condition("Programmed", True, "Programmed", "ok", 1, "T"),
        ),
        listeners=(
            ListenerStatus(
                "http",
                1,
                (
                    Condition("Accepted", True, "Accepted", "ok", 1, "T"),
                    Condition("Programmed", True, "Programmed", "ok", 1, "T"),
                ),
            ),
        ),
    )
    raw = {"spec": {"listeners": [{"name": "http", "port": 8080}]}}
    unbound = status.unbound_listeners(raw, {8080: "cannot listen on 0.0.0.0:8080: in use"})
    result = status.gateway_status({}, computed, unbound)
    by_type = {c["type"]: c for c in result["conditions"]}
    assert by_type["Accepted"]["status"] == "True"
    assert by_type["Programmed"]["status"] == "False"
    assert "in use" in by_type["Programmed"]["message"]
    listener = {c["type"]: c for c in result["listeners"][0]["conditions"]}
    assert listener["Accepted"]["reason"] == "PortUnavailable"
    assert listener["Programmed"]["status"] == "False"
    assert status.gateway_status({}, computed)["conditions"][1]["status"] == "True"


def test_invalid_object_is_not_accepted_and_names_every_problem() -> None:
    invalid = Invalid("GatewayPolicy", "apps", "p", 3, ("spec.a: bad", "spec.b: worse"))
    (accepted,) = status.invalid_conditions(invalid, "T")
    assert (accepted.status, accepted.reason, accepted.observed_generation) == (False, "Invalid", 3)
    assert "spec.a: bad" in accepted.message
    assert "spec.b: worse" in accepted.message


def test_parent_refs_default_to_the_route_namespace() -> None:
    raw = {"spec": {"parentRefs": [{"name": "gw"}, {"name": "g2", "namespace": "x"}, "junk"]}}
    refs = status.parent_refs(raw)
    assert [status.parent_gateway(r, "apps") for r in refs] == ["apps/gw", "x/g2"]
    assert status.parent_refs({"spec": {"parentRefs": "nope"}}) == []
