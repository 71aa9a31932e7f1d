"""The lifecycle through either slice provider (issue 38: "the whole suite passes with both
providers"): the cases that matter for a user, run through the Compute Engine provider
(a MIG of TPU VMs) where the rest of the suite runs them through the Cloud TPU API.

The switch, `PODCTL_TEST_API` (README, "Tests"):
  - unset: the cheap cases (no JAX) on Compute Engine: the Python API's up, status, a run
    through each channel (ssh, then boot), its logs, its (empty) checkpoints, down; the
    queue's tick making, running on and deleting a slice (its create followed by
    `creation_outcome`);
  - `compute`: also the JAX-heavy case (a multi-host JAX program with checkpoints in GCS,
    `ckpt ls`, a preempted VM and `--recover` over SSH, a MIG insert that fails);
  - `both`: the cheap cases on both providers (the heavy one is the Cloud TPU API's in
    test_recovery.py already).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import podctl
from tests.conftest import Podctl, stop_fake_and_check
from tests.e2e.test_queue import QueueCli

SCRIPTS = Path(__file__).parents[1] / "scripts"
SWITCH = os.environ.get("PODCTL_TEST_API", "")
APIS = ("tpu", "compute") if SWITCH == "both" else ("compute",)
heavy = pytest.mark.skipif(SWITCH not in ("compute", "both"),
                           reason="JAX-heavy: PODCTL_TEST_API=compute runs it")


@pytest.fixture(params=APIS)
def api(request) -> str:
    return str(request.param)


def test_the_python_api_lifecycle_runs_on_either_provider(api, fake_dir):
    """up, status, a run through SSH and one through the watchers, logs, checkpoints, down:
    the same calls on a Cloud TPU node and on a Compute Engine MIG."""
    with podctl.connect(backend="fake", api=api) as cloud:
        with cloud.up("v5p-16", name=f"both-{api}") as made:
            assert (made.info.api, made.info.ready, len(made.info.hosts)) == (api, True, 2)
            assert [(s.name, s.info.api) for s in cloud.slices()] == [(f"both-{api}", api)]
            for via in ("ssh", "boot"):
                run = made.run(SCRIPTS / "many_lines.py", args=["5"], via=via)
                assert run.wait() == 0, via
                run.logs(hosts="all")
                assert run.checkpoints() == []
                assert cloud.run(run.run_id).wait() == 0  # read back from GCS
            assert made.refresh().info.state == "READY"
        assert list(cloud.slices()) == []


def test_the_queue_makes_runs_on_and_deletes_a_slice_on_either_provider(api, tmp_path):
    """A tick with PODCTL_API (as `queue tick --api`) makes the entry's slice through that
    provider, follows its create, runs the script and deletes the slice: nothing left."""
    q = QueueCli(tmp_path)
    q.env.update(PODCTL_BACKEND="fake")
    try:
        q.here("queue", "add", "--slice", "v5p-8", str(SCRIPTS / "many_lines.py"), "5")
        q.env["PODCTL_API"] = api  # an entry keeps no API: the tick's settings choose it
        [entry] = q.settle(limit=300)
        assert entry["state"] == "succeeded", entry
    finally:
        stop_fake_and_check(q)


@heavy
@pytest.mark.host_env
def test_jax_checkpoints_and_recover_on_a_compute_engine_v5p(tmp_path):
    """v5p-16 through Compute Engine, over SSH: a multi-host JAX program checkpoints in GCS
    (`ckpt ls` lists them), one VM preempted mid-run and --recover goes on from the last
    checkpoint on the MIG made whole again; `down` leaves nothing; an `up` whose MIG insert
    fails says why and leaves nothing."""
    from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault

    cli = Podctl(tmp_path)
    cli.env.update(PODCTL_BACKEND="fake", PODCTL_API="compute")
    try:
        cli("up", "--slice", "v5p-16", "--name", "hv16")
        code, log, out = run_with_fault(
            cli, ["run", "hv16", "--via", "ssh", "--recover", "1", "--json", str(TEMPLATE), *TINY,
                  "--batch", "16", "--steps", "8", "--checkpoint-every", "2"],
            '"kind": "checkpoint", "step": 2', lambda err: cli("fake", "inject", "preempt-vm", "hv16", "1"))
        assert code == 0, log[-4000:]
        result = json.loads(out)
        first, second = result["attempts"]
        assert result["recoveries"] == 1 and second["start_step"] >= 2 and second["last_step"] == 8, result
        steps = [c["step"] for c in cli.json("ckpt", "ls", result["run_id"])["checkpoints"]]
        assert steps and max(steps) == 8, steps
        cli("down", "hv16", "--yes")
        # a MIG whose insert fails: said in the cloud's words, its template and policy deleted
        cli("fake", "inject", "mig-error", "--code", "RESOURCE_NOT_FOUND")
        refused = cli("up", "--slice", "v5p-16", "--name", "hv16", check=False)
        assert refused.returncode != 0 and "was not found" in refused.stderr, refused.stderr
    finally:
        cli("down", "hv16", "--yes", check=False)
        stop_fake_and_check(cli)
