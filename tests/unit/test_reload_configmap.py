"""`serve -f DIR` where DIR is a ConfigMap volume (`resources/loader.py`, `watch.fingerprint`):
kubelet's own `..` entries are skipped, each key is read through its `..data` link, and a swap
of `..data` changes every file at once; a key mounted with `subPath` is a plain file."""

from __future__ import annotations

import os

from configmap_support import DATA, subpath_file, write_configmap
from mcp_oauth_gateway.controlplane.builder import build_snapshot
from mcp_oauth_gateway.controlplane.watch import fingerprint
from mcp_oauth_gateway.resources.loader import expand_paths, load_paths

from .resources_fixture import BASE, policy


def payload(rules: tuple[str, ...] = ('"mcp-agent" in jwt.groups',)) -> dict[str, str]:
    return {"gateway.yaml": BASE, "policy.yaml": policy(rules=rules)}


def test_a_configmap_directory_loads_each_key_once_through_its_link(tmp_path):
    volume = tmp_path / "config"
    write_configmap(volume, payload())
    hidden = sorted(p.name for p in volume.iterdir() if p.name.startswith(".."))
    assert hidden == [os.readlink(volume / DATA), DATA]
    assert (volume / "policy.yaml").is_symlink()
    loaded = load_paths([volume])
    assert loaded.errors == []
    assert [str(f) for f in loaded.files] == [
        str(volume / "gateway.yaml"),
        str(volume / "policy.yaml"),
    ]
    sources = {item.source.path for item in loaded.resources}
    assert sources == {str(volume / "gateway.yaml"), str(volume / "policy.yaml")}
    assert build_snapshot(loaded).ok


def test_a_swap_of_data_changes_every_file_and_is_read_whole(tmp_path):
    volume = tmp_path / "config"
    write_configmap(volume, payload())
    before = fingerprint([volume])
    assert write_configmap(volume, {**payload(('"operators" in jwt.groups',))})
    after = fingerprint([volume])
    # Every file's real path moved to the new timestamped directory, the unchanged one too.
    assert [entry[0] for entry in before] == [entry[0] for entry in after]
    assert all(b[1] != a[1] for b, a in zip(before, after, strict=True))
    assert all(os.path.dirname(a[1]) == os.path.realpath(volume / DATA) for a in after)
    text = (volume / "policy.yaml").read_text()
    assert "operators" in text
    assert "operators" in str(load_paths([volume]).resources[-1].resource)
    # Nothing changed: kubelet writes nothing, and nothing looks changed.
    assert not write_configmap(volume, payload(('"operators" in jwt.groups',)))
    assert fingerprint([volume]) == after


def test_a_key_removed_from_the_configmap_is_no_longer_read(tmp_path):
    volume = tmp_path / "config"
    write_configmap(volume, {**payload(), "extra.yaml": "# nothing\n"})
    assert len(expand_paths([volume])[0]) == 3
    write_configmap(volume, payload())
    files, errors = expand_paths([volume])
    assert errors == []
    assert [f.name for f in files] == ["gateway.yaml", "policy.yaml"]


def test_a_key_mounted_with_subpath_is_a_plain_file_beside_a_volume(tmp_path):
    volume = tmp_path / "config"
    write_configmap(volume, {"gateway.yaml": BASE})
    mounted = subpath_file(tmp_path / "etc" / "policy.yaml", policy())
    loaded = load_paths([volume, mounted])
    assert loaded.errors == []
    assert build_snapshot(loaded).ok
    before = fingerprint([volume, mounted])
    write_configmap(volume, {"gateway.yaml": BASE + "\n# edited\n"})
    after = fingerprint([volume, mounted])
    assert before[-1] == after[-1]  # the subPath file: as it was
    assert before[0] != after[0]


def test_hidden_kubelet_entries_are_skipped_but_symlinked_directories_are_read(tmp_path):
    volume = tmp_path / "config"
    write_configmap(volume, {"gateway.yaml": BASE})
    # A projected key with a path (`items: [{key: p, path: sub/policy.yaml}]`): `sub` is a
    # link into ..data, a directory reached through a symlink.
    data = volume / os.readlink(volume / DATA)
    (data / "sub").mkdir()
    (data / "sub" / "policy.yaml").write_text(policy())
    os.symlink(f"{DATA}/sub", volume / "sub")
    os.symlink(".", volume / "sub-loop")  # a loop is read once
    files, errors = expand_paths([volume])
    assert errors == []
    assert [str(f.relative_to(volume)) for f in files] == ["gateway.yaml", "sub/policy.yaml"]


def test_the_fingerprint_names_where_each_file_really_is(tmp_path):
    real = tmp_path / "real"
    (real / "nested").mkdir(parents=True)
    (real / "plain.yaml").write_text(BASE)
    (real / "nested" / "deep.yaml").write_text(policy())
    (tmp_path / "elsewhere.yaml").write_text("")
    (real / "linked.yaml").symlink_to(tmp_path / "elsewhere.yaml")
    (tmp_path / "through").symlink_to(real, target_is_directory=True)
    found = fingerprint([tmp_path / "through"])
    assert [(name, where) for name, where, *_ in found] == [
        (str(path), os.path.realpath(path)) for path in expand_paths([tmp_path / "through"])[0]
    ]
    assert {where for _, where, *_ in found} == {
        os.path.realpath(path)
        for path in (
            tmp_path / "elsewhere.yaml",
            real / "nested" / "deep.yaml",
            real / "plain.yaml",
        )
    }
