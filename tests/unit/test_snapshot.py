from __future__ import annotations

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths

from .resources_fixture import BASE, policy, write


def build(tmp_path, text):
    return build_snapshot(load_paths([write(tmp_path, text)]))


def conditions(report) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in report.conditions}


def test_valid_policy_is_accepted_and_attached(tmp_path):
    snapshot = build(tmp_path, BASE + policy())
    assert snapshot.ok
    cond = conditions(snapshot.policies[0])
    assert cond["Accepted"][:2] == (True, "Valid")
    assert cond["Attached"][:2] == (True, "Attached")
    assert snapshot.keysets.keys() == {"http://idp.internal:9000/application/o/mcp/jwks/"}
    assert dict(snapshot.discovery_urls) == {
        "http://idp.internal:9000/application/o/mcp/.well-known/openid-configuration": 300.0
    }
    routes = snapshot.listeners[8080]
    assert routes[0].match_value == "/.well-known/oauth-authorization-server/mcp"
    assert routes[0].target.authority == "127.0.0.1:9"


def test_keyset_unavailable_until_fetched(tmp_path):
    snapshot = build(tmp_path, BASE + policy())
    control = ControlPlane(snapshot)
    resolved = {c.type: c for c in control.conditions(snapshot.policies[0])}["ResolvedRefs"]
    assert not resolved.status
    assert resolved.reason == "KeysetUnavailable"
    assert "not yet fetched" in resolved.message


def test_bad_cel_and_missing_client_id_make_policy_invalid(tmp_path):
    snapshot = build(tmp_path, BASE + policy(client_id=None, rules=("jwt.groups.contanis(1)",)))
    cond = conditions(snapshot.policies[0])
    assert cond["Accepted"][:2] == (False, "Invalid")
    assert "mcp.clientId is required when provider is ProviderB" in cond["Accepted"][2]
    assert "matchExpressions[0]: invalid CEL" in cond["Accepted"][2]
    assert "contanis" in cond["Accepted"][2]
    assert cond["Attached"][:2] == (False, "Pending")
    # the route stays governed by the invalid policy, so it fails closed
    assert snapshot.listeners[8080][0].policy.invalid


def test_provider_b_audience_and_issuer_rules(tmp_path):
    snapshot = build(
        tmp_path, BASE + policy(audiences="[other]", issuer="http://idp/application/o/mcp")
    )
    message = conditions(snapshot.policies[0])["Accepted"][2]
    assert "audiences must contain mcp.clientId 'mcp-public'" in message
    assert "must end with '/'" in message


def test_missing_target_route(tmp_path):
    snapshot = build(tmp_path, BASE + policy(target="nope"))
    cond = conditions(snapshot.policies[0])
    assert cond["Accepted"][0]
    assert cond["Attached"][:2] == (False, "TargetNotFound")
    assert "HTTPRoute default/nope not found" in cond["Attached"][2]
    assert snapshot.listeners[8080][0].policy is None


def test_second_policy_on_same_route_conflicts(tmp_path):
    snapshot = build(tmp_path, BASE + policy(name="a") + policy(name="b"))
    by_name = {p.key: conditions(p) for p in snapshot.policies}
    assert by_name["default/a"]["Attached"][0]
    assert by_name["default/b"]["Attached"][:2] == (False, "Conflicted")


def test_route_without_gateway_and_missing_backend(tmp_path):
    text = BASE.replace("parentRefs: [{name: gw}]", "parentRefs: [{name: other}]").replace(
        "backendRefs: [{name: backend}]", "backendRefs: [{name: missing}]"
    )
    snapshot = build(tmp_path, text + policy())
    assert any("Gateway default/other not found" in e for e in snapshot.errors)
    assert any("GatewayBackend default/missing not found" in e for e in snapshot.errors)
    assert conditions(snapshot.policies[0])["Attached"][1] == "TargetNotFound"


def test_service_must_be_external_name_in_standalone(tmp_path):
    text = BASE.replace(
        "spec: {type: ExternalName, externalName: idp.internal}",
        "spec: {type: ClusterIP, selector: {app: x}}",
    )
    message = conditions(build(tmp_path, text + policy()).policies[0])["Accepted"][2]
    assert "standalone mode resolves only type ExternalName" in message


def test_transformation_fields_are_validated(tmp_path):
    from mcp_oauth_gateway.resources import load_paths as load

    block = (
        "    transformation:\n      request:\n        set:\n"
        "          - {name: 'Bad Header', value: 'jwt.sub'}\n"
        "          - {name: Authorization, value: 'jwt.sub'}\n"
        "    authorization:\n"
    )
    errors = load([write(tmp_path, BASE + policy().replace("    authorization:\n", block))]).errors
    assert any("'Bad Header' is not a valid HTTP header name" in e for e in errors), errors
    assert any("the gateway manages 'Authorization' itself" in e for e in errors), errors
    bad_cel = (
        "    transformation:\n      request:\n        set:\n"
        "          - {name: X-User, value: 'jwt.sub.nosuch()'}\n    authorization:\n"
    )
    snapshot = build(tmp_path, BASE + policy().replace("    authorization:\n", bad_cel))
    message = conditions(snapshot.policies[0])["Accepted"][2]
    assert "spec.traffic.transformation.request.set[0].value: invalid CEL" in message


def test_tool_rules_are_compiled_at_load_with_the_mcp_variable(tmp_path):
    block = (
        "  backend:\n    mcp:\n      authorization:\n        policy:\n"
        "          matchExpressions: ['mcp.tool.name == \"add\"', 'mcp.tool.name ==']\n"
    )
    snapshot = build(tmp_path, BASE + policy() + block)
    message = conditions(snapshot.policies[0])["Accepted"][2]
    assert "spec.backend.mcp.authorization.policy.matchExpressions[1]: invalid CEL" in message
    assert "matchExpressions[0]" not in message
    good = build(tmp_path, BASE + policy() + block.replace(", 'mcp.tool.name =='", ""))
    compiled = good.policies[0]
    assert conditions(compiled)["Accepted"][0] is True, conditions(compiled)


def test_redis_urls_must_name_redis(tmp_path):
    rate = (
        "    rateLimit: {key: 'jwt.sub', requests: 5, window: 1m, "
        "redisUrl: 'http://cache:6379'}\n    authorization:\n"
    )
    broker = "        provider: ProviderB\n        broker: {redisUrl: 'memcached://x'}\n"
    text = BASE + policy().replace("    authorization:\n", rate, 1).replace(
        "        provider: ProviderB\n", broker, 1
    )
    errors = load_paths([write(tmp_path, text)]).errors
    assert any(
        "rateLimit.redisUrl" in e and "'http://cache:6379' is not a Redis URL" in e for e in errors
    ), errors
    assert any(
        "broker.redisUrl" in e and "'memcached://x' is not a Redis URL" in e for e in errors
    ), errors


def test_redis_urls_may_name_a_sentinel_set_or_a_cluster(tmp_path):
    def errors_for(broker_url: str, rate_url: str) -> list[str]:
        rate = (
            "    rateLimit: {key: 'jwt.sub', requests: 5, window: 1m, "
            f"redisUrl: '{rate_url}'}}\n    authorization:\n"
        )
        broker = f"        provider: ProviderB\n        broker: {{redisUrl: '{broker_url}'}}\n"
        text = BASE + policy().replace("    authorization:\n", rate, 1).replace(
            "        provider: ProviderB\n", broker, 1
        )
        return load_paths([write(tmp_path, text)]).errors

    good = errors_for(
        "redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster/0?acks=1",
        "redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001/",
    )
    assert not [e for e in good if "redisUrl" in e], good
    bad = errors_for("redis+sentinel://:pw@10.0.0.1:26379/", "redis+cluster://:pw@h:7000/?acks=x")
    assert any("broker.redisUrl" in e and "name the Sentinel service" in e for e in bad), bad
    assert any("rateLimit.redisUrl" in e and "acks='x'" in e for e in bad), bad
    assert not any("pw" in e for e in bad), bad
