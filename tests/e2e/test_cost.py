"""Prices, `podctl plan` arithmetic against hand-worked cases, numbers as typed, the
metrics a run's host-0 log carries, and `podctl cost` / `ls` against the fake cloud."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from podctl.host import run_layout
from podctl.host.agent_logs import LogShipper
from podctl.jobs import run_record
from podctl.jobs.metrics import read_metrics
from podctl.jobs.run_record import RunRecord
from tests.cli_in_process import podctl_here
from tests.conftest import Podctl, assert_one_line_error
from tests.unit.test_cost import _metric_lines  # noqa: F401

# ---- prices -------------------------------------------------------------------------


# ---- plan arithmetic ----------------------------------------------------------------


# ---- metrics --------------------------------------------------------------------------


def _write_run(storage: Storage, tmp_path, run_id: str, *, created: float, ended: float | None,
               lines: list[str], zone: str = "us-east5-a") -> None:
    """A run record and host 0's log as the agent ships it (LogShipper chunks)."""
    record = RunRecord(run_id=run_id, slice_name=run_id.rsplit("-", 3)[0], project="fake-project",
                       zone=zone, num_hosts=2, kind="script", script="train.py", args=[],
                       env_keys=[], bundle_hash=None, created=created, state="succeeded",
                       exit_code=0, ended=ended)
    data = json.dumps(record.to_json()).encode()
    asyncio.run(storage.upload_bytes(run_layout.record_object(run_id), data))
    asyncio.run(storage.upload_bytes(run_layout.index_object(run_id), data))
    shipper = LogShipper({"run_id": run_id, "host": 0, "flush_seconds": 3600},
                         _AgentBucket(storage.client.bucket(storage.bucket_name)), tmp_path)
    for i, line in enumerate(lines):
        shipper.line(line)
        if i % 5 == 4:  # several chunks, as a long run has
            shipper.flush()
    shipper.flush()
    shipper.local.close()
    assert shipper.chunk > 2


class _AgentBucket:
    """The face the host agent ships logs through (podctl/host/agent_gcs.Bucket, which
    takes its token from a host's metadata server), here over google-cloud-storage."""

    def __init__(self, bucket):
        self.bucket = bucket

    def upload(self, name: str, data: bytes, content_type: str = "text/plain") -> None:
        self.bucket.blob(name).upload_from_string(data, content_type=content_type)


def test_read_metrics_from_log_chunks_in_gcs(fake, tmp_path):
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    run_id = run_record.new_run_id("m1")
    _write_run(storage, tmp_path, run_id, created=time.time() - 3600, ended=time.time(),
               lines=_metric_lines())
    m = asyncio.run(read_metrics(storage, run_id))
    assert (m.steps, m.productive_seconds, m.final_loss) == (11, 3000.0, 7.9)
    assert m.median_mfu == pytest.approx(0.49)


# ---- the CLI ------------------------------------------------------------------------

def test_plan_prints_its_working(podctl):
    out = podctl("plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-4096", "--mfu", "0.5",
                 "--zone", "us-east5-a").stdout
    assert "(6 x 70B params + 12 x 80 layers x 8,192 width x 8,192 seq) x 1T tokens = 4.844e+23" in out
    assert "2048 (v5p-4096)" in out and "286.3 h; / goodput 0.9 = 13.3 days" in out
    assert "$8,601.60" in out and "MFU         0.5 (--mfu)" in out
    data = json.loads(podctl("plan", "--params", "7e10", "--tokens", "1e12", "--compare",
                             "v5p-1024,v5p-4096,v5p-8192", "--zone", "us-east5-a", "--spot",
                             "--json").stdout)
    assert [e["chips"] for e in data["estimates"]] == [512, 2048, 4096]
    assert data["estimates"][1]["price"]["tier"] == "spot"
    assert "maxtext" in data["mfu_source"]  # published, no longer one assumed 0.45
    # published: Llama 2 70B on v5p-1024 (512 chips), flat inside one slice at every size
    assert [e["mfu"] for e in data["estimates"]] == [0.6725] * 3
    table = podctl("plan", "--params", "70B", "--tokens", "1T", "--compare", "v5p-1024,v5p-8192",
                   "--zone", "us-east5-a").stdout
    assert "SYSTEM" in table and "v5p-8192" in table and "$/M TOKENS" in table


def test_plan_in_a_region_without_a_price_still_plans_and_names_the_cheapest(podctl):
    proc = podctl("plan", "--params", "70B", "--tokens", "1T", "--slice", "v6e-256", "--region",
                  "europe-west1")
    assert "h; / goodput" in proc.stdout and "$" not in proc.stdout.split("memory")[0]
    assert ("no on-demand price for v6e in europe-west1; cheapest: us-central1 at $2.70; "
            "pass --price v6e=USD") in proc.stderr
    priced = podctl("plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--zone",
                    "us-central1-a", "--price", "4", "--json")
    assert json.loads(priced.stdout)["estimates"][0]["usd_per_hour"] == 16.0


@pytest.mark.parametrize("args, words", [
    (["--params", "0", "--tokens", "1T", "--slice", "v5p-8"], ["--params", "above zero"]),
    (["--params", "70B", "--tokens", "-5", "--slice", "v5p-8"], ["--tokens", "above zero"]),
    (["--params", "70B", "--tokens", "lots", "--slice", "v5p-8"], ["--tokens", "70B"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--mfu", "1.5"], ["(0, 1]"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--mfu", "0"], ["(0, 1]"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-4095"], ["v5p-4096"]),
    (["--params", "70B", "--tokens", "1T", "--compare", "v5p-8,v9-8"], ["unknown TPU generation"]),
    (["--params", "70B", "--tokens", "1T"], ["--slice"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--price", "0"], ["--price"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--mfu", "0.4", "--mfu-from",
      "x-20261203-000000-abcd"], ["choose one"]),
])
def test_plan_refuses_nonsense_in_one_line(tmp_path, args, words):
    # in this process (tests/cli_in_process.py); through a `podctl` process:
    # test_plan_refuses_nonsense_through_a_podctl_process
    assert_one_line_error(podctl_here(tmp_path, "plan", *args), 2, *words)


def test_plan_refuses_nonsense_through_a_podctl_process(podctl):
    assert_one_line_error(podctl("plan", "--params", "70B", "--tokens", "lots", "--slice", "v5p-8",
                                 check=False), 2, "--tokens", "70B")


def _here(podctl: Podctl, *args: str) -> object:
    """`podctl ARGS --json` in this process, for a case's set-up and reads."""
    return json.loads(podctl_here(podctl.tmp, *args, "--json", env=podctl.env, check=True).stdout)


def test_ls_and_cost_show_prices_on_the_fakes_default_zone_and_elsewhere(podctl):
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "priced")  # us-east5-a
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-16", "--name", "unpriced", "--zone", "us-central1-a")
    listed = _here(podctl, "--backend", "fake", "ls")
    assert listed[0]["usd_per_hour"] == pytest.approx(16.80) and listed[0]["cost_usd"] >= 0
    human = podctl("--backend", "fake", "ls").stdout
    assert "$/HOUR" in human and "COST" in human and "$16.80" in human
    central = podctl("--backend", "fake", "ls", "--zone", "us-central1-a").stdout
    assert "unpriced" in central and "$33.60" in central  # v5p is priced in us-central1 now
    assert _here(podctl, "--backend", "fake", "ls", "--zone", "us-central1-a")[0]["usd_per_hour"] == \
        pytest.approx(33.60)
    one = _here(podctl, "--backend", "fake", "cost", "priced")
    assert (one["chips"], one["usd_per_hour"], one["tier"]) == (4, pytest.approx(16.8), "on-demand")
    assert one["cost_usd"] == pytest.approx(16.8 * one["age_seconds"] / 3600, abs=0.01)
    every = podctl("--backend", "fake", "cost", "--price", "1", "--zone", "us-central1-a")
    assert "unpriced" in every.stdout and "$8.00/h" in every.stdout
    assert every.stdout.splitlines()[0].split() == ["SLICE", "CHIPS", "TIER", "AGE", "USD/HOUR", "COST"]
    _here(podctl, "--backend", "fake", "down", "priced", "--yes")
    _here(podctl, "--backend", "fake", "down", "unpriced", "--yes", "--zone", "us-central1-a")


def test_cost_and_goodput_of_a_run_and_mfu_from_it(podctl, tmp_path):
    gcs = podctl.json("fake", "start")["gcs"]
    storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
    now = time.time()
    run_id = run_record.new_run_id("gone16", now)
    _write_run(storage, tmp_path, run_id, created=now - 3600, ended=now, lines=_metric_lines())
    report = podctl.json("--backend", "fake", "cost", run_id)
    # by hand: 2 hosts = 8 chips x $4.20 x 1 h; 3000 s of training in 3600 billed
    assert report["chips"] == 8 and report["tier"] == "on-demand" and not report["tier_known"]
    assert report["cost_usd"] == pytest.approx(33.60)
    assert report["goodput"] == pytest.approx(3000 / 3600)
    assert report["tokens"] == 11 * 8192
    assert report["usd_per_million_tokens"] == pytest.approx(33.60 / (11 * 8192 / 1e6))
    assert report["median_mfu"] == pytest.approx(0.49)
    human = podctl("--backend", "fake", "cost", run_id).stdout
    assert "goodput   83.3%" in human
    plan = podctl.json("--backend", "fake", "plan", "--params", "70B", "--tokens", "1T", "--slice",
                       "v5p-4096", "--mfu-from", run_id)
    assert plan["estimates"][0]["mfu"] == pytest.approx(0.49) and run_id in plan["mfu_source"]
    cpu_run = run_record.new_run_id("cpu8", now)
    (tmp_path / "cpu").mkdir()
    _write_run(storage, tmp_path / "cpu", cpu_run, created=now - 60, ended=now,
               lines=_metric_lines("cpu"))
    proc = podctl("--backend", "fake", "plan", "--params", "70B", "--tokens", "1T", "--slice",
                  "v5p-8", "--mfu-from", cpu_run, check=False)
    assert_one_line_error(proc, 2, f"run {cpu_run} measured no MFU (it ran on cpu); pass --mfu")


def test_cost_of_a_run_shows_the_projects_parts_from_what_it_measured(podctl, tmp_path):
    """The same parts as `plan`, from the run: by hand, 8 chips x $4.20 x 1 h billed = $33.60
    (badput included: goodput measured, not divided again); 2 people x $100/h x 1 h = $200;
    the checkpoint it left (1,000,000 bytes = 0.001 GB) x (1 h + 7 d) / 730 h x $0.02/GB-month
    = $0.00000465; 2 TB x $0.01/GB = $20."""
    gcs = podctl.json("fake", "start")["gcs"]
    storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
    now = time.time()
    run_id = run_record.new_run_id("billed8", now)
    _write_run(storage, tmp_path, run_id, created=now - 3600, ended=now, lines=_metric_lines())
    asyncio.run(storage.upload_bytes(f"{run_layout.checkpoints_prefix(run_id)}11/state", b"x" * 10**6))
    report = podctl.json("--backend", "fake", "cost", run_id, "--people", "2", "--rate", "100",
                         "--dataset-tb", "2", "--egress-usd-per-gb", "0.01")
    parts = report["project"]["parts"]
    assert report["checkpoint_bytes"] == 10**6
    assert parts["compute"]["usd"] == pytest.approx(33.60)
    assert parts["staff"]["usd"] == pytest.approx(200.0)
    assert parts["checkpoint_storage"]["usd"] == pytest.approx(0.001 * (1 + 168) / 730 * 0.02)
    assert parts["data_transfer"]["usd"] == pytest.approx(20.0)
    assert report["project"]["total_usd"] == pytest.approx(33.60 + 200 + 20 + 0.001 * 169 / 730 * 0.02)
    human = podctl("--backend", "fake", "cost", run_id, "--people", "2", "--rate", "100").stdout
    assert "goodput   83.3%" in human and "  staff" in human and "$200.00" in human


def test_plan_takes_goodput_from_a_run(podctl, tmp_path):
    """--goodput-from RUN_ID: 3000 s of training in 3600 billed = 0.8333; the project's
    compute is the run's chip cost / 0.8333, by hand."""
    gcs = podctl.json("fake", "start")["gcs"]
    storage = Storage.connect(FAKE_BUCKET, endpoint=gcs)
    now = time.time()
    run_id = run_record.new_run_id("good16", now)
    _write_run(storage, tmp_path, run_id, created=now - 3600, ended=now, lines=_metric_lines())
    plan = podctl.json("--backend", "fake", "plan", "--params", "70B", "--tokens", "1T", "--slice",
                       "v5p-4096", "--goodput-from", run_id, "--mfu-from", run_id)
    row = plan["estimates"][0]
    assert row["project"]["goodput"] == pytest.approx(3000 / 3600)
    assert run_id in row["project"]["goodput_source"] and run_id in row["mfu_source"]
    # the row's total is the run's billed cost: chips x price x hours / the measured goodput
    assert row["total_usd"] == pytest.approx(2048 * 4.20 * row["hours"] / (3000 / 3600))
    assert row["project"]["parts"]["compute"]["usd"] == pytest.approx(row["total_usd"])
