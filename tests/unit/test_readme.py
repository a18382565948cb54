"""The README stays short and points at the documentation site: it opens with `make demo` and
`make test`, names the test targets it always did, and every file it links to exists."""

from __future__ import annotations

import re

from support import ROOT

README = ROOT / "README.md"
OPENING = (
    "# mcp-oauth-gateway\n\n```sh\n"
    "make demo   # installs the gateway and runs the whole demo: sign in at "
    "http://127.0.0.1:8080/mcp\n"
    "make test   # installs everything (Python packages, node peers, chromium, redis, Keycloak, "
    "a Kubernetes API server) and runs the tests\n```\n"
)


def test_the_readme_opens_with_make_demo_and_make_test():
    assert README.read_text().startswith(OPENING)


def test_every_make_target_the_readme_names_exists():
    text = README.read_text()
    makefile = (ROOT / "Makefile").read_text()
    named = set(re.findall(r"`make ([a-z-]+)", text))
    assert {"demo", "test", "test-unit", "test-contracts", "docs"} <= named
    for target in named:
        assert re.search(rf"^{target}:", makefile, re.M), target


def test_every_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        assert (ROOT / link).exists(), link


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) < 120
