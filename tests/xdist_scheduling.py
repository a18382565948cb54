"""How the tests are shared among pytest-xdist workers (`make test` runs `-n N --dist loadgroup`).

- A test module is one unit of work: one worker runs all of it, in file order. Its
  module-scoped fixtures (a kube-apiserver, gateways, identity providers) then start once, and a
  module whose later tests read what an earlier one left (a restarted server, a table, a
  screenshot) keeps working as it does in one process.
- The session-scoped servers that cost most to start each belong to one worker: the tests using
  real Keycloak (`real_keycloak`: about a minute of CPU to start) form the group `keycloak`, the
  tests using the session's kube-apiserver (`apiserver`) the group `apiserver`, so that each is
  started once per run instead of once per worker. They are not shared between workers through
  a file lock instead: those tests were written to take turns on the server (they share
  Keycloak's master realm and count what is in it; one module restarts the API server), so using
  it from several workers at once would change what they check. The groups go out first, since
  they are the longest units; the unit tests last, many small units that even out the end.
- A test reaching such a server only through `request.getfixturevalue` (a provider chosen by
  parameter) is invisible in its fixtures: its parameter or module carries the group's mark
  (`KEYCLOAK`, `APISERVER`), and a worker starting the server for a test outside the group fails
  that test, naming the mark to add.
- xdist's own `loadgroup` reads `xdist_group` marks into the node ids, which pytest 9.2 no
  longer lets it change (pytest-xdist issue 1386): the first worker writes each grouped test's
  group to a file the controller hands it, and the scheduler here reads it.
- At the end the controller prints the seconds each worker spent in tests and the longest
  units of work: the run can be no shorter than its longest unit, so that line says what to
  split next.
- Each process running tests hands out loopback ports from a share of its own (`support`), so
  two workers never pick the same port for servers they start at the same time.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

from support import claim_ports

# The group of each session fixture that only one worker may start, by fixture name.
OWNED: dict[str, str] = {"real_keycloak": "keycloak", "apiserver": "apiserver"}
KEYCLOAK = pytest.mark.xdist_group("keycloak")
APISERVER = pytest.mark.xdist_group("apiserver")
# Where the controller wants the groups: its own stash, the workers' workerinput.
_groups_path = pytest.StashKey[str]()
_GROUPS_FILE = "xdist_groups_file"


class ModulesAndGroups(LoadGroupScheduling):
    """`--dist loadgroup` with a module as the unit of work unless a group names another."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.groups: dict[str, str] | None = None
        self.groups_file = Path(config.stash[_groups_path])

    def schedule(self) -> None:
        if self.groups is None and self.collection_is_completed:
            text = self.groups_file.read_text() if self.groups_file.exists() else "{}"
            self.groups = json.loads(text or "{}")
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.rfind("@") > nodeid.rfind("]"):  # an xdist that can name groups again
            return nodeid.rsplit("@", 1)[-1]
        return (self.groups or {}).get(nodeid) or nodeid.split("::", 1)[0]

    def _assign_work_unit(self, node: Any) -> None:
        self.workqueue.move_to_end(min(self.workqueue, key=self._rank), last=False)
        super()._assign_work_unit(node)

    def _rank(self, scope: str) -> tuple[int, int]:
        kind = 2 if scope.startswith("tests/unit/") else 0 if "/" not in scope else 1
        return kind, -len(self.workqueue[scope])


@pytest.hookimpl(optionalhook=True)  # optional: `-p no:xdist` leaves the hook undeclared
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Our scheduler for `--dist loadgroup`; the other modes stay xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return ModulesAndGroups(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto`: two workers a core, since most tests wait on other processes (xdist's own
    PYTEST_XDIST_AUTO_NUM_WORKERS still decides when it is set)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return 2 * len(os.sched_getaffinity(0))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each worker where the groups go."""
    node.workerinput[_GROUPS_FILE] = node.config.stash[_groups_path]


def pytest_configure(config: pytest.Config) -> None:
    """This process's share of the loopback ports (one slice per xdist worker); in the
    controller, the file the first worker writes the groups to."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    claim_ports(int(worker.removeprefix("gw")), count)
    if not hasattr(config, "workerinput"):
        handle, path = tempfile.mkstemp(prefix="xdist-groups-", suffix=".json")
        os.close(handle)
        config.stash[_groups_path] = path


# Seconds in setup, call and teardown, by worker and by node id (the controller's view).
_by_worker: Counter[str] = Counter()
_by_test: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """In the controller: add a worker's report to the time it and its test spent."""
    node = getattr(report, "node", None)
    if node is not None:
        _by_worker[str(node.gateway.id)] += report.duration
        _by_test[report.nodeid] += report.duration


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The controller's lines on where the time went: per worker, and the longest units."""
    if not _by_worker or _groups_path not in config.stash:
        return
    groups_file = Path(config.stash[_groups_path])
    groups = json.loads(groups_file.read_text() or "{}") if groups_file.exists() else {}
    for line in time_lines(_by_worker, _by_test, groups):
        terminalreporter.write_line(line)


def time_lines(
    by_worker: Counter[str], by_test: Counter[str], groups: dict[str, str], longest: int = 6
) -> list[str]:
    """Two lines: seconds in tests per worker, and the `longest` units of work with theirs."""
    units: Counter[str] = Counter()
    for nodeid, seconds in by_test.items():
        group = groups.get(nodeid)
        units[f"group {group}" if group else nodeid.split("::", 1)[0]] += seconds
    workers = ", ".join(f"{w} {s:.0f}" for w, s in sorted(by_worker.items()))
    top = ", ".join(f"{u} {s:.0f}" for u, s in units.most_common(longest))
    return [f"xdist: seconds in tests per worker: {workers}", f"xdist: longest units: {top}"]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the controller's groups file."""
    if not hasattr(config, "workerinput") and _groups_path in config.stash:
        Path(config.stash[_groups_path]).unlink(missing_ok=True)


def group_of(item: pytest.Item) -> str | None:
    """The group a test's marks or fixtures put it in, if any."""
    marks = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group") if mark.args})
    if marks:
        return "_".join(marks)
    used = sorted({OWNED[name] for name in getattr(item, "fixturenames", ()) if name in OWNED})
    assert len(used) <= 1, f"{item.nodeid} uses the servers of several groups: {used}"
    return used[0] if used else None


@pytest.hookimpl(trylast=True)  # after deselection: the ids the workers report
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the first worker of a `--dist loadgroup` run: write each grouped test's group."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or workerinput.get("workerid") != "gw0" or not config.option.loadgroup:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item))}
    path = Path(workerinput[_GROUPS_FILE])
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(groups))
    partial.replace(path)


_running: list[pytest.Item] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Remember the test whose fixtures are about to start, for `require_group`."""
    _running[:] = [item]


def require_group(request: pytest.FixtureRequest, fixture: str) -> None:
    """Fail the test that makes this worker start `fixture` outside the fixture's group."""
    # Set by xdist in its workers only: a run in one process has nothing to share.
    if not getattr(request.config.option, "loadgroup", False) or not _running:
        return
    group, item = OWNED[fixture], _running[0]
    if group_of(item) != group:
        pytest.fail(
            f"{item.nodeid} starts `{fixture}` outside the xdist group {group!r}, so another "
            f"worker starts a second one: mark its parameter or module with "
            f"xdist_scheduling.{group.upper()} (tests/xdist_scheduling.py says why)",
            pytrace=False,
        )
