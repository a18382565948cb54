"""`serve`'s controller-mode flags: each mistake refused with one line naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_oauth_gateway.cli import EXIT_INVALID, main

VALID = """apiVersion: v1
kind: Config
current-context: test
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: test, context: {cluster: c, user: u}}]
"""
BROKEN = {
    "not-yaml": "a: [",
    "list": "- a\n- b\n",
    "empty-config": "apiVersion: v1\nkind: Config\n",
}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(VALID)
    for name, text in BROKEN.items():
        (tmp_path / f"kubeconfig-{name}").write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig /nonexistent/kubeconfig: no such file",
        ),
        (
            ["--kubeconfig", "{k}", "-f", "examples"],
            "-f reads resource files, --kubeconfig/--in-cluster",
        ),
        (["--kubeconfig", "{k}", "--workers", "2"], "--workers applies to resource files"),
        (
            ["--kubeconfig", "{k}", "--controller-name", "no-slash"],
            "--controller-name 'no-slash' must be",
        ),
        (
            ["--kubeconfig", "{k}", "--cluster-domain", "Bad_Domain"],
            "--cluster-domain 'Bad_Domain'",
        ),
        (["--kubeconfig", "{k}", "--lease-namespace", "Not OK"], "--lease-namespace 'Not OK'"),
        (["--kubeconfig", "{k}", "--lease-duration", "0.5"], "--lease-duration must be"),
        (["--kubeconfig", "{k}", "--lease-duration", "nan"], "--lease-duration must be"),
        (["--kubeconfig", "{k}", "--replicas", "0"], "--replicas must be a whole number"),
        (
            ["--kubeconfig", "{k}", "--secret-files-dir", "run/secrets"],
            "--secret-files-dir 'run/secrets' must be an absolute path",
        ),
        (
            ["--kubeconfig", "{k}", "--secret-files-dir", "/nonexistent/secrets"],
            "--secret-files-dir /nonexistent/secrets: no such directory",
        ),
        (["--in-cluster"], "--in-cluster: not running in a pod"),
        (["--kubeconfig", "{k}-not-yaml"], "cannot read it as YAML"),
        (["--kubeconfig", "{k}-list"], "not a kubeconfig (a YAML mapping of kind Config"),
        (["--kubeconfig", "{k}-empty-config"], "cannot load the API server configuration"),
        ([], "nothing to serve: give resource files with -f PATH"),
        (["--kubeconfig", "{k}", "--allow-hosts", "http://x"], "--allow-hosts 'http://x' is not"),
        (["--kubeconfig", "{k}", "--allow-hosts", "a,Team=*"], "'Team' is not a namespace name"),
        (["--kubeconfig", "{k}", "--allow-hosts", "*."], "--allow-hosts '*.'"),
        (
            ["-f", "examples/provider-b", "--allow-hosts", "*"],
            "--allow-hosts applies to controller",
        ),
    ],
)
def test_bad_flags_are_refused_with_one_line(
    flags: list[str],
    message: str,
    kubeconfig: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code = main(["serve", *(f.replace("{k}", kubeconfig) for f in flags)])
    err = capsys.readouterr().err
    assert code == EXIT_INVALID
    assert err.startswith("error: ")
    assert message in err
    assert err.count("\n") == 1


def test_the_pods_own_addresses_come_from_the_downward_api(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcp_oauth_gateway.kube.options import own_addresses

    found = {str(a) for a in own_addresses({"POD_IPS": "10.1.2.3,fd00::7", "POD_IP": "10.1.2.3"})}
    assert {"10.1.2.3", "fd00::7"} <= found
    # A value that is not an address is skipped, not an error.
    assert "10.9.9.9" in {str(a) for a in own_addresses({"POD_IPS": "bogus,10.9.9.9"})}
