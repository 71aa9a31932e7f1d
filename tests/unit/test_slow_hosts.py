"""A host slower than its peers, step after step (issue 15): named from what each host
does alone in a step, and with `--on-slow-host recover` left behind: the run
checkpoints, the slice is made again on other hardware and the run resumes."""

from __future__ import annotations

import json

import pytest

from podctl.base.errors import UsageError
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.steps.slow_hosts import SlowHostPolicy, SlowHostWatch, paces, slow_hosts
from tests.conftest import assert_one_line_error
from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault


def _beat(host_s: float, step_s: float = 0.1, window: int = 20, process: int | None = None) -> dict:
    return {"time": 0, "progress": {"step": 50, "host_s": host_s, "step_s": step_s,
                                    "window": window, "process": process}}


def test_the_host_that_does_its_own_part_slowly_is_named():
    beats = {0: _beat(0.004), 1: _beat(0.013, process=7), 2: _beat(0.005), 3: _beat(0.0045)}
    found = paces(beats)
    assert found[1].process == 7 and found[0].process is None
    (slow,) = slow_hosts(found)
    assert slow.host == 1 and slow.peers_s == 0.0045 and round(slow.ratio, 1) == 2.9
    assert slow.describe().startswith(
        "host 0001 (JAX process 7) is slow: 13.0 ms of each step building its input batch")


@pytest.mark.parametrize("beats", [
    {0: _beat(0.004), 1: _beat(0.007)},  # under 2x
    {0: _beat(0.0001), 1: _beat(0.0005)},  # 5x, but half a millisecond: noise
    {0: _beat(0.004), 1: _beat(0.02, window=3)},  # too few steps to judge
    {0: _beat(0.02)},  # one host has no peers
    {0: {"progress": {"step": 3}}, 1: {}},  # a script that reports no pace
])
def test_no_host_is_named_without_evidence(beats):
    assert slow_hosts(paces(beats)) == []


def test_the_watch_says_a_host_once_and_acts_after_it_stayed_slow():
    now = [100.0]
    watch = SlowHostWatch(SlowHostPolicy("recover", after=30), clock=lambda: now[0])
    slow = slow_hosts(paces({0: _beat(0.004), 1: _beat(0.02)}))
    new, act = watch.update(slow)
    assert [s.host for s in new] == [1] and act is None
    now[0] += 20
    assert watch.update(slow) == ([], None)
    watch.update([])  # fast again: the clock starts over
    now[0] += 20
    assert watch.update(slow) == ([], None)
    now[0] += 31
    assert watch.update(slow)[1].host == 1
    reporting = SlowHostWatch(SlowHostPolicy("report", after=0))
    assert reporting.update(slow)[1] is None  # report only: never acts

