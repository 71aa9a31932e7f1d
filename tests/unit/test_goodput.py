"""The goodput account and the failure classification, on made-up timelines: every
second in exactly one bucket (the whole runs on the fake are in test_recovery.py)."""

from __future__ import annotations

import json

import pytest

from podctl.base.failures import bad_host, hardware_cause, infrastructure_reason
from podctl.steps.goodput import BUCKETS, _Attempt, split


def _step(step: int, t: float, seconds: float, compile_: bool = False) -> dict:
    line = {"kind": "step", "step": step, "t": t, "step_time_s": seconds}
    return {**line, "compile": True} if compile_ else line


def test_one_attempt_is_split_into_setup_startup_restore_steps_saves_and_idle():
    records = [{"kind": "config", "restore_s": 2.0, "t": 118.0},
               _step(1, 130.0, 10.0, compile_=True), _step(2, 131.0, 1.0), _step(3, 132.0, 1.0),
               {"kind": "checkpoint", "step": 3, "save_s": 0.5, "t": 132.5}, _step(4, 133.5, 1.0)]
    attempt = _Attempt("r", started=100.0, ended=140.0, steps_lost=0, records=records,
                       phases={"starting": 101.0, "running": 110.0})
    seconds = split(40.0, [attempt])
    assert set(seconds) == set(BUCKETS)
    assert seconds["setup"] == 10.0  # podctl's start to the script's
    assert seconds["checkpoint_restore"] == 2.0
    assert seconds["startup"] == 18.0  # the script's start to the first step's end, less the restore
    assert seconds["productive"] == 3.0 and seconds["checkpoint_save"] == 0.5
    assert sum(seconds.values()) == pytest.approx(40.0)
    assert seconds["idle"] == pytest.approx(6.5)


def test_a_recovery_is_preemption_to_the_next_first_step_and_redone_steps_are_wasted():
    first = _Attempt("a1", started=0.0, ended=50.0, steps_lost=2,
                     records=[_step(1, 20.0, 5.0, True), *(_step(i, 20.0 + i, 1.0) for i in range(2, 11))],
                     phases={"running": 10.0})
    second = _Attempt("a2", started=70.0, ended=120.0, steps_lost=0,
                      records=[_step(9, 90.0, 6.0, True), *(_step(i, 80.0 + i, 2.0) for i in range(10, 21))],
                      phases={"running": 75.0})
    seconds = split(120.0, [first, second])
    assert seconds["recovery"] == 40.0  # 50 (preempted) -> 90 (first step after)
    assert seconds["wasted"] == 2.0  # 2 steps redone x the first attempt's 1.0 s step
    assert seconds["productive"] == (9.0 - 2.0) + 22.0
    assert sum(seconds.values()) == pytest.approx(120.0)


def test_a_script_without_metric_lines_gets_setup_and_idle():
    attempt = _Attempt("r", started=0.0, ended=30.0, steps_lost=0, records=[], phases={"running": 4.0})
    seconds = split(30.0, [attempt])
    assert seconds["setup"] == 4.0 and seconds["idle"] == 26.0 and seconds["productive"] == 0.0


def test_what_looks_like_the_hardware():
    assert hardware_cause(139) == "crashed (SIGSEGV)" and hardware_cause(255) == "host lost"
    assert hardware_cause(1, "jax.errors.JaxRuntimeError: INTERNAL: TPU chip 3 halted") is not None
    assert hardware_cause(1, "ValueError: shapes do not match") is None
    assert hardware_cause(143) is None  # a preemption notice, not the host's fault
    assert infrastructure_reason(139) == "crashed (SIGSEGV)"
    assert infrastructure_reason(3) is None


def test_a_bad_host_is_the_same_worker_failing_twice_for_hardware_reasons():
    assert bad_host([(1, "crashed (SIGSEGV)"), (1, "host lost")]) == 1
    assert bad_host([(1, "crashed (SIGSEGV)"), (0, "crashed (SIGSEGV)")]) is None
    assert bad_host([(1, None), (1, "crashed (SIGSEGV)")]) is None  # once is not twice
    assert bad_host([(1, "crashed (SIGSEGV)"), (None, None)]) is None  # the last one was a preemption


def test_a_node_reporting_unfit_health_is_not_run_on_again():
    from podctl.cloud.types import NodeInfo, SliceInfo
    from podctl.base.failures import unfit

    def info(health: str | None) -> SliceInfo:
        node = NodeInfo(name="n", state="READY", health=health, accelerator_type="v5p-16",
                        topology="2x2x2", hosts=(), spot=False, created=0.0, labels={},
                        queued_resource=None, symptoms=("HBM_OUT_OF_MEMORY on worker 1",))
        return SliceInfo(name="n", project="p", zone="z", kind="node", state="READY",
                         accelerator_type="v5p-16", topology="2x2x2", num_slices=1,
                         tier="on-demand", created=0.0, labels={}, nodes=(node,))

    assert unfit(info("UNHEALTHY_TENSORFLOW")) == ("node n is UNHEALTHY_TENSORFLOW "
                                                   "(HBM_OUT_OF_MEMORY on worker 1)")
    assert unfit(info("HEALTHY")) is None and unfit(info(None)) is None
    assert unfit(info("UNHEALTHY_MAINTENANCE")) is None  # waited out, not left


def test_an_elastic_runs_slice_lost_growing_back_and_steps_on_fewer_slices():
    """3 slices -> 2 (a slice lost at 50) -> 3 (grown back at 120): the moves have their
    own buckets, and a third of the steps on two slices is the missing slice's."""
    on_three = _Attempt("a1", started=0.0, ended=50.0, steps_lost=0, slices=3,
                        records=[_step(1, 20.0, 5.0, True), *(_step(i, 20.0 + i, 1.0) for i in range(2, 11))],
                        phases={"running": 10.0})
    on_two = _Attempt("a2", started=55.0, ended=120.0, steps_lost=0, slices=2,
                      records=[_step(11, 70.0, 4.0, True), *(_step(i, 60.0 + i, 3.0) for i in range(12, 22))],
                      phases={"running": 60.0})
    again = _Attempt("a3", started=125.0, ended=160.0, steps_lost=0, slices=3,
                     records=[_step(22, 140.0, 4.0, True), *(_step(i, 118.0 + i, 1.0) for i in range(23, 31))],
                     phases={"running": 130.0})
    seconds = split(160.0, [on_three, on_two, again])
    assert seconds["recovery"] == 0.0
    assert seconds["slice_lost"] == 10.0  # 50 (lost) -> 60 (the script on two)
    assert seconds["growing_back"] == 10.0  # 120 (stopped to grow) -> 130 (the script on three)
    assert seconds["reinitialization"] == 10.0 + 10.0  # each script's start to its first step
    assert seconds["fewer_slices"] == pytest.approx(30.0 / 3)  # 10 steps x 3 s on 2 of 3
    assert seconds["productive"] == pytest.approx(9.0 + 30.0 * 2 / 3 + 8.0)
    assert sum(seconds.values()) == pytest.approx(160.0)


def test_the_plot_labels_each_attempt_with_its_slices():
    """An elastic run's config lines say how many slices each attempt had (typed as ints
    by metric_line); the plot's legend shows it per attempt."""
    from podctl.jobs.metrics import parse_records
    from podctl.policy.plot import series_from_records

    def config(slices: object) -> str:
        return json.dumps({"kind": "config", "start_step": 0, "slices": slices, "full_slices": 3,
                           "t": 1})

    attempts = [("a1", parse_records([config(3)])), ("a2", parse_records([config(2)])),
                ("a3", parse_records([config("two")]))]  # a wrong type is dropped, not drawn
    labels = [s.label for s in series_from_records("r", attempts).segments]
    assert labels == ["attempt 1 (3 of 3 slices)", "attempt 2 (2 of 3 slices)", "attempt 3"]


def test_a_grow_back_is_not_a_recovery():
    from podctl.steps.recovery import Attempt, recoveries

    lost = Attempt(1, "a1", 0.0, reason="host lost")
    grown = Attempt(2, "a2", 1.0, reason="grown back to 3 of 3 slices")
    assert recoveries([lost, grown, Attempt(3, "a3", 2.0)]) == 1
    assert recoveries([Attempt(1, "a1", 0.0)]) == 0
