"""Budgets: the labels `up` writes, and the fake slices they tear down — from
`podctl budget check` and from the `run` follow loop, which first stops the run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl import steps
from podctl.base.errors import BudgetExceededError
from podctl.cloud import describe, terminate
from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.jobs.metrics import read_metrics
from podctl.jobs.run_files import load_record
from podctl.money import budget
from podctl.steps import budget_check
from tests.cli_in_process import podctl_here, shared_daemon
from tests.conftest import FAST, PARENT, TIME_SCALE, ZONE, Podctl, assert_one_line_error
from tests.e2e.test_jobs import make_job


def _here(cli: Podctl, *args: str) -> object:
    """`podctl ARGS --json` in this process, for what sets a case up or reads its state:
    the `podctl` processes are kept for what each case is about (tests/cli_in_process.py)."""
    import json

    return json.loads(podctl_here(cli.tmp, *args, "--json", env=cli.env, check=True).stdout)


def _budgeted_slice(api, name: str, hours: float, key) -> None:
    labels = budget.budget_labels(now=time.time(), usd_per_hour=None, max_cost=None,
                                  max_hours=hours, zone=ZONE, generation="v5p")
    asyncio.run(up(api, UpRequest(parent=PARENT, name=name, spec=SliceSpec.build("v5p-8"),
                                  ssh_keys=key.metadata_entry, owner="t", policy=FAST, labels=labels)))


def test_reap_deletes_only_what_is_past_its_deadline(api, fake, isolated):
    key = ensure_ssh_key(isolated / "config")
    _budgeted_slice(api, "short", 1.0, key)
    _budgeted_slice(api, "long", 10.0, key)
    now = time.time()
    assert asyncio.run(budget_check.reap(api, PARENT, now=now, policy=FAST)) == []
    said: list[str] = []
    later = now + 2 * 3600  # the clock moves on two hours, nothing waits for it
    dry = asyncio.run(budget_check.reap(api, PARENT, now=later, dry_run=True, policy=FAST))
    assert [(r.info.name, r.deleted) for r in dry] == [("short", False)]
    reaped = asyncio.run(budget_check.reap(api, PARENT, now=later, notice=said.append, policy=FAST))
    assert [(r.info.name, r.deleted) for r in reaped] == [("short", True)]
    assert "deadline passed" in said[0] and "deleting slice short" in said[0]
    assert asyncio.run(describe.find(api, PARENT, "short")) is None
    asyncio.run(terminate.terminate(api, PARENT, "long", policy=FAST))


def test_budget_check_from_the_cli_tears_a_tiny_budget_down(podctl):
    # $0.001 at $16.80/h is 0.2 s: past by the time `up` has waited for READY
    up_json = podctl.json("--backend", "fake", "up", "--slice", "v5p-8", "--name", "tiny",
                          "--zone", "us-east5-a", "--max-cost", "0.001")
    assert up_json["labels"]["podctl-max-cost"] == "0_001"
    deadline = int(up_json["labels"]["podctl-deadline"])
    time.sleep(max(0.0, deadline + 1 - time.time()))  # at most about a second
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "roomy", "--zone", "us-east5-a",
          "--max-cost", "500")
    proc = podctl("--backend", "fake", "budget", "check", "--zone", "us-east5-a")
    assert "deleted tiny ($" in proc.stdout and "roomy" not in proc.stdout
    assert "budget reached" in proc.stderr and "deleting slice tiny" in proc.stderr
    assert [s["name"] for s in _here(podctl, "--backend", "fake", "ls", "--zone", "us-east5-a")] == ["roomy"]
    _here(podctl, "--backend", "fake", "down", "roomy", "--yes", "--zone", "us-east5-a")


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One fake daemon for every refusal below (tests/cli_in_process.py, shared_daemon);
    its end checks that none of them made anything billable."""
    with shared_daemon(tmp_path_factory.mktemp("refusals")) as cli:
        yield cli


@pytest.mark.parametrize("args, words", [
    # (every zone the fake serves now has a shipped price: an unknown one is refused by
    # budget_labels, test_labels_hold_the_budget_and_the_sooner_deadline)
    (["up", "--slice", "v5p-8", "--max-cost", "nan", "--zone", "us-central1-a"], ["--max-cost"]),
    (["up", "--slice", "v5p-8", "--max-cost", "-1", "--zone", "us-east5-a"], ["--max-cost"]),
    (["up", "--slice", "v5p-8", "--max-hours", "soon"], ["--max-hours", "not a duration"]),
    (["run", "x", "--max-hours", "1", "--detach", "train.py"], ["drop --detach"]),
    (["budget", "check", "--grace", "never"], ["--grace"]),
])
def test_bad_budgets_are_refused_in_one_line(refusing, args, words):
    # in this process, on the module's daemon; one of the same refusals through a `podctl`
    # process: test_run_max_hours_and_budget_check_stop_runs_through_the_cli
    assert_one_line_error(podctl_here(refusing.tmp, "--backend", "fake", *args, env=refusing.env), 2, *words)


def test_the_run_loop_stops_the_run_then_deletes_the_slice(api, fake, isolated, tmp_path):
    key = ensure_ssh_key(isolated / "config")
    asyncio.run(up(api, UpRequest(parent=PARENT, name="budget8", spec=SliceSpec.build("v5p-8"),
                                  ssh_keys=key.metadata_entry, owner="t", policy=FAST)))
    info = asyncio.run(describe.describe(api, PARENT, "budget8"))
    job, lines = make_job(fake, info, key, tmp_path, "budget_train.py", flush_seconds=0.2)
    said: list[str] = []

    async def go():
        await job.start(await job.prepare())
        return await budget.watch_budget(steps.follow_run(job), api=api, parent=PARENT, job=job,
                                         info=info, max_hours=2 / 3600, notice=said.append,
                                         grace_seconds=60, policy=FAST)

    try:
        with pytest.raises(BudgetExceededError, match="run .* was stopped and slice budget8 deleted"):
            asyncio.run(go())
    finally:
        if asyncio.run(describe.find(api, PARENT, "budget8")):
            asyncio.run(terminate.terminate(api, PARENT, "budget8", policy=FAST))
    # v5p has a price in us-central1 now: the money spent is said too (4 chips x $4.20 x ~2 s)
    assert said[0].startswith("budget reached (0.0 h of --max-hours 0.000555556, $0.0")
    assert f"stopping run {job.run_id}, deleting slice budget8" in said[0]
    assert said[-1] == "deleted slice budget8"
    # SIGTERM came first: the script checkpointed and said so before the slice went
    assert any('"kind": "preempted"' in line for line in lines.by_host[0])
    record = asyncio.run(load_record(job.storage, job.run_id))
    assert record.state == "stopped" and record.ended is not None
    metrics = asyncio.run(read_metrics(job.storage, job.run_id))
    assert metrics.ended == "preempted" and metrics.checkpoints and metrics.steps > 0


def test_run_max_hours_and_budget_check_stop_runs_through_the_cli(podctl):
    script = podctl.tmp / "work" / "budget_train.py"
    script.parent.mkdir()
    script.write_text((Path(__file__).parents[1] / "scripts" / "budget_train.py").read_text())
    fake = ("--backend", "fake")
    # a bad budget through a `podctl` process as a user types it (the others: in this process)
    assert_one_line_error(podctl(*fake, "run", "x", "--max-hours", "1", "--detach", str(script),
                                 check=False), 2, "drop --detach")
    _here(podctl, *fake, "up", "--slice", "v5p-8", "--name", "follow8")
    proc = podctl(*fake, "run", "follow8", "--max-hours", "2s", str(script), check=False)
    assert proc.returncode == 1, proc.stderr
    assert "podctl: budget reached (0.0 h of --max-hours" in proc.stderr
    assert "deleting slice follow8" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("podctl: error: budget reached")
    assert _here(podctl, *fake, "ls") == []
    # A detached run on a slice whose own deadline passes: `budget check` stops it first.
    _here(podctl, *fake, "up", "--slice", "v5p-8", "--name", "cron8", "--max-hours", "3s")
    run_id = podctl_here(podctl.tmp, *fake, "run", "cron8", "--detach", str(script), env=podctl.env,
                         check=True).stdout.strip()
    deadline = int(_here(podctl, *fake, "status", "cron8")["labels"]["podctl-deadline"])
    time.sleep(max(0.0, deadline + 1 - time.time()))  # a few seconds at most
    reaped = podctl.json(*fake, "budget", "check", "--grace", "30s")
    assert [(r["name"], r["deleted"], r["runs_stopped"]) for r in reaped] == [("cron8", True, [run_id])]
    record = [r for r in _here(podctl, *fake, "runs") if r["run_id"] == run_id][0]
    assert record["state"] == "stopped" and record["extra"]["stopped_by"] == "budget"
    assert _here(podctl, *fake, "ls") == []


def _skew_daemon(podctl, hours: float) -> float:
    """Set the fake daemon's clock HOURS ahead of this machine's (a client that slow)
    -> the offset in seconds."""
    from podctl.fake.admin.admin_client import FakeAdmin

    podctl_here(podctl.tmp, "fake", "start", env=podctl.env, check=True)
    admin = FakeAdmin(_here(podctl, "fake", "status")["admin"])
    scale = admin.set_timings()["time_scale"]
    admin.advance(hours * 3600 * scale)  # simulated seconds: the fake's clock moves by 1/scale
    return hours * 3600


def test_a_slow_clients_max_hours_deadline_is_on_the_services_clock(podctl):
    ahead = _skew_daemon(podctl, 2)
    up_json = podctl.json("--backend", "fake", "up", "--slice", "v5p-8", "--name", "skewed",
                          "--zone", "us-east5-a", "--max-hours", "1")
    deadline = int(up_json["labels"]["podctl-deadline"])
    # an hour from now on the service's clock (the client's own would make it an hour ago there)
    assert deadline - (time.time() + ahead) == pytest.approx(3600, abs=60)
    proc = podctl("--backend", "fake", "budget", "check", "--zone", "us-east5-a")
    assert "skewed" not in proc.stdout
    _here(podctl, "--backend", "fake", "down", "skewed", "--yes", "--zone", "us-east5-a")


def test_budget_check_judges_a_deadline_on_the_services_clock(api, fake, isolated):
    key = ensure_ssh_key(isolated / "config")
    _budgeted_slice(api, "past", 1.0, key)  # an hour from now on this machine's clock ...
    fake.admin.advance(2 * 3600 * TIME_SCALE)  # ... is an hour ago on the service's, 2 h ahead
    reaped = asyncio.run(budget_check.reap(api, PARENT, policy=FAST))  # no `now`: the service's
    assert [(r.info.name, r.deleted) for r in reaped] == [("past", True)]
    assert api.server_now() - time.time() == pytest.approx(2 * 3600, abs=5)


def test_a_budget_set_on_an_existing_slice_waits_for_its_label_update(api, fake, isolated):
    """`up --max-hours` on a slice that exists: the labels' operation is polled until
    done (its coroutine was once returned to tenacity unawaited, and never ran)."""
    key = ensure_ssh_key(isolated / "config")
    _budgeted_slice(api, "had", 10.0, key)
    info = asyncio.run(describe.describe(api, PARENT, "had"))
    labels = budget.existing_budget_labels(info, max_cost=None, max_hours="2")
    fake.admin.reset_stats()
    labelled = asyncio.run(budget.set_on_existing(api, PARENT, info, labels, policy=FAST))
    assert fake.admin.stats()["by_call"].get("operations.get", 0) >= 1
    assert labelled.labels[budget.DEADLINE_LABEL] == labels[budget.DEADLINE_LABEL]
    asyncio.run(terminate.terminate(api, PARENT, "had", policy=FAST))


def test_budget_check_from_another_identity_stops_the_run_with_grace_before_deleting(podctl):
    """A team's cron on another account: its SSH key is not on the slice, so it stops
    the run through GCS (the agents' control channel), with the grace, then deletes."""
    import json

    script = podctl.tmp / "work" / "budget_train.py"
    script.parent.mkdir()
    script.write_text((Path(__file__).parents[1] / "scripts" / "budget_train.py").read_text())
    fake = ("--backend", "fake")
    _here(podctl, *fake, "up", "--slice", "v5p-8", "--name", "team8", "--max-hours", "3s")
    # started over SSH: the cron's own SSH key is refused, and it falls back to GCS (a run
    # started through the watchers is stopped through GCS by anyone, without trying SSH)
    run_id = podctl_here(podctl.tmp, *fake, "run", "team8", "--via", "ssh", "--detach", str(script),
                         env=podctl.env, check=True).stdout.strip()
    while '"kind": "step"' not in podctl_here(podctl.tmp, *fake, "logs", run_id, env=podctl.env).stdout:
        time.sleep(1)  # the script is training: it has something to lose
    deadline = int(_here(podctl, *fake, "status", "team8")["labels"]["podctl-deadline"])
    time.sleep(max(0.0, deadline + 1 - time.time()))
    cron = {"PODCTL_CONFIG_DIR": str(podctl.tmp / "cron-config")}  # its own key, not the slice's
    proc = podctl(*fake, "budget", "check", "--grace", "60s", "--json", env=cron)
    reaped = json.loads(proc.stdout)
    assert [(r["name"], r["deleted"], r["runs_stopped"]) for r in reaped] == [("team8", True, [run_id])]
    assert "could not reach the hosts of team8 over SSH" in proc.stderr
    assert "asked them to stop through GCS" in proc.stderr and "deleting it anyway" not in proc.stderr
    # The script had its SIGTERM and its grace before the slice went: it checkpointed.
    lines = podctl_here(podctl.tmp, *fake, "logs", run_id, env=podctl.env, check=True).stdout
    assert '"kind": "checkpoint"' in lines and '"kind": "preempted"' in lines
    assert "stop asked through GCS by budget" in lines
    record = [r for r in _here(podctl, *fake, "runs") if r["run_id"] == run_id][0]
    assert record["state"] == "stopped" and record["extra"]["stopped_by"] == "budget"
    assert record["exit_code"] is None or record["exit_code"] == 143
    assert _here(podctl, *fake, "ls") == []
