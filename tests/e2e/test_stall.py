"""A stalled run caught with evidence: one host's script frozen (SIGSTOP) mid-training
on a fake v5p-16. The stall is reported past its threshold, every host's stacks land in
GCS, the frozen host is named, and `--on-stall recover` finishes the run from its last
checkpoint. A host frozen before its first step is a stall too, and taking stacks never
kills a script that has no handler for the signal."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from podctl.base._sync import run_sync
from podctl.steps.stall import STARTUP_SECONDS, StallPolicy, StallWatch
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from tests.conftest import assert_one_line_error
from tests.e2e.test_recovery import SCRIPTS, TEMPLATE, TINY, run_with_fault


def _script_pid(run_id: str, worker: int) -> int:
    """The template's process of RUN_ID on WORKER: fake hosts are local processes."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if (f"PODCTL_RUN_ID={run_id}".encode() in env and f"TPU_WORKER_ID={worker}".encode() in env
                and b"train_pjit.py" in cmdline):
            return int(entry.name)
    raise AssertionError(f"no script of {run_id} on worker {worker}")


def _cont(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)  # were it still there; SIGKILLed by now
    except ProcessLookupError:
        pass


@pytest.mark.host_env
@pytest.mark.timeout(1500)
def test_a_frozen_host_is_named_its_stacks_kept_and_the_run_recovered(podctl):
    """Three runs on one fake v5p-16 (a daemon and a slice made once, not three times):
    a script with no stacks handler paused through a stall, a host frozen before its
    first step, then the template with a host frozen mid-training and recovered."""
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    fake = podctl.json("fake", "status")
    podctl("up", "--slice", "v5p-16", "--name", "stall")
    _a_script_without_a_stacks_handler_pauses_through_a_stall_and_finishes(podctl, fake)
    _a_host_frozen_before_its_first_step_is_a_stall_and_on_stall_stop_ends_the_run(podctl)
    frozen: list[int] = []
    run_ids: list[str] = []

    def freeze(err: list[str]):
        run_ids.append(next(line.split("run ", 1)[1].split()[0] for line in err if " on stall (" in line))
        frozen.append(_script_pid(run_ids[0], 1))
        os.kill(frozen[0], signal.SIGSTOP)
        return lambda: _cont(frozen[0])

    code, log, out = run_with_fault(
        podctl, ["run", "stall", "--recover", "1", "--on-stall", "recover", "--stall-after", "20s",
                 "--stall-startup", "15m", "--json", str(TEMPLATE), *TINY, "--steps", "30", "--checkpoint-every", "4"],
        '"kind": "checkpoint", "step": 8', freeze, timeout=600)
    (run_id,) = run_ids
    assert code == 0, log[-4000:]
    result = json.loads(out)
    first, second = result["attempts"]
    assert first["reason"].startswith("stalled after step ") and second["last_step"] == 30
    assert f"run {run_id} stalled: no step for" in log
    assert "host 0001 (JAX process 1)'s script is stopped (process state T)" in log
    assert "stacks of 2 of 2 hosts in gs://" in log
    # The stacks in GCS: the frozen host's says why it has no Python stack; the other's
    # is its own faulthandler dump.
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake["gcs"])
    names = {o.name.rsplit("/", 1)[-1]: o.name
             for o in run_sync(storage.list(f"podctl/runs/{run_id}/stacks/"))}
    assert set(names) == {"host-0000.txt", "host-0001.txt"}
    stacks = {name: run_sync(storage.download_bytes(names[name])).decode() for name in names}
    assert "'state': 'T'" in stacks["host-0001.txt"]
    assert "no answer to SIGUSR1" in stacks["host-0001.txt"]
    assert "faulthandler" in stacks["host-0000.txt"] and "File " in stacks["host-0000.txt"]
    record = podctl.json("runs")
    mine = next(r for r in record if r["run_id"] == run_id)
    assert mine["extra"]["recoveries"] == 1
    assert mine["extra"]["stalls"][0]["action"] == "recover"  # the follower's end kept it
    podctl("down", "stall", "--yes")


def test_stall_options_bad_input(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    script = str(TEMPLATE)
    assert_one_line_error(podctl("run", "x", "--on-stall", "recover", script, check=False), 2,
                          "--on-stall recover relaunches the run: it goes with --recover N.")
    assert_one_line_error(podctl("run", "x", "--detach", "--on-stall", "stop", script, check=False), 2,
                          "--on-stall/--stall-after need podctl to watch the run")
    assert_one_line_error(podctl("run", "x", "--stall-after", "soon", script, check=False), 2,
                          "--stall-after")
    assert_one_line_error(podctl("run", "x", "--stall-startup", "0", script, check=False), 2,
                          "--stall-startup")


def test_no_first_step_within_the_allowance_after_every_script_started_is_a_stall():
    """The wait for the first step starts once every host's script runs (the agents'
    heartbeats say so): the environment build before it does not count."""
    clock = [0.0]
    watch = StallWatch(StallPolicy(after=60), clock=lambda: clock[0])
    clock[0] = 7200.0  # two hours building the environment: no stall
    assert watch.stalled() is None
    watch.saw_beats({0: {"phases": {"running": 1.0}}, 1: {"phases": {"environment": 1.0}}}, 2)
    assert watch.scripts_started_at is None and watch.stalled() is None  # host 1 is still building
    watch.saw_beats({0: {"phases": {"running": 1.0}}, 1: {"phases": {"running": 2.0}}}, 2)
    clock[0] = 7250.0
    assert watch.stalled() is None
    clock[0] = 7261.0
    assert watch.stalled() == 61.0
    watch.reported = True
    watch.saw(0, '{"kind": "step", "step": 1, "compile": true}')  # the first step re-arms it
    assert watch.stalled() is None and watch.current_threshold() == 60
    # The allowance: --stall-startup, else --stall-after, else STARTUP_SECONDS.
    assert StallPolicy().first_step_threshold() == STARTUP_SECONDS
    assert StallPolicy(after=60, startup=900).first_step_threshold() == 900


def _a_host_frozen_before_its_first_step_is_a_stall_and_on_stall_stop_ends_the_run(podctl) -> None:
    # Host 1 stops itself at once; host 0 waits for it ("initializing") with no step.
    done = podctl("run", "stall", "--on-stall", "stop", "--stall-after", "20s", "--env",
                  "FREEZE_HOST=1", str(SCRIPTS / "freeze_on_host.py"), check=False, timeout=240)
    log = done.stderr
    assert done.returncode != 0, log[-3000:]
    assert "stalled: no first step" in log, log[-3000:]
    assert "host 0001's script is stopped (process state T)" in log, log[-3000:]
    assert "ending it on every host (--on-stall stop)" in log


def _a_script_without_a_stacks_handler_pauses_through_a_stall_and_finishes(podctl, fake: dict) -> None:
    """Neither host's script has a SIGUSR1 handler: taking their stacks pauses both, kills neither."""
    done = podctl("run", "stall", "--stall-after", "5s", "--env", "PAUSE=25",
                  str(SCRIPTS / "pause_steps.py"), check=False, timeout=240)
    log = done.stderr
    assert done.returncode == 0, log[-3000:]  # before: "host 0000 exited 138" (SIGUSR1)
    assert "stalled: no step for" in log and "stacks of 2 of 2 hosts in gs://" in log, log[-3000:]
    assert done.stdout.count('"kind": "step"') == 10 and "done" in done.stdout
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake["gcs"])
    run_id = next(line.split("run ", 1)[1].split()[0] for line in log.splitlines()
                  if " on stall (" in line)
    stacks = run_sync(storage.list(f"podctl/runs/{run_id}/stacks/"))
    assert sorted(o.name.rsplit("/", 1)[-1] for o in stacks) == ["host-0000.txt", "host-0001.txt"]
    for kept in stacks:
        text = run_sync(storage.download_bytes(kept.name)).decode()
        assert "faulthandler: not asked" in text and "wchan" in text
