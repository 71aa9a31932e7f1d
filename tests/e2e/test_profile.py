"""`podctl profile`: a JAX profiler trace of a running template run on a fake v5p-16,
asked for through GCS, written in TensorBoard's profile layout, loaded by the
profiler's own reader; the run goes on and finishes. The same run writes TensorBoard
scalars and, with `--xla-dump`, each host's HLO dump to its folder."""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
from pathlib import Path

import pytest

from podctl.host import run_layout
from podctl.jobs import run_record
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from tests.conftest import assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "templates" / "train_pjit.py"
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "8", "--lr", "1e-2", "--checkpoint-every", "1000"]


def _events(data: bytes) -> list:
    """TFRecord framing (length, crc, data, crc) of an event file -> Event protos."""
    from tensorboardX.proto.event_pb2 import Event

    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        out.append(Event.FromString(data[at + 12:at + 12 + length]))
        at += 12 + length + 4
    return out


def test_the_template_traces_on_request_and_writes_scalars_alone(tmp_path):
    """The template's side, without podctl: a request file in PODCTL_CONTROL_DIR is
    traced for its steps (after the compile step); scalars go to a local directory."""
    import os
    import subprocess
    import sys

    control = tmp_path / "control"
    control.mkdir()
    (control / "profile-p1.json").write_text(json.dumps({"id": "p1", "steps": 2}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCTL_")}
    env.update({"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
                "PODCTL_CONTROL_DIR": str(control)})
    proc = subprocess.run([sys.executable, str(TEMPLATE), *TINY, "--steps", "6", "--checkpoint-dir",
                           "none", "--tensorboard-dir", str(tmp_path / "tb")], env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads((control / "profile-p1.done").read_text())
    assert done == {"first_step": 2, "last_step": 3, "error": None}
    assert not (control / "profile-p1.json").exists()  # taken: traced once
    xplanes = list((control / "profile-p1").rglob("*.xplane.pb"))
    assert len(xplanes) == 1 and xplanes[0].stat().st_size > 0
    (events,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    tags = {v.tag for e in _events(events.read_bytes()) for v in e.summary.value}
    assert tags == {"train/loss", "train/step_time_s", "train/tokens_per_s"}  # no MFU on CPU


@pytest.mark.host_env
def test_a_profile_of_a_running_run_lands_in_gcs_and_the_run_finishes(podctl, tmp_path):
    podctl.env["PODCTL_BACKEND"] = "fake"
    gcs = podctl.json("fake", "start")["gcs"]
    _profile_bad_input(podctl, gcs)  # on this daemon: one started and stopped, not two
    podctl("up", "--slice", "v5p-16", "--name", "prof")
    try:
        run_id = podctl("run", "prof", "--detach", "--xla-dump", str(TEMPLATE), *TINY, "--steps", "40",
                        timeout=300).stdout.strip()
        # Asked as soon as the run exists: the agents hand it to the script once it steps.
        answer = json.loads(podctl("profile", run_id, "--steps", "3", "--timeout", "20m", "--json",
                                   timeout=1300).stdout)
        assert answer["missing"] == [] and sorted(answer["acks"]) == ["0", "1"], answer
        for host, ack in answer["acks"].items():
            assert ack["error"] is None and ack["last_step"] - ack["first_step"] == 2
            assert f"host-{int(host):04d}.xplane.pb" in " ".join(ack["files"])
        # The run went on to its end, every host exiting 0.
        follow = podctl("logs", run_id, "--follow", timeout=600)
        assert '"kind": "done", "step": 40' in follow.stdout, follow.stderr[-3000:]
        assert run_record.valid_run_id(run_id)
        pulled = podctl("profile", run_id, "--pull", str(tmp_path / "tb"))
        assert "tensorboard --logdir" in pulled.stdout
        session = tmp_path / "tb" / "plugins" / "profile" / answer["id"]
        xplanes = sorted(session.glob("*.xplane.pb"))
        assert [p.name for p in xplanes] == ["host-0000.xplane.pb", "host-0001.xplane.pb"]
        from jax.profiler import ProfileData  # the profiler's own reader of an XSpace

        for xplane in xplanes:
            planes = list(ProfileData.from_file(str(xplane)).planes)
            assert xplane.stat().st_size > 0 and planes, xplane
        trace = json.loads(gzip.decompress((session / "host-0000.perfetto_trace.json.gz").read_bytes()))
        assert trace  # a Chrome/Perfetto trace: parses
        storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
        names = [o.name for o in asyncio.run(storage.list(run_layout.run_prefix(run_id) + "/"))]
        # TensorBoard scalars, from process 0
        event_files = [n for n in names if "/tensorboard/events.out.tfevents." in n]
        assert len(event_files) == 1, names
        events = _events(asyncio.run(storage.download_bytes(event_files[0])))
        loss_steps = [e.step for e in events for v in e.summary.value if v.tag == "train/loss"]
        assert loss_steps == list(range(1, 41))
        # --xla-dump: each host's HLO, after the script ended
        for host in ("host-0000", "host-0001"):
            dumped = [n for n in names if f"/xla_dump/{host}/" in n]
            assert any(n.endswith(".txt") for n in dumped), names
    finally:
        podctl("down", "prof", "--yes")


def _profile_bad_input(podctl, gcs: str) -> None:
    """Refusals in one line, against runs recorded in the daemon's GCS (a "gone" one ended,
    a "live" one no agent answers for)."""
    storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
    from podctl.jobs.run_files import save_record
    from podctl.jobs.run_record import RunRecord

    ended = run_record.new_run_id("gone")
    asyncio.run(save_record(storage, RunRecord(
        run_id=ended, slice_name="gone", project="fake-project", zone="us-east5-a", num_hosts=2,
        kind="script", script="t.py", args=[], env_keys=[], bundle_hash=None, created=0.0,
        state="succeeded", exit_code=0, ended=1.0)))
    live = run_record.new_run_id("live")
    asyncio.run(save_record(storage, RunRecord(
        run_id=live, slice_name="live", project="fake-project", zone="us-east5-a", num_hosts=2,
        kind="script", script="t.py", args=[], env_keys=[], bundle_hash=None, created=0.0,
        state="running")))
    assert_one_line_error(podctl("profile", ended, check=False), 1, "has ended", "--pull")
    assert_one_line_error(podctl("profile", live, "--steps", "0", check=False), 2, "--steps")
    assert_one_line_error(podctl("profile", live, "--hosts", "2", check=False), 2, "hosts 0-1")
    assert_one_line_error(podctl("profile", live, "--hosts", "x", check=False), 2, "--hosts")
    assert_one_line_error(podctl("profile", live, "--timeout", "0", check=False), 2, "--timeout")
    assert_one_line_error(podctl("profile", "nope", check=False), 2, "not a run id")
    assert_one_line_error(podctl("profile", ended, "--pull", "out", check=False), 1, "no traces")
    # Nobody answers (no agent reads the request): said plainly, after the timeout.
    silent = podctl("profile", live, "--timeout", "1s", check=False)
    assert silent.returncode == 1 and "no trace from host 0, 1" in silent.stderr
