"""The documentation's reference pages (docs/reference/) are what tools/gen_reference.py makes of
the CRDs and the models: committed up to date, one per kind the gateway reads, every field."""

from __future__ import annotations

import re
import sys
from types import ModuleType

import pytest
import yaml

from support import ROOT, tool_module

KINDS = ("GatewayPolicy", "GatewayBackend", "Gateway", "HTTPRoute", "ReferenceGrant")
KINDS += ("GatewayClass", "Service", "GatewayClassParameters")


def generator() -> ModuleType:
    """tools/gen_reference.py."""
    return tool_module("gen_reference")


def test_committed_reference_pages_are_what_the_generator_makes() -> None:
    gen = generator()
    rendered = gen.render()
    for path, text in rendered.items():
        committed = path.read_text(encoding="utf-8") if path.is_file() else ""
        assert committed == text, f"{path.relative_to(ROOT)} is out of date: run {gen.REGENERATE}"
    assert gen.main(["--check"]) == 0
    reference = [p.name for p in rendered if p.parent.name == "reference"]
    assert sorted(reference) == sorted(f"{k.lower()}.md" for k in KINDS)


def test_regenerating_is_a_make_target() -> None:
    gen = generator()
    target = gen.REGENERATE.removeprefix("make ")
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^{target}:.*\n\t\$\(PY\) tools/gen_reference.py$", makefile, re.M)


def test_every_field_of_the_crds_has_a_row() -> None:
    gen = generator()
    for kind, file in gen.CRDS.items():
        document = next(yaml.safe_load_all((gen.CRD_DIR / file).read_text()))
        schema = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        page = gen.crd_page(kind, file)
        for section in ("spec", "status"):
            # A kind whose status the controller does not write has none.
            for row in gen.crd_rows(schema["properties"].get(section, {}), section):
                assert f"| `{row.path}` |" in page, (kind, row.path)
                assert row.description, (kind, row.path)


def test_every_field_of_the_gateway_api_kinds_is_described() -> None:
    gen = generator()
    for kind, model in gen.MODELS.items():
        page = gen.model_page(kind, model)
        assert f"# {kind}\n" in page
        for alias in ("apiVersion", "kind", "metadata.name", "spec"):
            assert f"| `{alias}` |" in page, (kind, alias)
    route = gen.model_page("HTTPRoute", gen.MODELS["HTTPRoute"])
    path_type = "| `spec.rules[].matches[].path.type` | string | no | `PathPrefix` |"
    assert path_type in route
    assert "`PathPrefix`, `Exact`" in route


def test_the_pipeline_page_lists_every_declared_stage_in_order() -> None:
    """docs/concepts/pipeline.md's diagram and stage lists are written from serving.stages:
    the gateway's own steps (ENTRY), then the route's (PIPELINE)."""
    from mcp_oauth_gateway.serving.stages import ENTRY, PIPELINE

    generator()
    doc = sys.modules["_pipeline_doc"]
    page = doc.PAGE.read_text(encoding="utf-8")
    section = page[page.index(doc.BEGIN) : page.index(doc.END)]
    listed = re.findall(r"^\| \d+ \| `([a-z-]+)` \|", section, re.M)
    way = [*ENTRY, *PIPELINE]
    assert listed == [stage.name for stage in way]
    for stage in way:
        assert stage.does in section
    drawing = page[page.index(doc.DIAGRAM_BEGIN) : page.index(doc.DIAGRAM_END)]
    drawn = re.findall(r"^ ([a-z-]+) ─", drawing, re.M)
    assert drawn == [stage.name for stage in way]
    # The markers are what the generator needs: without them it stops, naming them.
    for marker in (doc.END, doc.DIAGRAM_END):
        with pytest.raises(SystemExit, match="markers"):
            doc.page(page.replace(marker, ""))
