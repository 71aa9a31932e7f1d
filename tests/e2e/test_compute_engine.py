"""Slices through Compute Engine (issue 38), as a user runs podctl against the fake daemon:
a multi-host TPU7x slice is a MIG of TPU VMs (its template, its workload policy) made by
`up` with no --api (TPU7x is only Compute Engine's), run on with a multi-host JAX program
through the watchers (--via boot: the pointer in each VM's own metadata, no SSH), run on
again the same way with --recover through one VM's preemption (the MIG recreates it, with
its template's metadata: the second attempt writes the pointer again), and
deleted with nothing left; v5p with --api compute; a stockout that leaves nothing. Each
test ends with the daemon checked to hold nothing billable (MIGs, templates, policies and
nodes: tests/conftest.py's stop_fake_and_check)."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.conftest import assert_one_line_error
from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault

SCRIPTS = Path(__file__).parents[1] / "scripts"
JAX_REQS = SCRIPTS.parents[1] / "examples" / "jax_hello" / "requirements.txt"
TPU7X_ZONE = ["--zone", "us-central1-c"]  # generations.toml: TPU7x's one zone


def _admin(podctl) -> FakeAdmin:
    return FakeAdmin(json.loads(podctl("fake", "status", "--json").stdout)["admin"])


@pytest.mark.host_env
def test_a_multi_host_tpu7x_slice_is_a_mig_that_runs_jax_and_goes_whole(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    made = podctl.json("up", "--slice", "tpu7x-16", "--name", "iw16", *TPU7X_ZONE)
    assert (made["api"], made["ready"], made["topology"], made["hosts"], made["chips"]) == \
        ("compute", True, "2x2x2", 2, 8)
    try:
        held = _admin(podctl).resources()
        assert held["migs"] == ["fake-project/us-central1-c/iw16"]
        assert held["instance_templates"] == ["fake-project/iw16-tpl"]
        assert held["resource_policies"] == ["fake-project/us-central1/iw16-topo"]
        # the Cloud TPU API does not see it; `ls` with no --api lists both APIs' slices, and
        # says which (the kind `mig`, the JSON's api), as Compute Engine's listing does
        assert podctl.json("ls", "--api", "tpu", *TPU7X_ZONE) == []
        for api in ([], ["--api", "compute"]):
            listed = podctl.json("ls", *api, *TPU7X_ZONE)
            assert [(s["name"], s["api"], s["state"], s["accelerator_type"]) for s in listed] == \
                [("iw16", "compute", "READY", "tpu7x-16")]
        table = podctl("ls", *TPU7X_ZONE).stdout
        assert any(line.split()[:3] == ["iw16", "mig", "READY"] for line in table.splitlines()), table
        # and by name, with no --api: found where it was made
        status = podctl.json("status", "iw16", *TPU7X_ZONE)
        assert (status["name"], status["api"]) == ("iw16", "compute"), status
        # a second `up` of the same name and spec reuses it
        again = podctl.json("up", "--slice", "tpu7x-16", "--name", "iw16", *TPU7X_ZONE)
        assert again["created"] is False

        # JAX across its two VMs, as on TPU VMs: jax.distributed.initialize() with no arguments,
        # started through the watchers, not one SSH connection: the signed pointer is set in
        # each VM's own metadata (setMetadata by its fingerprint; the template's reaches no
        # running VM), and each VM's watcher checks it against the pin it kept at first boot
        admin = _admin(podctl)
        ssh_before = [h["ssh_total"] for h in admin.host_stats("iw16")]
        proc = podctl("run", "iw16", *TPU7X_ZONE, "--via", "boot", "--hosts", "all",
                      "--requirements", str(JAX_REQS), str(SCRIPTS / "jax_auto_init.py"), timeout=900)
        lines = proc.stdout.splitlines()
        assert "[host 0000] process 0 of 2, 16 devices" in lines, proc.stdout  # 4 chips x 2 per VM
        assert "[host 0001] process 1 of 2, 16 devices" in lines, proc.stdout
        assert [h["ssh_total"] for h in admin.host_stats("iw16")] == ssh_before
        watchers = podctl.json("status", "iw16", *TPU7X_ZONE)["watchers"]["iw16"]  # VM by VM
        assert len(watchers) == 2 and all(w.startswith("ready, ") and w.endswith(" started") for w in watchers)

        # one VM preempted mid-run: the MIG recreates it, and --recover goes on from the last
        # checkpoint (in GCS) on the slice made whole again, through the watchers: the VM made
        # again has only its template's metadata, so the second attempt writes its pointer again
        code, log, out = run_with_fault(
            podctl, ["run", "iw16", *TPU7X_ZONE, "--via", "boot", "--recover", "1", "--json",
                     str(TEMPLATE), *TINY, "--batch", "16", "--steps", "8", "--checkpoint-every", "2"],
            '"kind": "checkpoint", "step": 2', lambda err: podctl("fake", "inject", "preempt-vm", "iw16", "1"))
        assert code == 0, log[-4000:]
        result = json.loads(out)
        first, second = result["attempts"]
        assert result["recoveries"] == 1 and first["reason"] and second["reason"] is None, result
        assert second["start_step"] >= 2 and second["last_step"] == 8, result
        # nothing lost but what a VM gone without notice must lose: the second attempt went on
        # from the last checkpoint the first one committed, and only the steps after it were
        # done again
        before = log.split("recovering (attempt 2", 1)[0]
        saved = [int(step) for step in re.findall(r'"kind": "checkpoint", "step": (\d+)', before)]
        # (the template says a checkpoint when its write begins, and orbax writes it in the
        # background: the one under way when the VM went may not have committed, so the
        # second attempt starts from it or from the one before, never further back)
        assert second["start_step"] in saved and second["start_step"] >= max(saved) - 2, (saved, result)
        assert first["steps_lost"] == first["last_step"] - second["start_step"] <= 4, result  # two intervals
    finally:  # a failed test too: its MIG must not outlive it
        podctl("down", "iw16", "--yes", *TPU7X_ZONE, check=False)
    assert not any(_admin(podctl).resources().values())  # no MIG, template, policy or VM


def test_v5p_through_compute_engine_with_api_compute_and_a_stockout_that_leaves_nothing(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    zone = ["--zone", "us-central1-a"]
    made = podctl.json("up", "--slice", "v5p-16", "--name", "p16", "--api", "compute", *zone)
    assert (made["api"], made["ready"], made["hosts"], made["accelerator_type"]) == ("compute", True, 2, "v5p-16")
    # last week's slice, this week: `down` with no --api finds it on Compute Engine
    podctl("down", "p16", "--yes", *zone)
    assert not any(_admin(podctl).resources().values())

    # no capacity: the MIG's VMs cannot be made; `up` says so and deletes what it made
    podctl("fake", "inject", "stockout", "--zone", "us-central1-c")
    refused = podctl("up", "--slice", "tpu7x-8", "--name", "iw8", *TPU7X_ZONE, check=False)
    assert refused.returncode != 0 and "does not have enough resources" in refused.stderr, refused.stderr
    assert not any(_admin(podctl).resources().values())

    # the Cloud TPU API still refuses TPU7x, pointing to Compute Engine
    assert_one_line_error(podctl("up", "--slice", "tpu7x-8", "--api", "tpu", *TPU7X_ZONE, check=False),
                          2, "does not serve TPU7x", "--api compute")


def test_a_client_killed_in_the_middle_of_up_leaves_nothing_that_gc_does_not_find(podctl):
    """`up` makes the template first, then the policy, then the MIG: killed (SIGKILL, no
    undo) once the template exists, it leaves a template (and maybe a policy) with no MIG,
    which `ls` shows ORPHANED and `gc` deletes; a MIG it had made already is a slice, which
    `down` deletes. Either way nothing is left."""
    import subprocess
    import sys
    import time

    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    admin = _admin(podctl)
    up = subprocess.Popen([sys.executable, "-m", "podctl", "up", "--slice", "tpu7x-16", "--name", "cut",
                           *TPU7X_ZONE], env=podctl.env, cwd=podctl.tmp, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not admin.resources()["instance_templates"] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        up.kill()
        up.wait()
    held = admin.resources()
    assert held["instance_templates"] == ["fake-project/cut-tpl"], held
    listed = {s["name"]: s["state"] for s in podctl.json("ls", *TPU7X_ZONE)}
    assert listed["cut"] in ("ORPHANED", "CREATING", "READY"), listed
    if listed["cut"] != "ORPHANED":  # the MIG was made before the kill: a slice, `down`'s
        podctl("down", "cut", "--yes", *TPU7X_ZONE)
    else:
        swept = podctl.json("gc", *TPU7X_ZONE)
        assert [(item["name"], item["state"]) for item in swept] == [("cut", "ORPHANED")], swept
    assert not any(admin.resources().values()), admin.resources()


@pytest.mark.parametrize("sig, made_with", [
    (signal.SIGTERM, ["--slice", "tpu7x-16", *TPU7X_ZONE]),
    (signal.SIGHUP, ["--slice", "v5p-16", "--api", "compute", "--zone", "us-central1-a"]),
], ids=["SIGTERM-tpu7x", "SIGHUP-api-compute"])
def test_sigterm_or_sighup_during_up_on_compute_engine_leaves_nothing_billing(podctl, sig, made_with):
    """As SIGINT does: `up`, stopped while it waits for the MIG's VMs, deletes the MIG, its
    template and its workload policy before it exits 128+N (test_money_safety.py's Cloud
    TPU case, here with the smallest multi-host slice: one with a policy)."""
    import subprocess
    import sys
    import time

    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    admin = _admin(podctl)
    admin.set_timings(node_create=1e6)  # the VMs stay CREATING: up waits until the signal
    up = subprocess.Popen([sys.executable, "-m", "podctl", "up", "--name", "sig", *made_with], env=podctl.env,
                          cwd=podctl.tmp, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not admin.resources()["migs"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert admin.resources()["resource_policies"], admin.resources()  # a multi-host slice's
        up.send_signal(sig)
        _, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert up.returncode == 128 + sig, err
    assert "deleting sig, which this failed `up` created" in err, err
    assert f"interrupted ({signal.Signals(sig).name})" in err and "Traceback" not in err, err
    assert not any(admin.resources().values()), admin.resources()  # no MIG, template, policy or VM
