"""`podctl run --recover N --elastic` on a fake 3-slice multislice (3 x v5p-8, one host
each): a slice whose host is gone (its processes killed, no SSH) is left out and the
run goes on on the two survivors from their local copies (no GCS restore), keeping the
global batch; when the slice answers again the run grows back to three."""

from __future__ import annotations

import json
import time

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.e2e.test_recovery import TEMPLATE, run_with_fault

ARGS = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "24", "--lr", "1e-2", "--dtype", "float32",
        "--checkpoint-every", "4", "--local-every", "2", "--heartbeat-timeout", "10"]


def _configs(podctl, run_id: str) -> list[dict]:
    lines = podctl("logs", run_id, "--host", "0").stdout.splitlines()
    return [json.loads(line.split("] ", 1)[1]) for line in lines if '"kind": "config"' in line]


@pytest.mark.host_env
def test_a_lost_slice_is_left_out_then_grown_back(podctl):
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    podctl("up", "--slice", "v5p-8", "--num-slices", "3", "--name", "el")
    nodes = [n["name"] for n in podctl.json("status", "el")["nodes"]]
    lost = nodes[1]

    def lose_then_return(err: list[str]):
        admin.inject("no-ssh", lost)
        admin.inject("kill-host", lost, 0)

        def back() -> None:  # once the run goes on on two: slice 1 answers again
            deadline = time.monotonic() + 600
            while not any("going on on the 2" in line for line in err) and time.monotonic() < deadline:
                time.sleep(0.5)
            while not any('"slices": 2' in line for line in err) and time.monotonic() < deadline:
                time.sleep(0.5)
            admin.inject("no-ssh", lost, off=True)

        import threading

        threading.Thread(target=back, daemon=True).start()

    code, log, out = run_with_fault(
        podctl, ["run", "el", "--recover", "2", "--elastic", "--json", "--hosts", "all", str(TEMPLATE),
                 *ARGS, "--steps", "40"], '"kind": "checkpoint", "step": 4', lose_then_return,
        then=600)
    assert code == 0, log[-5000:]
    result = json.loads(out)
    attempts = result["attempts"]
    assert [a["slices"] for a in attempts] == [3, 2, 3], attempts
    assert "slice 1 of el lost; going on on the 2 that answer (slice 0, 2)" in log
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
    podctl("down", "el", "--yes")
    assert admin.resources() == {"nodes": [], "queued_resources": []}
