"""A stalled run caught with evidence: one host's script frozen (SIGSTOP) mid-training
on a fake v5p-16. The stall is reported past its threshold, every host's stacks land in
GCS, the frozen host is named, and `--on-stall recover` finishes the run from its last
checkpoint."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from podctl._sync import run_sync
from podctl.settings import FAKE_BUCKET
from podctl.storage import Storage
from tests.conftest import assert_one_line_error
from tests.test_recovery import TEMPLATE, TINY, run_with_fault


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
def test_a_frozen_host_is_named_its_stacks_kept_and_the_run_recovered(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    fake = podctl.json("fake", "status")
    podctl("up", "--slice", "v5p-16", "--name", "stall")
    frozen: list[int] = []
    run_ids: list[str] = []

    def freeze(err: list[str]):
        run_ids.append(next(line.split("run ", 1)[1].split()[0] for line in err if " on stall (" in line))
        frozen.append(_script_pid(run_ids[0], 1))
        os.kill(frozen[0], signal.SIGSTOP)
        return lambda: _cont(frozen[0])

    code, log, out = run_with_fault(
        podctl, ["run", "stall", "--recover", "1", "--on-stall", "recover", "--stall-after", "20s",
                 "--json", str(TEMPLATE), *TINY, "--steps", "30", "--checkpoint-every", "4"],
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
