"""`podctl plot` and podctl.policy.plot: pictures of runs drawn from the metric lines in GCS,
opened again and checked for size and drawn pixels."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest

from podctl.host import run_layout
from podctl.jobs import run_record
from podctl.jobs.run_files import save_record
from podctl.jobs.run_record import RunRecord
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from tests.conftest import assert_one_line_error

mpimg = pytest.importorskip("matplotlib.image")


def _lines(first: int, last: int, start_step: int, platform: str = "tpu") -> list[str]:
    out = ["booting", json.dumps({"kind": "config", "platform": platform, "params": 1000, "batch": 8,
                                  "seq_len": 16, "start_step": start_step})]
    for step in range(first, last + 1):
        out.append(json.dumps({"kind": "step", "step": step, "loss": 5.0 / step, "step_time_s": 0.5,
                               "tokens_per_s": 256.0 + step, "mfu": 0.4 if platform == "tpu" else None,
                               **({"compile": True} if step == first else {})}))
        if step % 4 == 0:
            out.append(json.dumps({"kind": "checkpoint", "step": step}))
    return out


def _write(storage: Storage, run_id: str, lines: list[str], **extra: object) -> None:
    """A run record and host 0's log in chunks, as the agent leaves them."""
    record = RunRecord(run_id=run_id, slice_name="plots", project="fake-project", zone="us-east5-a",
                       num_hosts=2, kind="script", script="train.py", args=[], env_keys=[],
                       bundle_hash=None, created=time.time() - 60, state="succeeded", exit_code=0,
                       ended=time.time(), extra=dict(extra))
    asyncio.run(save_record(storage, record))
    for n, at in enumerate(range(0, len(lines), 7), start=1):
        chunk = "".join(line + "\n" for line in lines[at:at + 7]).encode()
        asyncio.run(storage.upload_bytes(run_layout.chunk_object(run_id, 0, n), chunk))


def _recovered(storage: Storage) -> tuple[str, str]:
    """A run preempted after step 10 (last checkpoint 8) and resumed at 8 up to 20."""
    first, second = run_record.new_run_id("plots"), run_record.new_run_id("plots")
    attempts = [{"number": 1, "run_id": first, "start_step": 0, "last_step": 10, "steps_lost": 2},
                {"number": 2, "run_id": second, "start_step": 8, "last_step": 20, "steps_lost": None}]
    _write(storage, first, _lines(1, 10, 0), attempts=attempts, recoveries=1)
    _write(storage, second, _lines(9, 20, 8), parent=first, attempt=2)
    return first, second


def _assert_a_picture(path: Path, min_width: int = 600) -> None:
    pixels = mpimg.imread(path)  # a PNG that opens
    height, width = pixels.shape[:2]
    assert width >= min_width and height >= 400
    rgb = pixels[..., :3]
    drawn = (rgb < 0.9).any(axis=-1).mean()  # not blank: lines, axes, text
    assert 0.01 < drawn < 0.9, drawn


def test_a_recovered_run_is_one_series_with_the_lost_steps(fake, tmp_path):
    from podctl.policy import plot

    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    run_id, second = _recovered(storage)
    series = asyncio.run(plot.load_series(storage, run_id))
    assert [s.run_id for s in series.segments] == [run_id, second]
    assert [s.start_step for s in series.segments] == [0, 8]
    assert series.steps == 10 + 12 and series.lost == [(8, 10)]
    out = tmp_path / "run.png"
    fig, _ = asyncio.run(plot.plot_runs(storage, [run_id], out,
                                        buckets={run_id: {"productive": 40.0, "recovery": 12.0,
                                                          "wasted_progress": 1.0}}))
    _assert_a_picture(out)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "attempt 1" in labels and "attempt 2" in labels and "steps lost (8-10]" in labels
    assert fig.axes[-1].get_title().startswith("where the slice time went")


def test_podctl_plot_writes_png_and_html_for_several_runs(podctl):
    gcs = podctl.json("fake", "start")["gcs"]
    storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
    run_id, _ = _recovered(storage)
    cpu = run_record.new_run_id("cpu")
    _write(storage, cpu, _lines(1, 15, 0, platform="cpu"))
    done = podctl("--backend", "fake", "plot", run_id, cpu, "-o", "both.png")
    assert done.stdout.startswith("wrote both.png") and "in 2 attempts" in done.stdout
    _assert_a_picture(podctl.tmp / "both.png")
    podctl("--backend", "fake", "plot", cpu, "-o", "page.html")
    page = (podctl.tmp / "page.html").read_text()
    png = base64.b64decode(page.split("base64,", 1)[1].split('"', 1)[0])
    (podctl.tmp / "from-page.png").write_bytes(png)
    _assert_a_picture(podctl.tmp / "from-page.png")
    podctl("--backend", "fake", "plot", cpu)  # default: RUN_ID.png here
    _assert_a_picture(podctl.tmp / f"{cpu}.png")


def test_podctl_plot_bad_input(podctl):
    gcs = podctl.json("fake", "start")["gcs"]
    storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
    quiet = run_record.new_run_id("quiet")
    _write(storage, quiet, ["no metric lines here"])
    assert_one_line_error(podctl("--backend", "fake", "plot", quiet, "-o", "x.jpg", check=False),
                          2, ".png or .html")
    assert_one_line_error(podctl("--backend", "fake", "plot", quiet, check=False), 2,
                          "logged no training steps")
    assert_one_line_error(podctl("--backend", "fake", "plot", "not-a-run", check=False), 2,
                          "not a run id")
    assert_one_line_error(podctl("--backend", "fake", "plot", run_record.new_run_id("absent"), check=False),
                          1, "no run")
    assert not list(podctl.tmp.glob("*.png")) and not list(podctl.tmp.glob("*.jpg"))
