"""Which files a writer still has open (`controlplane/writers.py`), told by the kernel's inotify
events on real files: written and not closed is busy; closed, renamed into place (editors,
`sed -i`, kubelet's `..data` swap), created or removed is not.

Events arrive in order on one inotify queue, so a later write to another file, once seen,
proves the earlier events were handled: that is how "not busy" is waited for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from configmap_support import write_configmap
from mcp_oauth_gateway.controlplane.writers import OpenWrites, watched_directories
from support import wait_until


@pytest.fixture
def writes(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "policy.yaml").write_text("a: 1\n")
    watcher = OpenWrites()
    assert watcher.start([tmp_path / "config"]) is None
    assert watcher.active
    try:
        yield watcher, tmp_path / "config"
    finally:
        watcher.stop()


def settled(watcher: OpenWrites, directory: Path) -> None:
    """Until every event before now was handled: a marker file written after them is seen."""
    marker = directory / "marker.yaml"
    with marker.open("w") as handle:
        handle.write("x")
        handle.flush()
        wait_until(lambda: watcher.busy([str(marker)]), 10, "the marker's write to be seen")
    wait_until(lambda: not watcher.busy([str(marker)]), 10, "the marker's close to be seen")


def test_a_file_written_and_not_closed_is_busy_until_its_writer_closes_it(writes):
    watcher, config = writes
    policy = str(config / "policy.yaml")
    with open(policy, "w") as handle:  # truncated: already a change
        wait_until(lambda: watcher.busy([policy]) == (policy,), 10, "the truncation")
        handle.write("a: 2\n")
        handle.flush()
        settled(watcher, config)
        assert watcher.busy([policy]) == (policy,)
    wait_until(lambda: watcher.busy([policy]) == (), 10, "the close")


def test_a_file_renamed_into_place_is_complete_at_once(writes):
    watcher, config = writes
    staged = config / ".policy.yaml.tmp.yaml"
    with staged.open("w") as handle:
        handle.write("a: 3\n")
        handle.flush()
        wait_until(lambda: watcher.busy([str(staged)]), 10, "the staged file's write")
    os.replace(staged, config / "policy.yaml")
    settled(watcher, config)
    assert watcher.busy([str(config / "policy.yaml"), str(staged)]) == ()


def test_metadata_changes_and_readers_are_not_writes(writes):
    watcher, config = writes
    policy = config / "policy.yaml"
    policy.chmod(0o600)
    os.utime(policy)
    with policy.open("r+"):  # opened for writing, nothing written
        pass
    policy.read_text()
    settled(watcher, config)
    assert watcher.busy([str(policy)]) == ()


def test_a_configmap_update_is_never_busy(tmp_path):
    volume = tmp_path / "volume"
    write_configmap(volume, {"policy.yaml": "a: 1\n"})
    watcher = OpenWrites()
    assert watcher.start([volume]) is None
    try:
        write_configmap(volume, {"policy.yaml": "a: 2\n"})
        settled(watcher, volume)
        assert watcher.busy([str(volume / "policy.yaml")]) == ()
        # Written in place through its link (not how kubelet does it): busy while open.
        with (volume / "policy.yaml").open("a") as handle:
            handle.write("b: 1\n")
            handle.flush()
            wait_until(lambda: watcher.busy([str(volume / "policy.yaml")]), 10, "the write")
    finally:
        watcher.stop()


def test_the_real_directory_of_a_symlinked_file_is_watched_too(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "policy.yaml").write_text("a: 1\n")
    config = tmp_path / "config"
    config.mkdir()
    os.symlink(elsewhere / "policy.yaml", config / "policy.yaml")
    assert watched_directories([config]) == {
        os.path.realpath(config): True,
        os.path.realpath(elsewhere): False,
    }
    assert watched_directories([config / "policy.yaml"]) == {
        os.path.realpath(config): False,
        os.path.realpath(elsewhere): False,
    }
    watcher = OpenWrites()
    assert watcher.start([config]) is None
    try:
        with (elsewhere / "policy.yaml").open("a") as handle:
            handle.write("b: 1\n")
            handle.flush()
            wait_until(lambda: watcher.busy([str(config / "policy.yaml")]), 10, "the write")
    finally:
        watcher.stop()
