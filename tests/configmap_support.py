"""A ConfigMap volume laid out and updated the way kubelet's atomic writer does it
(kubernetes pkg/volume/util/atomic_writer.go, `AtomicWriter.Write`), for tests of `serve -f`:

- the files live in a hidden directory `..<UTC time>.<random>`;
- `..data` is a symlink to that directory's name, and each key a symlink `key -> ..data/key`;
- an update writes a new timestamped directory, creates the symlink `..data_tmp` to it, renames
  it over `..data` (the one atomic step), creates the links of new keys, removes those of keys
  gone, and removes the old directory. An unchanged payload writes nothing.

A key mounted with `subPath` is none of this: a plain file, bound once, never updated."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"


def _unchanged(directory: Path, payload: Mapping[str, str]) -> bool:
    files = {p.name for p in directory.iterdir()}
    if files != set(payload):
        return False
    return all((directory / key).read_text() == text for key, text in payload.items())


def _new_timestamped_directory(target: Path) -> Path:
    """`os.MkdirTemp(target, "..2006_01_02_15_04_05.")`: the pattern and a random number."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    while True:
        directory = target / f"{stamp}{random.getrandbits(32)}"
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        directory.chmod(0o755)
        return directory


def write_configmap(target: Path, payload: Mapping[str, str]) -> bool:
    """Project `payload` (key → content) into `target` as kubelet does; False when nothing
    changed (kubelet then writes nothing)."""
    target.mkdir(parents=True, exist_ok=True)
    data = target / DATA
    old = os.readlink(data) if data.is_symlink() else None
    removed: set[str] = set()
    if old is not None:
        removed = {p.name for p in (target / old).iterdir()} - set(payload)
        if _unchanged(target / old, payload):
            return False
    directory = _new_timestamped_directory(target)
    for key, text in payload.items():
        path = directory / key
        path.write_text(text)
        path.chmod(0o644)
    os.symlink(directory.name, target / DATA_TMP)
    os.rename(target / DATA_TMP, data)
    for key in payload:
        if not (target / key).is_symlink():
            os.symlink(f"{DATA}/{key}", target / key)
    for key in removed:
        (target / key).unlink()
    if old is not None:
        shutil.rmtree(target / old)
    return True


def subpath_file(target: Path, text: str) -> Path:
    """A key mounted with `subPath`: a plain file, never updated by kubelet."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target
