"""A stop is final: `podctl stop` of a `run --recover` ends it for good, whichever
attempt is live and whichever of its ids is named (the CLI against the fake daemon,
with a short script that is not JAX)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.conftest import Podctl, _share_env_signing_key, stop_fake_and_check
from tests.e2e.test_recovery import _collect, _start, _wait_for

TICKER = Path(__file__).parents[1] / "scripts" / "ticker.py"


def _follow_recovering(podctl: Podctl) -> tuple[subprocess.Popen, list[str], str, FakeAdmin]:
    """`podctl run m1 --recover 3 ticker.py` following in the background, started ->
    (the process, its stderr lines as they come, the run id, the fake's admin)."""
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    podctl("up", "--slice", "v5p-8", "--name", "m1")
    proc = _start(podctl, "run", "m1", "--recover", "3", str(TICKER), "100000", "0.2")
    err: list[str] = []
    _collect(proc.stderr, err)
    _collect(proc.stdout, [])
    _wait_for(err, "started on all", proc)
    run_id = re.search(r"run (\S+) on m1", "".join(err)).group(1)
    return proc, err, run_id, admin


@pytest.fixture(scope="module")
def podctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One fake daemon for the module: each case makes m1, and takes it down at its end
    (_end); a daemon started and stopped per case cost about 4 s of CPU each. At the end
    the daemon is stopped and checked to hold nothing billable."""
    tmp = tmp_path_factory.mktemp("final")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    cli = Podctl(tmp)
    cli.env["PODCTL_BACKEND"] = "fake"
    cli("fake", "start")
    try:
        yield cli
    finally:
        stop_fake_and_check(cli)


def _record(podctl: Podctl, run_id: str) -> dict:
    return next(r for r in podctl.json("runs") if r["run_id"] == run_id)


def _end(podctl: Podctl, proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    podctl("down", "m1", "--yes", check=False)


def test_podctl_stop_of_a_recover_run_ends_it_for_good(podctl):
    proc, err, run_id, _ = _follow_recovering(podctl)
    try:
        stop = podctl("stop", run_id)
        assert f"run {run_id} stopped on every host" in stop.stderr
        proc.wait(timeout=120)  # the follower ends: it does not relaunch
        log = "".join(err)
        assert "recovering" not in log and "attempt 2" not in log, log
        assert f"run {run_id} ended: stopped by podctl stop (a stop is final" in log
        # the last line says what the record says (it said "failed: host 0000 exited 143")
        assert log.strip().splitlines()[-1] == f"podctl: run {run_id} stopped by podctl stop", log
        record = _record(podctl, run_id)
        assert record["state"] == "stopped" and record["extra"]["stopped_by"] == "podctl stop"
        assert record["extra"]["recovering"] is False
        again = podctl("stop", run_id)
        assert "is not running (stopped" in again.stderr
    finally:
        _end(podctl, proc)


def test_sigterm_to_a_recover_follower_records_the_run_stopped_by_it(podctl):
    """Recorded `failed exit 143` before: the follower's end wrote over the stop's."""
    proc, err, run_id, _ = _follow_recovering(podctl)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        assert proc.returncode == 143, "".join(err)
        assert f"interrupted (SIGTERM); run {run_id} stopped on every host" in "".join(err)
        time.sleep(3)  # a follower still writing would write within its poll
        record = _record(podctl, run_id)
        assert (record["state"], record["extra"]["stopped_by"]) == ("stopped", "SIGTERM"), record
        row = next(line for line in podctl("runs").stdout.splitlines() if line.startswith(run_id))
        assert row.endswith("stopped by SIGTERM"), row
    finally:
        _end(podctl, proc)


def test_stopping_a_recovered_run_by_its_first_id_stops_the_attempt_that_is_live(podctl):
    proc, err, run_id, admin = _follow_recovering(podctl)
    try:
        admin.preempt("m1")
        _wait_for(err, "recovering (attempt 2 of 4)", proc)
        deadline = time.monotonic() + 240
        while "".join(err).count("started on all") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(err)
            time.sleep(0.2)
        # `podctl runs` shows the run by its live attempt: going, not the first's end
        record = _record(podctl, run_id)
        live = record["extra"]["attempts"][-1]["run_id"]
        assert live != run_id
        table = podctl("runs").stdout
        row = next(line for line in table.splitlines() if line.startswith(run_id))
        assert " running " in row and "exit   -" in row, table
        stop = podctl("stop", run_id)
        assert f"run {run_id} stopped on every host" in stop.stderr
        proc.wait(timeout=120)
        log = "".join(err)
        assert "attempt 3" not in log and "stopped by podctl stop (a stop is final" in log, log
        for rid in (run_id, live):
            assert _record(podctl, rid)["state"] == "stopped"
        attempts = _record(podctl, run_id)["extra"]["attempts"]
        assert len(attempts) == 2 and attempts[-1]["reason"] == "stopped by podctl stop"
    finally:
        _end(podctl, proc)
    assert json.loads(podctl("ls", "--json").stdout) == []


def test_a_recover_follower_that_slept_while_gc_collected_its_preempted_slice_recovers(podctl):
    """A laptop asleep: the slice is preempted and `podctl gc` collects it once its
    hosts have been silent past the host-lost time (GCS's clock); the follower, woken,
    recovers the run rather than taking the slice's absence for its owner's delete."""
    import os
    import signal

    from podctl.policy import gc
    from podctl.base._sync import run_sync
    from podctl.cloud.connect import api_for_endpoint
    from podctl.cloud.storage import Storage

    proc, err, run_id, admin = _follow_recovering(podctl)
    status = podctl.json("fake", "status")
    api = api_for_endpoint(status["tpu_api"])
    storage = Storage.connect(status["bucket"], endpoint=status["gcs"])
    parent = f"projects/{status['project']}/locations/{status['zone']}"
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            admin.preempt("m1", grace=0)
            while podctl.json("status", "m1")["state"] != "PREEMPTED":
                time.sleep(0.5)
            later = api.server_now() + gc.HOST_LOST_SECONDS + 1
            done = run_sync(gc.collect(api, parent, now=later, keep=gc.run_keeper(storage, now=later),
                                       before_delete=lambda infos: gc.close_runs(storage, infos)))
            assert [(i.info.name, i.deleted) for i in done] == [("m1", True)]
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        _wait_for(err, "`podctl gc` collected it meanwhile", proc)
        _wait_for(err, "creating m1 again", proc)
        deadline = time.monotonic() + 240
        while "".join(err).count("started on all") < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(err)
            time.sleep(0.2)
        assert "not making it again" not in "".join(err)
        podctl("stop", run_id)
        proc.wait(timeout=120)
    finally:
        _end(podctl, proc)
