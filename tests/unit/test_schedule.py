"""tests/schedule.py: the order xdist hands the slower tiers' cases out in, and
tools/durations.py, which writes the seconds it reads."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.schedule import known_seconds, order

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))
from durations import case_seconds  # noqa: E402


def _item(nodeid: str, host_env: bool = False) -> Any:
    return SimpleNamespace(nodeid=nodeid, keywords={"host_env": True} if host_env else {})


def test_long_cases_first_the_env_builder_leads_then_two_that_need_no_env():
    items = [_item("a.py::short"), _item("a.py::jax_long", host_env=True), _item("b.py::mid"),
             _item("b.py::jax_longest", host_env=True), _item("c.py::nojax_long"), _item("c.py::quick")]
    seconds = {"a.py::jax_long": 200, "b.py::mid": 30, "b.py::jax_longest": 300, "c.py::nojax_long": 80}
    got = [i.nodeid for i in order(items, seconds)]
    assert got == ["b.py::jax_longest", "c.py::nojax_long", "b.py::mid", "a.py::jax_long",
                   "a.py::short", "c.py::quick"]


def test_unknown_cases_keep_their_collection_order():
    items = [_item(f"t.py::case{n}") for n in range(5)]
    assert [i.nodeid for i in order(items, {})] == [f"t.py::case{n}" for n in range(5)]


def test_durations_are_summed_from_a_durations_log_and_read_back(tmp_path: Path):
    log = ("============ slowest durations ============\n"
           "150.20s call     tests/e2e/test_a.py::test_x@tests/e2e/test_a.py\n"
           "20.50s setup    tests/e2e/test_a.py::test_x@tests/e2e/test_a.py\n"
           "3.00s teardown tests/e2e/test_b.py::test_y[v5p-8]\n")
    seconds = case_seconds(log)
    assert seconds == {"tests/e2e/test_a.py::test_x": 170.7, "tests/e2e/test_b.py::test_y[v5p-8]": 3.0}
    kept = tmp_path / "durations.txt"
    kept.write_text("# a comment\n170 tests/e2e/test_a.py::test_x\n3 tests/e2e/test_b.py::test_y[v5p-8]\n")
    assert known_seconds(kept) == {"tests/e2e/test_a.py::test_x": 170.0, "tests/e2e/test_b.py::test_y[v5p-8]": 3.0}
    assert known_seconds(tmp_path / "none.txt") == {}
