"""A host frozen mid-run is named as the run's cause, not the host JAX ended for it.

Host 1's training script is stopped (SIGSTOP) after its first steps on a fake v5p-16,
with `--on-stall stop` at its default thresholds: JAX's coordination service (in host
0's process) gives up on host 1's heartbeats and aborts host 0 (exit 134) long before
the stall watch would speak. The template's `--heartbeat-timeout 20` shortens JAX's wait
(100 s by default) for the test's sake; the order of events is the same. The run's end line, its record and `runs` name host 1."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault
from tests.e2e.test_stall import _cont, _script_pid

BLAME = ("host 0001 (JAX process 1) stopped answering (its script was stopped (process state T)); "
         "JAX's coordination service then ended host 0000 (JAX process 0) (exit 134)")


@pytest.mark.host_env
@pytest.mark.timeout(900)
def test_a_host_frozen_mid_run_is_the_runs_cause_not_the_host_jax_ended(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    podctl("up", "--slice", "v5p-16", "--name", "frz")
    frozen: list[int] = []
    run_ids: list[str] = []

    def freeze(err: list[str]):
        run_ids.append(next(line.split("run ", 1)[1].split()[0] for line in err if " on frz (" in line))
        frozen.append(_script_pid(run_ids[0], 1))
        os.kill(frozen[0], signal.SIGSTOP)
        return lambda: _cont(frozen[0])

    try:
        code, log, out = run_with_fault(
            podctl, ["run", "frz", "--on-stall", "stop", "--json", str(TEMPLATE), *TINY,
                     "--steps", "100000", "--heartbeat-timeout", "20"], '"kind": "step", "step": 3', freeze, timeout=600, then=400)
        (run_id,) = run_ids
        assert code == 134, log[-4000:]
        assert f"run {run_id} failed: {BLAME}" in log, log[-4000:]
        assert f"run {run_id} stalled" not in log and "failed: host 0000" not in log
        assert json.loads(out)["failed_host"] == 1
        record = next(r for r in podctl.json("runs") if r["run_id"] == run_id)
        assert (record["state"], record["exit_code"], record["failed_host"]) == ("failed", 134, 1)
        assert record["extra"]["reason"] == BLAME
        assert record["extra"]["peer_cause"]["evidence"] == "its script was stopped (process state T)"
        row = next(line for line in podctl("runs").stdout.splitlines() if line.startswith(run_id))
        assert f"failed: {BLAME}" in row
    finally:
        podctl("down", "frz", "--yes")
