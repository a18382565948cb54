"""The controller's closing lines on where a run's time went (tests/xdist_scheduling.py)."""

from __future__ import annotations

from collections import Counter

from xdist_scheduling import time_lines


def test_grouped_tests_count_under_their_group_and_the_rest_under_their_module():
    by_test = Counter(
        {
            "tests/e2e/test_a.py::test_one": 30.0,
            "tests/e2e/test_a.py::test_two": 12.0,
            "tests/e2e/test_b.py::test_x[1]": 50.0,
            "tests/e2e/test_c.py::test_y": 25.0,
            "tests/unit/test_d.py::test_z": 1.0,
        }
    )
    groups = {
        "tests/e2e/test_b.py::test_x[1]": "keycloak",
        "tests/e2e/test_c.py::test_y": "keycloak",
    }
    workers, units = time_lines(Counter({"gw1": 60.4, "gw0": 58.0}), by_test, groups, longest=2)
    assert workers == "xdist: seconds in tests per worker: gw0 58, gw1 60"
    assert units == "xdist: longest units: group keycloak 75, tests/e2e/test_a.py 42"
