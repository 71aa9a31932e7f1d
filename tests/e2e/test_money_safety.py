"""Money safety as a user meets it: every way a podctl process is told to stop undoes
what it created; a deleted slice is not made again; every budget is kept or refused.
Each case runs the commands it is about in their own `podctl` process against the fake
cloud's daemon; what sets it up or reads its state runs in the test's process (`_here`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.cli_in_process import podctl_here
from tests.conftest import Podctl


def _here(podctl: Podctl, *args: str) -> subprocess.CompletedProcess:
    """`podctl ARGS` in this process (tests/cli_in_process.py): a case's set-up and reads."""
    return podctl_here(podctl.tmp, *args, env=podctl.env, check=True)


def _here_json(podctl: Podctl, *args: str) -> object:
    return json.loads(_here(podctl, *args, "--json").stdout)


def _admin(podctl: Podctl) -> FakeAdmin:
    _here(podctl, "fake", "start")
    return FakeAdmin(_here_json(podctl, "fake", "status")["admin"])


def _spawn(podctl: Podctl, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "podctl", *args], env=podctl.env, cwd=podctl.tmp,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _until(test, what: str, limit: float = 60.0) -> None:
    """Poll TEST until true; LIMIT only turns a hang into a failure that says what."""
    end = time.monotonic() + limit
    while not test():
        if time.monotonic() > end:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def _calls(admin: FakeAdmin, call: str) -> int:
    return admin.stats()["by_call"].get(call, 0)


@pytest.mark.parametrize("phase", ["create request", "wait"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_during_up_deletes_the_slice_up_created_and_a_second_signal_is_ignored(
        podctl, sig, phase):
    admin = _admin(podctl)
    admin.set_timings(node_create=1e6)  # stays CREATING: the wait goes on until the signal
    admin.reset_stats()
    if phase == "create request":
        admin.latency(1.0)  # the create request is in flight for a second
    proc = _spawn(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "sig")
    if phase == "create request":
        _until(lambda: _calls(admin, "nodes.create") >= 1, "the create request was sent")
    else:
        _until(lambda: _calls(admin, "operations.get") >= 1, "up waited on its operation")
    proc.send_signal(sig)
    admin.latency(0.5)  # the undo's calls take a while: a second signal lands inside it
    # Inside it for sure once its delete was asked for (counted on arrival, before the
    # latency): signals sent together before the first was handled would be taken in
    # signal-number order, SIGINT first, on a loaded machine.
    _until(lambda: _calls(admin, "nodes.delete") >= 1, "the undo asked for the delete")
    proc.send_signal(sig)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    admin.latency(0)
    assert proc.returncode == 128 + sig, err
    assert "deleting sig, which this failed `up` created" in err
    assert f"interrupted ({signal.Signals(sig).name})" in err and "Traceback" not in err
    assert _calls(admin, "nodes.delete") == 1
    _until(lambda: admin.is_empty(), "the slice was deleted")


def test_up_max_hours_on_an_existing_slice_writes_the_budget_that_budget_check_enforces(podctl):
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "had")
    again = podctl("--backend", "fake", "up", "--slice", "v5p-8", "--name", "had", "--max-hours", "2",
                   "--max-cost", "50", "--json")
    assert "set on had, which already existed" in again.stderr
    assert "never awaited" not in again.stderr, again.stderr  # the labels' update was waited for
    labels = json.loads(again.stdout)["labels"]
    assert labels["podctl-max-cost"] == "50_00" and labels["podctl-deadline"].isdigit()
    listed = _here_json(podctl, "--backend", "fake", "status", "had")
    assert listed["labels"]["podctl-deadline"] == labels["podctl-deadline"]
    _here(podctl, "--backend", "fake", "down", "had", "--yes")


def test_up_max_hours_on_an_existing_queued_resource_is_refused_with_a_reason(podctl):
    from tests.conftest import assert_one_line_error

    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "qr", "--queued")
    proc = podctl("--backend", "fake", "up", "--slice", "v5p-8", "--name", "qr", "--queued",
                  "--max-hours", "2", check=False)
    assert_one_line_error(proc, 2, "queued resource", "no budget was set")
    _here(podctl, "--backend", "fake", "down", "qr", "--yes")


def test_queue_add_max_cost_is_priced_as_up_prices_it(podctl, tmp_path):
    """Both price a budget from the same table. Every zone the fake serves has a shipped price
    now (us-central1 too: $4.20 per v5p chip-hour), so an unknown price is no longer reachable
    here; budget_labels refuses one (test_budget.py)."""
    from podctl.money.cost import generation_of, slice_hourly_cost

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    added = podctl.json("--backend", "fake", "queue", "add", "--slice", "v5p-8", "--max-cost", "10",
                        "--zone", "us-central1-a", "--json", str(script))
    _here(podctl, "--backend", "fake", "queue", "cancel", str(added["id"]))
    assert slice_hourly_cost("v5p-8", "us-central1-a", spot=False) == pytest.approx(16.80)
    assert generation_of("v5p-8") == "v5p"


SCRIPTS = Path(__file__).parents[1] / "scripts"


def _runs(podctl: Podctl) -> dict[str, dict]:
    return {r["run_id"]: r for r in _here_json(podctl, "--backend", "fake", "runs")}


def test_down_under_a_detached_run_closes_its_record_as_slice_deleted(podctl):
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "det")
    run_id = _here(podctl, "--backend", "fake", "run", "det", "--detach", str(SCRIPTS / "sleep_then_exit.py"),
                   "300").stdout.strip()
    assert _runs(podctl)[run_id]["state"] == "running"
    down = podctl("--backend", "fake", "down", "det", "--yes")
    assert f"run {run_id} ended with its slice (slice deleted)" in down.stderr
    record = _runs(podctl)[run_id]
    assert record["state"] == "lost" and record["extra"]["reason"] == "slice deleted"


def test_budget_check_matches_runs_by_slice_identity_and_closes_a_stale_running_record(podctl):
    """A record left `running` by an earlier slice of the same name is closed at once,
    not waited on for the grace period while the over-budget slice bills."""
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "same")
    stale = _here(podctl, "--backend", "fake", "run", "same", "--detach", str(SCRIPTS / "sleep_then_exit.py"),
                  "300").stdout.strip()
    admin = FakeAdmin(_here_json(podctl, "fake", "status")["admin"])
    admin.preempt("same", grace=0)  # the slice goes; nobody closes the detached run's record
    _here(podctl, "--backend", "fake", "down", "same", "--yes")
    # As a record from before `down` closed such records (or a slice lost some other way):
    import asyncio

    from podctl.cloud.storage import Storage
    from podctl.jobs.run_files import save_record
    from podctl.jobs.run_record import RunRecord

    status = _here_json(podctl, "fake", "status")
    gcs = Storage.connect(status["bucket"], endpoint=status["gcs"])
    record = RunRecord.from_json({**_runs(podctl)[stale], "state": "running"})
    asyncio.run(save_record(gcs, record))
    gcs.client._http.close()
    # A new slice of the same name, over its budget at once.
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "same", "--max-cost", "0.0001")
    time.sleep(0.5)
    check = podctl("--backend", "fake", "budget", "check", "--grace", "2m", "--json")
    reaped = json.loads(check.stdout)
    assert [r["name"] for r in reaped] == ["same"] and reaped[0]["runs_stopped"] == []
    closed = _runs(podctl)[stale]
    assert closed["state"] == "lost" and closed["extra"]["reason"] == "slice deleted"


def test_down_in_another_terminal_is_not_undone_by_run_recover(podctl):
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "mine")
    admin = FakeAdmin(_here_json(podctl, "fake", "status")["admin"])
    proc = _spawn(podctl, "--backend", "fake", "run", "mine", "--recover", "2",
                  str(SCRIPTS / "ticker.py"), "2000", "0.05")
    _until(lambda: any(r["state"] == "running" for r in _runs(podctl).values()), "the run is going")
    admin.reset_stats()
    podctl("--backend", "fake", "down", "mine", "--yes")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err
    assert "slice mine was deleted (by `podctl down` or another delete, not a preemption): " \
           "not making it again" in err, err
    assert "creating mine again" not in err and _calls(admin, "nodes.create") == 0
    assert admin.is_empty()


_API_SCRIPT = """
import podctl
with podctl.connect("fake") as cloud:
    with cloud.up("v5p-8", name="apisig") as s:
        print("up", flush=True)
"""


def test_sigterm_to_a_python_program_during_cloud_up_deletes_the_slice_it_was_making(podctl):
    admin = _admin(podctl)  # the daemon runs first: the program leaves it running
    admin.set_timings(node_create=1e6)
    admin.reset_stats()
    proc = subprocess.Popen([sys.executable, "-c", _API_SCRIPT], env=podctl.env, cwd=podctl.tmp,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    _until(lambda: _calls(admin, "operations.get") >= 1, "cloud.up() waited on its operation")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err  # as Ctrl-C ends a program
    assert _calls(admin, "nodes.delete") == 1, err
    admin.set_timings(node_create=90.0)
    _until(lambda: admin.is_empty(), "the slice was deleted")
