"""A file of many documents, reloaded: only the documents whose text changed are parsed and
validated again, and whatever the text, the cached read says exactly what a read of the whole
file says (the same resources from the same places, the same errors). A file whose status
(inode, size, modification and change times) is the one it had when read, long after its last
change, is not read again."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.resources import loader
from mcp_oauth_gateway.resources.documents import split_documents
from mcp_oauth_gateway.resources.loader import FileCache, LoadResult, load_paths

from .fuzz_settings import FUZZ
from .resources_fixture import BASE, policy


def backend(name: str, port: int = 9) -> str:
    return (
        "apiVersion: mcp-oauth-gateway.dev/v1alpha1\nkind: GatewayBackend\n"
        f"metadata: {{name: {name}}}\n"
        f"spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: {port}}}}}]}}}}\n"
    )


def both(path: Path, cache: FileCache) -> tuple[LoadResult, LoadResult]:
    """The file read through `cache`, and read whole without one."""
    return load_paths([path], cache), load_paths([path])


def test_only_the_changed_document_of_a_large_file_is_read_again(tmp_path):
    path = tmp_path / "all.yaml"
    path.write_text("---\n".join(backend(f"b{i}") for i in range(200)))
    cache = FileCache()
    before = {
        item.resource.metadata.name: item.resource for item in load_paths([path], cache).resources
    }
    text = path.read_text().replace("name: b7}", "name: b7}\n# edited", 1)
    path.write_text(text.replace(backend("b120"), backend("b120", 10)))
    cached, whole = both(path, cache)
    assert cached.errors == whole.errors == []
    assert cached.resources == whole.resources
    for item in cached.resources:
        name = item.resource.metadata.name
        # Parsed and validated again: a new model. Not: the model of the last read.
        assert (item.resource is before[name]) is (name not in ("b7", "b120")), name
    assert cached.of_kind("GatewayBackend")[120].resource.spec.mcp.targets[0].static.port == 10


def test_a_document_moved_within_the_file_is_named_by_its_new_place(tmp_path):
    path = tmp_path / "all.yaml"
    documents = [backend(f"b{i}") for i in range(4)]
    path.write_text("---\n".join(documents))
    cache = FileCache()
    first = load_paths([path], cache).resources[3].resource
    path.write_text("---\n".join([documents[0], documents[3], *documents[1:3]]))
    cached, whole = both(path, cache)
    assert cached.resources == whole.resources
    moved = cached.resources[1]
    assert moved.resource is first  # not parsed again
    assert (moved.source.path, moved.source.document) == (str(path), 1)


def test_errors_are_those_of_the_whole_file(tmp_path):
    path = tmp_path / "all.yaml"
    good = BASE + policy()
    path.write_text(good)
    cache = FileCache()
    load_paths([path], cache)
    for broken in (
        good.replace("jwksPath:", "jwksPth:"),  # a field the model refuses: document 6
        good + "---\na: [1\n",  # YAML that does not parse: the file's own line number
        good.replace("kind: Service", "kind: Servic"),
        good + "---\n" + BASE,  # every object twice
    ):
        path.write_text(broken)
        cached, whole = both(path, cache)
        assert cached.errors == whole.errors != []
        assert cached.resources == whole.resources


# Pieces of YAML that cutting at `---` lines could get wrong if it cut where YAML does not.
TRICKY = [
    backend("plain"),
    "# only a comment\n",
    "",
    "--- " + backend("on-the-marker-line").replace("\n", "\n", 1),
    "---\t# a tab, then a comment\n" + backend("after-tab"),
    "---x: not a marker\n",
    "a: |\n  ---\n  indented, inside a block scalar\n",
    "a: |+\n  kept\n\n",
    "a: &anchor [1]\nb: *anchor\n",
    "b: *anchor\n",  # an alias to an anchor of another document: an error
    "a: 'quoted\n---\nacross'\n",  # a marker inside a quoted scalar: an error
    "[1,\n---\n2]\n",  # and inside a flow sequence
    "%YAML 1.1\n",
    "...\n",
    "a: 1\r\nb: 2\r\n",
    "\ufeffa: bom\n",
    "key: value\n---\n",
    backend("tail"),
]


@FUZZ
@given(st.lists(st.sampled_from(TRICKY), max_size=6), st.lists(st.sampled_from(TRICKY), max_size=6))
def test_a_cached_read_equals_a_whole_read_whatever_the_text(tmp_path_factory, before, after):
    path = tmp_path_factory.mktemp("docs") / "f.yaml"
    cache = FileCache()
    for pieces in (before, after):
        path.write_text("---\n".join(pieces), newline="")
        cached, whole = both(path, cache)
        assert cached.errors == whole.errors
        assert cached.resources == whole.resources


def test_what_is_never_cut():
    assert split_documents("a: 1\n---\nb: 2\n") == ["a: 1\n", "---\nb: 2\n"]
    assert split_documents("---x\n--- \n") == ["---x\n", "--- \n"]
    for whole in ("%YAML 1.1\n---\na: 1\n", "a: 1\n...\n", "a: 1\r\n---\nb: 2\r\n", "a\u2028b"):
        assert split_documents(whole) is None


def counting_reads(monkeypatch) -> list[str]:
    """The files the loader reads from now on (the real reads, counted)."""
    read: list[str] = []
    real = loader.read_content

    def counted(path: Path) -> bytes:
        read.append(path.name)
        return real(path)

    monkeypatch.setattr(loader, "read_content", counted)
    return read


def test_a_file_whose_status_did_not_change_is_not_read_again(tmp_path, monkeypatch):
    for i in range(3):
        (tmp_path / f"b{i}.yaml").write_text(backend(f"b{i}"))
    cache = FileCache(settled_after_ns=0)  # every status trusted at once (no waiting here)
    first = load_paths([tmp_path], cache)
    read = counting_reads(monkeypatch)
    again = load_paths([tmp_path], cache)
    assert read == []
    assert again.resources == first.resources
    # The same size, and the modification time set back: the change time still tells.
    path = tmp_path / "b1.yaml"
    before = path.stat()
    path.write_text(backend("b1", port=8))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    changed = load_paths([tmp_path], cache)
    assert read == ["b1.yaml"]
    assert changed.of_kind("GatewayBackend")[1].resource.spec.mcp.targets[0].static.port == 8


def test_a_file_changed_moments_ago_is_read_again_whatever_its_status(tmp_path, monkeypatch):
    (tmp_path / "b.yaml").write_text(backend("b"))
    cache = FileCache()  # a status is trusted seconds after the file's last change
    load_paths([tmp_path], cache)
    read = counting_reads(monkeypatch)
    load_paths([tmp_path], cache)
    assert read == ["b.yaml"]
