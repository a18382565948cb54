"""What the incremental build cannot know from the objects is read at every build: a policy's
secret from a file or an environment variable, a backend's CA file. A reload of other files
serves the value they hold now, as a build from scratch does."""

from __future__ import annotations

from mcp_oauth_gateway.controlplane.watch import ReloadCaches, load_into
from tls_support import TestCa
from unit.resources_fixture import BASE, policy

SECRET = """\
  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: {env: CACHE_TEST_SECRET}
"""


def test_a_secret_from_the_environment_is_read_again_at_every_build(tmp_path, monkeypatch):
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "policy.yaml").write_text(policy() + SECRET)
    caches = ReloadCaches()
    monkeypatch.setenv("CACHE_TEST_SECRET", "before")
    first = load_into([tmp_path], caches).listeners[8080][0]
    monkeypatch.setenv("CACHE_TEST_SECRET", "after")
    # Another file changes: the policy's own text does not.
    (tmp_path / "base.yaml").write_text(BASE.replace("maxAge: 86400", "maxAge: 600"))
    second = load_into([tmp_path], caches).listeners[8080][0]
    for route, value in ((first, b"before"), (second, b"after")):
        assert route.policy is not None
        assert route.policy.credentials is not None
        assert route.policy.credentials.secret_header is not None
        assert route.policy.credentials.secret_header.value == value


def test_a_backends_ca_file_is_read_again_at_every_build(tmp_path):
    ca_file = TestCa("before").write(tmp_path / "ca.pem")
    tls = f"{{name: t, static: {{host: 127.0.0.1, port: 9443, tls: {{caFile: {ca_file}}}}}}}"
    config = tmp_path / "config"
    config.mkdir()
    (config / "base.yaml").write_text(
        BASE.replace("{name: t, static: {host: 127.0.0.1, port: 9}}", tls)
    )
    (config / "policy.yaml").write_text(policy())
    caches = ReloadCaches()
    first = load_into([config], caches).listeners[8080][0].target
    after = TestCa("after")
    after.write(ca_file)
    (config / "policy.yaml").write_text(policy(rules=('"operators" in jwt.groups',)))
    second = load_into([config], caches).listeners[8080][0].target
    assert first is not None
    assert second is not None
    assert first.tls is not None
    assert second.tls is not None
    assert second.tls.ca_pem == after.pem != first.tls.ca_pem
