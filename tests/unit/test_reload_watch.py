"""When the watcher reads a change (`controlplane/watch.py`): once it has settled, never while
its writer still holds a changed file open, and never from files that changed while they were
read; a file read early (its writer closed it half-way) installs nothing wider. Real files,
real inotify, the real build and reload rules."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from mcp_oauth_gateway.controlplane import watch, writers
from mcp_oauth_gateway.controlplane.builder import build_snapshot
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.snapshot import Snapshot
from mcp_oauth_gateway.resources.loader import load_paths

from .resources_fixture import BASE, policy

FULL = policy()
# Cut where a slow writer may pause: a valid policy, its authorization not written yet.
HALF = FULL[: FULL.index("    authorization:")]


async def until(predicate, what: str) -> None:
    """Wait (without blocking the watcher's loop) until `predicate()` holds, 20 s at most."""
    try:
        async with asyncio.timeout(20):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def rules(snapshot: Snapshot) -> object:
    policy = snapshot.listeners[8080][0].policy
    assert policy is not None
    return policy.authorization


def configured(tmp_path) -> tuple[watch.ConfigWatcher, Path]:
    config = tmp_path / "config"
    config.mkdir()
    (config / "base.yaml").write_text(BASE)
    (config / "policy.yaml").write_text(FULL)
    snapshot = build_snapshot(load_paths([config]))
    assert snapshot.ok
    return watch.ConfigWatcher([str(config)], ControlPlane(snapshot), interval=0.02), config


@pytest.fixture
async def watched(tmp_path):
    watcher, config = configured(tmp_path)
    watcher.start()
    await until(lambda: watcher.polls > 0, "the first poll")
    assert watcher.state()["openWrites"] == "inotify"
    try:
        yield watcher, config
    finally:
        await watcher.stop()


async def test_a_writer_paused_mid_file_is_waited_for_then_read_whole(watched):
    watcher, config = watched
    control = watcher.control
    serving = control.snapshot
    with (config / "policy.yaml").open("w") as handle:
        handle.write(HALF)
        handle.flush()
        await until(lambda: watcher.waiting == (str(config / "policy.yaml"),), "the wait")
        polled = watcher.polls
        await until(lambda: watcher.polls >= polled + 2, "two more polls")
        assert watcher.state()["waitingFor"] == [str(config / "policy.yaml")]
        assert control.snapshot is serving
        handle.write(FULL[len(HALF) :].replace("mcp-agent", "operators"))
    # Narrower? No: another rule. Refused as a whole file, never installed half.
    refusal = 'Allow rule `"operators" in jwt.groups` added or changed'
    await until(lambda: refusal in (watcher.last_error or ""), "the complete file to be judged")
    assert control.snapshot is serving
    assert watcher.waiting == ()


async def test_a_half_file_its_writer_closed_is_read_and_refused(watched):
    watcher, config = watched
    control = watcher.control
    serving = control.snapshot
    (config / "policy.yaml").write_text(HALF)  # closed half-way: nothing can tell
    refusal = "GatewayPolicy default/auth: spec.traffic.authorization: removed"
    await until(lambda: refusal in (watcher.last_error or ""), "the half file to be refused")
    assert rules(control.snapshot) is rules(serving)
    with (config / "policy.yaml").open("a") as handle:
        handle.write(
            FULL[len(HALF) :].replace("[", "['jwt.sub == \"alice\"', ").replace("Allow", "Require")
        )
    await until(lambda: control.snapshot is not serving, "the narrower whole file to apply")
    assert watcher.last_error is None
    assert rules(control.snapshot).action == "Require"  # type: ignore[attr-defined]


async def test_files_that_change_while_they_are_read_are_read_again(watched):
    watcher, _ = watched
    serving = watcher.control.snapshot
    assert not await watcher.reload(expected=())
    assert watcher.control.snapshot is serving
    assert watcher._seen == ()  # the next poll reads the files again


async def test_a_file_still_changing_is_read_only_once_it_has_settled(monkeypatch, tmp_path):
    # Fingerprints as the watcher sees them: at start, then a write caught half-way (the
    # second look differs), then the finished file on two looks in a row.
    seen = [("start",), ("truncated",), ("written",)]
    monkeypatch.setattr(
        watch, "fingerprint", lambda paths: seen.pop(0) if len(seen) > 1 else seen[0]
    )
    watcher = watch.ConfigWatcher([str(tmp_path)], ControlPlane(Snapshot.empty()), interval=0)
    loaded: list[object] = []
    done = asyncio.Event()

    async def reload(expected: object = None) -> bool:
        loaded.append(expected)
        done.set()
        return True

    monkeypatch.setattr(watcher, "reload", reload)
    watcher.start()
    await asyncio.wait_for(done.wait(), 10)
    await watcher.stop()
    assert loaded == [("written",)]


PUBLIC = """apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: public}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /public}}]
      backendRefs: [{name: backend}]
"""


async def test_a_route_added_without_a_policy_is_served_and_said_so(watched, caplog):
    # Nothing a policy decides is served more openly, so it applies (as at start), with the
    # warning a start gives.
    caplog.set_level(logging.INFO, logger="mcp_oauth_gateway")
    watcher, config = watched
    (config / "public.yaml").write_text(PUBLIC)
    assert await watcher.reload()
    assert "HTTPRoute default/public is served without authentication" in caplog.text
    assert "HTTPRoute default/mcp is served without" not in caplog.text


async def test_without_inotify_a_paused_writer_may_be_read_early_and_opens_nothing(
    monkeypatch, tmp_path, caplog
):
    # Elsewhere than Linux nothing tells an open writer: polling alone, and the reload rules.
    monkeypatch.setattr(writers.sys, "platform", "darwin")
    caplog.set_level(logging.INFO, logger="mcp_oauth_gateway")
    watcher, config = configured(tmp_path)
    serving = watcher.control.snapshot
    watcher.start()
    try:
        await until(lambda: watcher.polls > 0, "the first poll")
        assert watcher.state()["openWrites"] == "unknown (polling only)"
        assert "write files elsewhere and rename them into place" in caplog.text
        with (config / "policy.yaml").open("w") as handle:
            handle.write(HALF)
            handle.flush()
            refusal = "GatewayPolicy default/auth: spec.traffic.authorization: removed"
            await until(lambda: refusal in (watcher.last_error or ""), "the half file's refusal")
            assert watcher.waiting == ()
            assert watcher.control.snapshot is serving
    finally:
        await watcher.stop()


NARROWER = HALF + FULL[len(HALF) :].replace("[", "['jwt.sub == \"alice\"', ").replace(
    "Allow", "Require"
)


@pytest.mark.parametrize("how", ["written", "renamed into place"])
async def test_a_closed_or_renamed_file_is_read_at_once_not_at_the_next_interval(tmp_path, how):
    # An hour between polls: only inotify's report of the close (or the rename) can wake it.
    watcher, config = configured(tmp_path)
    watcher.interval = 3600
    serving = watcher.control.snapshot
    watcher.start()
    try:
        await until(lambda: watcher.state()["openWrites"] == "inotify", "inotify to watch")
        if how == "written":
            (config / "policy.yaml").write_text(NARROWER)
        else:
            (tmp_path / "policy.yaml").write_text(NARROWER)
            (tmp_path / "policy.yaml").rename(config / "policy.yaml")
        await until(lambda: watcher.control.snapshot is not serving, "the change to apply")
        assert rules(watcher.control.snapshot).action == "Require"  # type: ignore[attr-defined]
    finally:
        await watcher.stop()
