"""`jwtAuthentication.mcp.workloadIdentity` as configuration: what the models refuse, what the
compiled policy needs (Broker mode, a fixed resource, each issuer once, a cluster for the
cluster's own keys), and what it compiles to (the keysets fetched, the issued tokens' issuer)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.controlplane import Deployment, build_snapshot
from mcp_oauth_gateway.controlplane.cluster import Cluster
from mcp_oauth_gateway.controlplane.jwks import CLUSTER_JWKS_URL
from mcp_oauth_gateway.controlplane.policies import compile_policy, fetch_targets
from mcp_oauth_gateway.controlplane.service_refs import ServiceRefs
from mcp_oauth_gateway.controlplane.snapshot import KeysetSource
from mcp_oauth_gateway.resources import load_paths
from unit.broker.workload_support import CLUSTER, RESOURCE, policy_yaml
from unit.gateway_support import objects
from unit.resources_fixture import BASE, write

WORKLOAD = "spec.traffic.jwtAuthentication.mcp.workloadIdentity"


def problems(tmp_path, text: str) -> str:
    """Every load error and the policy's Accepted message, as one text."""
    loaded = load_paths([write(tmp_path, BASE + text)])
    snapshot = build_snapshot(loaded)
    messages = list(snapshot.errors)
    for report in snapshot.policies:
        messages += [c.message for c in report.conditions if c.type == "Accepted" and not c.status]
    return "\n".join(messages)


def test_the_example_policy_is_valid_and_fetches_each_issuers_keys(tmp_path):
    loaded = load_paths([write(tmp_path, BASE + policy_yaml())])
    snapshot = build_snapshot(loaded)
    assert snapshot.ok, problems(tmp_path, policy_yaml())
    [report] = snapshot.policies
    assert report.keyset_owners[1:] == (
        f"workloadIdentity.issuers[0] (issuer {CLUSTER})",
        "workloadIdentity.issuers[1] (issuer https://spire.example)",
    )
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.mcp is not None
    workload = route.policy.mcp.workload
    assert workload is not None
    assert workload.token_issuer == RESOURCE
    assert workload.audience == RESOURCE
    assert [w.scopes for w in workload.issuers] == [("mcp:tools", "mcp:read"), ()]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ("authorizationServerMode: Broker", "authorizationServerMode: Facade"),
            f"{WORKLOAD} is only used when authorizationServerMode is Broker",
        ),
        (
            (f"resourceMetadata: {{resource: {RESOURCE}, ", "resourceMetadata: {"),
            "spec.traffic.jwtAuthentication.mcp.resourceMetadata.resource is required with "
            "workloadIdentity",
        ),
        (
            ("- issuer: https://spire.example", f"- issuer: {CLUSTER}"),
            f"{WORKLOAD}.issuers[1].issuer repeats {WORKLOAD}.issuers[0]",
        ),
        (
            ("'jwt.sub == \"spiffe://example.org/agent\"'", "'jwt.sub =='"),
            f"{WORKLOAD}.issuers[1].authorization.policy.matchExpressions[0]: invalid CEL",
        ),
    ],
)
def test_what_the_grant_needs_is_named_with_its_field(tmp_path, change, expected):
    text = policy_yaml()
    assert change[0] in text
    found = problems(tmp_path, text.replace(change[0], change[1], 1))
    assert expected in found, found


def test_the_gateways_own_issuer_is_neither_a_workload_issuer_nor_a_provider(tmp_path):
    text = policy_yaml().replace("- issuer: https://spire.example", f"- issuer: {RESOURCE}")
    found = problems(tmp_path, text)
    assert f"{WORKLOAD}.issuers[1].issuer is the gateway's own issuer" in found, found
    # A Keycloak-like provider whose issuer is the resource's URL itself.
    text = policy_yaml().replace("- issuer: http://idp/application/o/mcp/", f"- issuer: {RESOURCE}")
    text = text.replace("provider: ProviderB", "provider: Keycloak")
    (tmp_path / "provider").mkdir()
    found = problems(tmp_path / "provider", text)
    assert "which is also a provider's issuer" in found, found


def test_the_clusters_own_keys_need_controller_mode(tmp_path):
    text = _with_kubernetes_jwks(policy_yaml())
    found = problems(tmp_path, text)
    assert f"{WORKLOAD}.issuers[0].jwks.kubernetes needs controller mode" in found, found


def test_in_a_cluster_the_clusters_own_keys_are_read_through_the_api_server():
    text = _with_kubernetes_jwks(_in_namespace(policy_yaml()))
    [policy] = objects(text)
    cluster = Cluster()
    result = compile_policy(policy, ServiceRefs({}, {}, cluster), Deployment(cluster=cluster))
    assert result.valid, result.problems
    [trusted, _] = result.compiled.workload_issuers
    assert trusted.provider.keyset == KeysetSource(url=CLUSTER_JWKS_URL, refresh=60)
    keysets, _ = fetch_targets({policy.metadata.key: result})
    assert CLUSTER_JWKS_URL in keysets


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            (
                "              scopes: [mcp:tools, mcp:read]",
                "              scopes: [offline_access]",
            ),
            "offline_access does not belong in workloadIdentity scopes",
        ),
        (("- issuer: https://spire.example", "- issuer: https://spire.example/?x=1"), "query"),
        (("audiences: [http://gw.test/mcp/oauth/token]", "audiences: []"), "audiences"),
        (
            ("              authorization:\n                action: Allow\n", "              x:\n"),
            "",
        ),
    ],
)
def test_the_models_refuse_a_malformed_issuer(tmp_path, change, expected):
    text = policy_yaml()
    assert change[0] in text, change[0]
    found = problems(tmp_path, text.replace(change[0], change[1], 1))
    assert "workloadIdentity.issuers" in found, found
    assert expected in found, found


def test_an_issuer_without_authorization_is_refused(tmp_path):
    text = policy_yaml()
    start = text.index("              authorization:\n                action: Allow")
    end = text.index("              scopes:", start)
    found = problems(tmp_path, text[:start] + text[end:])
    assert "workloadIdentity.issuers[0].authorization" in found, found
    assert "required" in found.lower(), found


def test_two_key_sources_are_refused(tmp_path):
    text = policy_yaml()
    at = text.index("jwks: {inline:", text.index("workloadIdentity"))
    text = text[:at] + text[at:].replace("jwks: {inline:", "jwks: {kubernetes: {}, inline:", 1)
    found = problems(tmp_path, text)
    assert "set exactly one of remote, inline or kubernetes" in found, found


def _with_kubernetes_jwks(text: str) -> str:
    """The cluster issuer's keys read from the API server (cache 1m)."""
    start = text.index("jwks: {inline:", text.index("workloadIdentity"))
    end = text.index("\n", start)
    return text[:start] + "jwks: {kubernetes: {cacheDuration: 1m}}" + text[end:]


def _in_namespace(text: str) -> str:
    """The policy as an object of namespace `default`, its provider's keys read through a
    Service (a tenant may not name hosts in a cluster)."""
    text = text.replace("metadata: {name: auth}", "metadata: {name: auth, namespace: default}")
    start = text.index("jwks: {inline:")
    end = text.index("\n", start)
    service = "jwks: {remote: {backendRef: {name: authentik, port: 9000}, jwksPath: /jwks/}}"
    return text[:start] + service + text[end:]
