"""`podctl run --recover N --elastic --min-slices 2` on a fake 3-slice multislice (3 x
v5p-8, one host each): two slices' hosts gone (processes killed, no SSH) leave one, below
the floor: the run waits, no step; when one returns it goes on on two from their local
copies (no GCS restore), keeping the global batch; when the other returns it grows back
to three, with the state the two saved. One run for the three moves (CI time).

A multislice queued resource suspended whole by a preemption (no survivor, today's
re-create) is checked at the fake tier: tests/fake/test_elastic_slices.py."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.e2e.test_recovery import SCRIPTS, TEMPLATE, _collect, _start, _wait_for, run_with_fault

ARGS = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "24", "--lr", "1e-2", "--dtype", "float32",
        "--checkpoint-every", "4", "--local-every", "2", "--heartbeat-timeout", "10"]


def _configs(podctl, run_id: str) -> list[dict]:
    lines = podctl("logs", run_id, "--host", "0").stdout.splitlines()
    return [json.loads(line.split("] ", 1)[1]) for line in lines if '"kind": "config"' in line]


@pytest.mark.host_env
def test_below_the_floor_it_waits_then_goes_on_on_two_then_grows_back_to_three(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    podctl("up", "--slice", "v5p-8", "--num-slices", "3", "--name", "el")
    nodes = [n["name"] for n in podctl.json("status", "el")["nodes"]]

    def said(err: list[str], text: str) -> None:
        deadline = time.monotonic() + 600
        while not any(text in line for line in list(err)) and time.monotonic() < deadline:
            time.sleep(0.5)

    def lose_two_then_return_them(err: list[str]) -> None:
        for node in nodes[1:]:  # slices 1 and 2: their hosts gone
            admin.inject("no-ssh", node)
            admin.inject("kill-host", node, 0)

        def back() -> None:
            said(err, "below --min-slices 2: waiting")
            time.sleep(12)  # a poll or more: still no step on one slice
            admin.inject("no-ssh", nodes[2], off=True)  # slice 2 answers again, its disk kept
            said(err, '"slices": 2')
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:  # a few steps on two, then slice 1 answers too
                lines = list(err)
                on_two = next(i for i, line in enumerate(lines) if '"slices": 2' in line)
                if sum('"kind": "step"' in line for line in lines[on_two:]) >= 4:
                    break
                time.sleep(0.5)
            admin.inject("no-ssh", nodes[1], off=True)

        threading.Thread(target=back, daemon=True).start()

    code, log, out = run_with_fault(
        podctl, ["run", "el", "--recover", "2", "--elastic", "--min-slices", "2", "--json",
                 str(TEMPLATE), *ARGS, "--steps", "40"], '"kind": "checkpoint", "step": 4',
        lose_two_then_return_them, then=600)
    assert code == 0, log[-5000:]
    result = json.loads(out)
    attempts = result["attempts"]
    assert [a["slices"] for a in attempts] == [3, 2, 3], attempts
    assert result["recoveries"] == 1  # the loss; growing back is none
    # the fail-fast did not wait out its 45 s for the hosts that take no SSH connection
    assert "hosts 0001, 0002: gone, no SSH connection taken; not waiting for their end" in log, log[-5000:]
    waited = log.index("1 of 3 slices of el answer (lost: slice 1, 2), below --min-slices 2: waiting")
    went_on = log.index("slice 1 of el lost; going on on the 2 that answer (slice 0, 2)")
    assert waited < went_on and '"kind": "step"' not in log[waited:went_on]  # no step on one
    assert "elastic: slice 1 of el answers again; growing back" in log
    assert attempts[1]["reason"].startswith("grown back to 3 of 3")
    configs = [c for a in attempts for c in _configs(podctl, a["run_id"])]
    shrunk, grown = configs[1], configs[2]
    # on two: from the survivors' own copies, no GCS restore, the batch kept by accumulation
    assert (shrunk["restored_from"], shrunk["slices"], shrunk["full_slices"]) == ("local", 2, 3)
    assert shrunk["batch"] == 24 and shrunk["micro_batches"] == 3
    assert shrunk["restored_step"] >= attempts[0]["last_step"] - 4
    # back on three: the state the survivors saved at the grow-back stop
    assert (grown["slices"], grown["restored_from"]) == (3, "gcs")
    assert grown["restored_step"] == attempts[1]["last_step"]
    assert attempts[2]["last_step"] == 40
    # the account: the elastic moves in their own buckets, every second in one bucket
    report = podctl.json("goodput", result["run_id"])
    buckets = {name: b["seconds"] for name, b in report["buckets"].items()}
    assert abs(sum(buckets.values()) - report["total_seconds"]) <= len(buckets) * 1.0
    assert buckets["recovery"] == 0.0
    for moved in ("slice_lost", "growing_back", "reinitialization", "fewer_slices"):
        assert buckets[moved] > 0, (moved, buckets)
    podctl("down", "el", "--yes")
    assert not any(admin.resources().values()), admin.resources()


def test_a_preempted_slice_is_asked_for_again_alone_and_a_signal_deletes_a_pending_request(podctl):
    """`up --elastic` (2 x v5p-8 spot: one queued resource per slice). Slice 1 preempted
    while the zone is stocked out: slice 0 trains on alone (never made again) and slice 1's
    queued resource, once SUSPENDED, is asked for again on its own (`:reset`). Capacity
    back: the run grows back to two. Slice 1 preempted again, stocked out again: SIGTERM
    while its request waits deletes the request; nothing queued is left. No JAX: a script
    of steps that checkpoints on SIGTERM, ended by the signal (CI time)."""
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    podctl("up", "--slice", "v5p-8", "--num-slices", "2", "--elastic", "--spot", "--name", "el")
    created = {n["name"]: n for n in podctl.json("status", "el")["nodes"]}
    proc = _start(podctl, "run", "el", "--recover", "3", "--elastic", "--json",
                  str(SCRIPTS / "resumable_steps.py"), "100000")
    err: list[str] = []
    readers = [_collect(proc.stderr, err), _collect(proc.stdout, [])]
    try:
        _wait_for(err, "step 5", proc)
        admin.inject("stockout")
        admin.preempt("el-1")
        _wait_for(err, "asking for slice 1 of el again on its own (queued resource el-1", proc)
        members = {m["name"]: m["state"] for m in podctl.json("status", "el")["members"]}
        assert members == {"el-0": "ACTIVE", "el-1": "WAITING_FOR_RESOURCES"}, (members, "".join(err)[-3000:])
        admin.inject("capacity", "unlimited")
        _wait_for(err, "growing back to 2 of 2 slices of el", proc)
        mark = len(err)
        while not any("step" in line for line in err[mark:]):  # a step on two again
            assert proc.poll() is None, "".join(err)[-3000:]
            time.sleep(0.2)
        admin.inject("stockout")
        admin.preempt("el-1")
        while sum("asking for slice 1 of el again" in line for line in list(err)) < 2:
            assert proc.poll() is None, "".join(err)[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        admin.inject("capacity", "unlimited")
    for reader in readers:
        reader.join(timeout=10)
    log = "".join(err)
    assert proc.returncode == 143, log[-4000:]
    assert "elastic: slice 1 of el lost; going on on the 1 that answer (slice 0)" in log, log[-4000:]
    assert "deleting the request for slice 1 (el-1)" in log, log[-4000:]
    after = podctl.json("status", "el")
    assert [m["name"] for m in after["members"]] == ["el-0"], after["members"]
    node = next(n for n in after["nodes"] if n["name"] == "el-0")  # slice 0 never made again
    assert node["hosts"] == created["el-0"]["hosts"]
    podctl("down", "el", "--yes")
    assert not any(admin.resources().values()), admin.resources()
