from __future__ import annotations

from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.resources.loader import directory_files, field_path
from mcp_oauth_gateway.resources.models import parse_duration

from .resources_fixture import BASE, policy, write


def test_loads_every_kind_from_one_multi_document_file(tmp_path):
    result = load_paths([write(tmp_path, BASE + policy())])
    assert result.errors == []
    kinds = sorted(item.resource.kind for item in result.resources)
    assert kinds == ["Gateway", "GatewayBackend", "GatewayPolicy", "HTTPRoute", "Service"]


def test_directory_is_read_recursively_in_order(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "base.yaml").write_text(BASE)
    (tmp_path / "policy.yml").write_text(policy())
    (tmp_path / "notes.txt").write_text("ignored")
    result = load_paths([tmp_path])
    assert result.errors == []
    assert len(result.resources) == 5


def test_unknown_field_names_file_resource_and_path(tmp_path):
    path = write(tmp_path, BASE + policy().replace("jwksPath:", "jwksPth:"))
    errors = load_paths([path]).errors
    assert any(
        f"{path} (document 5): GatewayPolicy default/auth: "
        "spec.traffic.jwtAuthentication.providers[0].jwks.remote.jwksPth: unknown field" in e
        for e in errors
    ), errors


def test_missing_jwks_path_with_backend_ref(tmp_path):
    text = BASE + policy().replace("              jwksPath: /application/o/mcp/jwks/\n", "")
    errors = load_paths([write(tmp_path, text)]).errors
    assert any("jwks.remote: jwksPath is required with backendRef" in e for e in errors), errors


def test_unknown_kind_and_duplicates_are_reported(tmp_path):
    text = BASE + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---" + BASE
    errors = load_paths([write(tmp_path, text)]).errors
    assert any("unsupported apiVersion/kind v1/ConfigMap" in e for e in errors)
    assert any("Gateway default/gw: defined twice" in e for e in errors)


def test_missing_path_is_an_error():
    assert "no such file or directory" in load_paths(["/nonexistent/x.yaml"]).errors[0]


def test_provider_aliases_and_unknown_value(tmp_path):
    ok = load_paths([write(tmp_path, BASE + policy(provider="Authentik"))])
    assert ok.errors == []
    pol = ok.of_kind("GatewayPolicy")[0].resource
    assert pol.spec.traffic.jwt_authentication.mcp.provider == "ProviderB"
    bad = load_paths([write(tmp_path, BASE + policy(provider="Okta"))])
    assert any("allowed values: ProviderB, Authentik, Keycloak" in e for e in bad.errors)


def test_field_path_rendering():
    assert field_path(("spec", "rules", 0, "filters", 1, "cors")) == "spec.rules[0].filters[1].cors"


def test_parse_duration():
    assert parse_duration("5m") == 300
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    for bad in ("", "5", "m", "1d"):
        try:
            parse_duration(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_cors_origins_must_be_origins_as_browsers_send_them(tmp_path):
    for given, hint in [
        ("https://App.example", "browsers send it as 'https://app.example'"),
        ("https://app.example/path", "is not an origin"),
        ("https://*.example.com", "wildcard origins are not supported"),
        ("null", "is not an origin"),
    ]:
        text = BASE.replace('allowOrigins: ["*"]', f'allowOrigins: ["{given}"]') + policy()
        errors = load_paths([write(tmp_path, text)]).errors
        assert any("allowOrigins[0]" in e and hint in e for e in errors), (given, errors)
    fine = BASE.replace('allowOrigins: ["*"]', 'allowOrigins: ["https://app.example"]')
    assert load_paths([write(tmp_path, fine + policy())]).errors == []


def test_files_are_read_in_path_order(tmp_path):
    names = ["a-b/x.yaml", "a/x.yaml", "a/b/c.yml", "a.yaml", "B.json", "a/b-c.yaml", "a0.yaml"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    files, _ = directory_files(tmp_path)
    assert files == sorted(tmp_path / name for name in names)
