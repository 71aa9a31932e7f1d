"""The queue's tick on the in-process fake cloud: real store, real clients, real
hosts; only the tick's clock is moved (for backoffs and --max-hours)."""

from __future__ import annotations

import pytest

from tests.queue_support import Queue


@pytest.fixture(params=["sqlite", "postgresql"])
def queue(request, fake, api, isolated) -> Queue:
    """The same queue on either store: SQLite in the state dir, or a real PostgreSQL."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    return Queue(fake, api, isolated, url=url)


def test_three_entries_run_to_success_over_repeated_ticks(queue):
    ids = [queue.add("many_lines.py", "5", name=f"job{i}", priority=i).id for i in range(3)]
    ids.append(queue.add("many_lines.py", "3", slice_type="v5p-16", tier="spot").id)
    entries = queue.settle()
    assert [entries[i].state for i in ids] == ["succeeded"] * 4
    for e in entries.values():
        assert e.exit_code == 0 and e.attempt == 1 and len(e.attempts) == 1
        assert e.run_id and e.attempts[0]["run_id"] == e.run_id and e.attempts[0]["cleaned"]
    # the runs' own records say so too (`podctl runs`)
    from podctl.base._sync import run_sync
    from podctl.jobs.run_files import list_runs

    records = {r.run_id: r for r in run_sync(list_runs(queue.storage))}
    assert {records[e.run_id].state for e in entries.values()} == {"succeeded"}
    moves = [(ev["entry"], ev["from"], ev["to"]) for ev in queue.events() if ev["event"] == "transition"]
    for i in ids:
        assert [m[1:] for m in moves if m[0] == i] == [
            ("pending", "provisioning"), ("provisioning", "starting"), ("starting", "running"),
            ("running", "succeeded")]


def _creates(fake) -> int:
    by_call = fake.admin.stats()["by_call"]
    return by_call.get("nodes.create", 0) + by_call.get("queuedResources.create", 0)


def test_stockout_keeps_an_entry_pending_until_capacity_is_freed(queue, fake):
    fake.admin.capacity(0)
    entry = queue.add("many_lines.py", "2")
    e = queue.until(lambda es: es[entry.id].state == "pending" and es[entry.id].backoff == 1,
                    "backed off")[entry.id]
    assert "stockout" in e.last_error and e.next_try_at > queue.clock() + 30
    assert e.attempt == 1 and e.attempts[0]["slice"] == e.slice_name
    for _ in range(3):  # not due yet: no new creation, no API call for it at all
        assert queue.tick().api_calls == 0
    assert _creates(fake) == 1 and queue.entry(entry.id).state == "pending"
    queue.clock.offset += 3600  # the backoff has passed, still no capacity: backs off again
    queue.until(lambda es: es[entry.id].backoff == 2, "backed off twice")
    assert queue.entry(entry.id).next_try_at - queue.clock() > 100  # doubled, about 120 s
    fake.admin.capacity(None)
    queue.clock.offset += 3600
    e = queue.settle()[entry.id]
    assert e.state == "succeeded" and e.attempt == 1 and e.backoff == 0 and _creates(fake) == 3


def test_quota_keeps_an_entry_pending_with_backoff(queue, fake):
    fake.admin.set_quota(0, project="test-project")
    entry = queue.add("many_lines.py", "2", tier="queued")
    queue.tick()
    e = queue.entry(entry.id)
    assert e.state == "pending" and "quota" in e.last_error.lower() and e.next_try_at > queue.clock()
    fake.admin.set_quota(None, project="test-project")
    queue.clock.offset += 3600
    assert queue.settle()[entry.id].state == "succeeded"


def test_a_run_over_max_hours_is_stopped_and_its_slice_deleted(queue, fake):
    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "99"}, max_hours=1.0)
    queue.until(lambda es: es[entry.id].state == "running", "running")
    queue.tick()
    assert queue.entry(entry.id).state == "running"  # within its hour
    queue.clock.offset += 2 * 3600
    queue.tick()
    e = queue.entry(entry.id)
    assert e.state == "failed" and "--max-hours" in e.last_error and e.exit_code is None
    e = queue.settle()[entry.id]
    assert e.attempts[0]["cleaned"]
    from podctl.base._sync import run_sync
    from podctl.jobs.run_files import read_record

    assert run_sync(read_record(queue.storage, e.run_id)).state == "stopped"


def test_a_scripts_own_failure_is_final(queue):
    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "0", "FAIL_CODE": "3"}, max_attempts=3)
    e = queue.settle()[entry.id]
    assert (e.state, e.exit_code, e.attempt) == ("failed", 3, 1)
    assert "exited 3" in e.last_error


def test_nodes_that_may_not_use_the_bucket_fail_the_entry_at_once_and_free_the_slice(queue, fake):
    """A secure-by-default project whose nodes' account has no role: every attempt would
    fail alike, so the entry fails at its first, with the identity check's line, and its
    slice is deleted rather than made again and again."""
    fake.admin.set_iam(secure=True)
    entry = queue.add("many_lines.py", "3", max_attempts=3)
    e = queue.settle()[entry.id]
    assert (e.state, e.attempt, len(e.attempts)) == ("failed", 1, 1)
    assert "may not use gs://" in e.last_error and "roles/storage.objectAdmin" in e.last_error
    assert "still up" not in e.last_error  # the entry's slice is deleted: the line must not say otherwise
    assert e.attempts[0]["cleaned"]
    assert _creates(fake) == 1


def test_an_os_login_refusal_fails_the_entry_frees_its_slice_and_lets_the_others_run(queue, fake):
    """OS Login refusing podctl's key fails the entry at its first start, as the identity
    check does, and the tick goes on with the other entries instead of raising (which left
    the entry `starting` and its slice billing forever). The refusal is the fake OS Login
    API's own: the project turns OS Login on and podctl's account has no login role."""
    import dataclasses

    from podctl.steps import Session

    fake.admin.inject("os-login", project=queue.session.settings.project)
    settings = dataclasses.replace(queue.session.settings, oslogin=True, account="eve@example.com")
    queue.session = Session(settings, queue.api, ports=queue.session.ports, storages=queue.session.storages)
    queue.ctx = dataclasses.replace(queue.ctx, session=queue.session)
    # over SSH (the entries say so): through the watchers no login is made, and auto's run
    # would not meet OS Login at all
    ids = [queue.add("many_lines.py", "2", priority=1, via="ssh").id,
           queue.add("many_lines.py", "2", via="ssh").id]
    entries = queue.settle()
    for i in ids:
        e = entries[i]
        assert (e.state, e.attempt, len(e.attempts)) == ("failed", 1, 1), e
        assert "eve@example.com" in e.last_error and "OS Login" in e.last_error
        assert e.attempts[0]["cleaned"]
    assert _creates(fake) == 2


def test_preemption_is_retried_then_succeeds(queue, fake):
    entry = queue.add("sleep_then_exit.py", "3", tier="spot", max_attempts=2)
    e = queue.until(lambda es: es[entry.id].state == "running", "running")[entry.id]
    first = e.slice_name
    fake.admin.preempt(first)
    e = queue.settle()[entry.id]
    assert e.state == "succeeded" and e.attempt == 2
    assert [a["outcome"] for a in e.attempts] == ["lost", "succeeded"]
    assert "PREEMPTED" in e.attempts[0]["error"] or "SUSPEND" in e.attempts[0]["error"]
    assert e.attempts[0]["slice"] == first != e.attempts[1]["slice"]
    assert e.attempts[0]["run_id"] != e.attempts[1]["run_id"]
    # The retry was given the first attempt's checkpoints, as --recover does.
    from podctl.base._sync import run_sync
    from podctl.host.run_layout import checkpoint_dir
    from podctl.jobs.run_record import record_checkpoint_dir
    from podctl.jobs.run_files import read_record

    retry = run_sync(read_record(queue.storage, e.attempts[1]["run_id"]))
    assert retry.extra["resumed_from"] == e.attempts[0]["run_id"]
    assert record_checkpoint_dir(retry) == checkpoint_dir(queue.storage.bucket_name,
                                                          e.attempts[0]["run_id"])


def test_preemption_without_attempts_left_fails(queue, fake):
    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "99"}, max_attempts=1)
    e = queue.until(lambda es: es[entry.id].state == "running", "running")[entry.id]
    fake.admin.preempt(e.slice_name)
    e = queue.settle()[entry.id]
    assert e.state == "failed" and "gave up after 1 attempts" in e.last_error


@pytest.mark.parametrize("when", ["provisioning", "running"])
def test_cancel(queue, fake, when):
    from podctl.queue import tick

    if when == "provisioning":
        fake.admin.capacity(0)  # the queued resource waits for capacity
    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "99"}, tier="queued")
    queue.until(lambda es: es[entry.id].state == when, when)
    assert not fake.admin.is_empty()
    e = tick.cancel(queue.ctx, queue.store, entry.id)
    assert e.state == "cancelled"
    e = queue.settle()[entry.id]
    assert e.state == "cancelled" and e.attempts[0]["outcome"] == "cancelled"
    if when == "running":
        from podctl.base._sync import run_sync
        from podctl.jobs.run_files import read_record

        assert run_sync(read_record(queue.storage, e.run_id)).state == "stopped"


def test_an_edit_after_add_does_not_change_the_queued_run(queue, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "say.py").write_text("print('version one', flush=True)\n")
    entry = queue.add("say.py", workdir=work)
    (work / "say.py").write_text("print('version two', flush=True)\n")
    e = queue.settle()[entry.id]
    assert e.state == "succeeded"
    from podctl.base._sync import run_sync
    from podctl.jobs.logs import LogReader

    lines: list[str] = []
    run_sync(LogReader(queue.storage, e.run_id, 1, lambda host, line: lines.append(line)).follow(follow=False))
    assert lines == ["version one"]


def test_two_passes_at_once_without_the_lock_still_make_one_slice(queue, fake):
    """The second guard: deterministic names. Two passes over the same entry race
    (each with its own database connection); the loser's create is refused and adopts."""
    import asyncio

    from podctl.base._sync import run_sync
    from podctl.queue.tick import run_pass

    entry = queue.add("many_lines.py", "2", tier="queued")

    async def both():
        with queue.store() as a, queue.store() as b:
            return await asyncio.gather(run_pass(queue.ctx, a), run_pass(queue.ctx, b))

    run_sync(both())
    assert fake.admin.resources()["queued_resources"] == [
        f"projects/test-project/locations/us-central1-a/queuedResources/{queue.entry(entry.id).slice_name}"]
    assert queue.settle()[entry.id].state == "succeeded"


def test_env_values_never_reach_the_log_or_the_json(queue):
    entry = queue.add("show_env.py", "API_TOKEN", env={"API_TOKEN": "hunter2-secret"})
    e = queue.settle()[entry.id]
    assert e.state == "succeeded"
    assert "hunter2-secret" not in queue.out.getvalue()
    assert "hunter2-secret" not in repr(e) and "hunter2-secret" not in str(e.to_json())
    assert e.to_json()["env_keys"] == ["API_TOKEN"]


def _stop_as_podctl_stop_does(queue, e) -> None:
    """`podctl stop RUN_ID`: the stop request, SIGTERM over SSH, wait, close the record."""
    from podctl import steps
    from podctl.base._sync import run_sync

    run_sync(steps.stop_run(queue.session, e.run_id))


def test_podctl_stop_of_a_queued_run_cancels_its_entry_not_fails_it(queue, fake):
    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "99"}, max_attempts=3)
    e = queue.until(lambda es: es[entry.id].state == "running", "running")[entry.id]
    _stop_as_podctl_stop_does(queue, e)
    e = queue.settle()[entry.id]
    assert (e.state, e.attempt, e.exit_code) == ("cancelled", 1, 143)
    assert e.last_error == "stopped by `podctl stop`"
    from podctl.base._sync import run_sync
    from podctl.jobs.run_files import read_record

    assert run_sync(read_record(queue.storage, e.run_id)).state == "stopped"


def test_a_stopped_queued_run_is_not_retried_when_its_slice_is_then_preempted(queue, fake):
    from podctl.base._sync import run_sync
    from podctl.jobs.run_files import request_stop

    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "99"}, tier="spot", max_attempts=3)
    e = queue.until(lambda es: es[entry.id].state == "running", "running")[entry.id]
    run_sync(request_stop(queue.storage, [e.run_id], by="podctl stop"))
    fake.admin.preempt(e.slice_name, grace=0)
    e = queue.settle()[entry.id]
    assert (e.state, e.attempt) == ("cancelled", 1) and e.last_error == "stopped by `podctl stop`"
    assert _creates(fake) == 1


def _printed(queue, run_id: str) -> list[str]:
    from podctl.base._sync import run_sync
    from podctl.jobs.logs import LogReader

    lines: list[str] = []
    run_sync(LogReader(queue.storage, run_id, 1, lambda host, line: lines.append(line)).follow(follow=False))
    return lines


def test_a_higher_priority_preempts_a_running_lower_one_which_resumes_from_its_checkpoint(queue):
    from podctl.queue.interface import Quota

    with queue.store() as store:  # the owner: the account (SQLite), the database login (PostgreSQL)
        store.set_quota(Quota(store.me("alice@example.com"), max_chips=4))  # one v5p-8 at a time
    low = queue.add("resumable_steps.py", "40", name="ablation", priority=-100)
    queue.until(lambda es: es[low.id].state == "running" and len(_printed(queue, es[low.id].run_id)) > 5,
                "running and stepping")
    urgent = queue.add("many_lines.py", "3", name="urgent", priority=100)
    queue.tick()  # preemption off (the default): the urgent entry waits, the ablation runs on
    es = queue.entries()
    assert es[urgent.id].state == "pending" and es[urgent.id].waiting.startswith("quota: ")
    assert es[low.id].state == "running" and "preempting" not in es[low.id].attempts[-1]

    queue.ctx.preempt = True  # [queue] preempt = true
    es = queue.until(lambda es: es[urgent.id].state == "running", "urgent running")
    assert es[low.id].state == "pending"  # requeued at its place, not failed
    assert es[low.id].attempts[0]["outcome"] == "preempted"
    assert es[low.id].attempts[0]["error"] == f"preempted for entry {urgent.id} (higher priority)"
    assert es[low.id].max_attempts == 4  # a preemption uses up none of its 3 attempts
    es = queue.settle(limit=120)
    assert (es[urgent.id].state, es[low.id].state, es[low.id].attempt) == ("succeeded", "succeeded", 2)
    first, second = (_printed(queue, a["run_id"]) for a in es[low.id].attempts)
    saved = int(first[-1].removeprefix("checkpoint at "))
    assert first[0] == "start at 0" and second[0] == f"start at {saved}"
    steps = [int(line.split()[1]) for line in first + second if line.startswith("step ")]
    assert sorted(set(steps)) == list(range(1, 41))  # no step lost
    assert steps[-1] == 40 and len(steps) <= 41  # at most the one in flight done twice
    # the urgent run held the chips only after the ablation's first attempt let them go
    assert es[urgent.id].attempts[0]["requested"] >= es[low.id].attempts[0]["ended"]
    moves = [(ev["entry"], ev["to"]) for ev in queue.events() if ev["event"] == "transition"]
    assert moves.index((low.id, "pending")) < moves.index((urgent.id, "provisioning"))



@pytest.mark.parametrize("slice_type, zone, api", [("v5p-16", "us-central1-a", "compute"),
                                                   ("tpu7x-16", "us-central1-c", None)])
def test_an_entry_on_a_compute_engine_slice_is_made_run_stopped_by_its_budget_and_deleted(
        fake, isolated, slice_type, zone, api):
    """The queue on Compute Engine: a v5p with `api = "compute"` (the tick's provider is
    Compute Engine's), and a TPU7x with no api (both APIs as one, as `Session.open` makes
    them: the tick asks Compute Engine since only it serves TPU7x). The tick asks for the
    MIG through steps/, runs on it over SSH, stops the run at its --max-hours and deletes
    the MIG, its template and its policy."""
    from podctl.base.settings import Settings
    from podctl.cloud.connect import api_for_endpoint, compute_engine_at
    from podctl.cloud.firewall import ComputeReader
    from podctl.cloud.providers.both_apis import BothApis
    from tests.conftest import PROJECT

    url = fake.tpu_api_url
    provider = compute_engine_at(url) if api == "compute" else BothApis(
        Settings(backend="fake", project=PROJECT, zone=zone, config_dir=isolated / "config",
                 state_dir=isolated / "state"), api_for_endpoint(url),
        lambda: compute_engine_at(url), lambda: ComputeReader(url))
    queue = Queue(fake, provider, isolated)
    entry = queue.add("exit_on_host.py", env={"FAIL_HOST": "99"}, max_hours=1.0, slice_type=slice_type, zone=zone)
    queue.until(lambda es: es[entry.id].state == "running", "running")
    held = fake.admin.resources()
    assert held["migs"] and held["resource_policies"], held
    queue.clock.offset += 2 * 3600
    queue.tick()
    e = queue.entry(entry.id)
    assert e.state == "failed" and "--max-hours" in e.last_error and e.exit_code is None, e.last_error
    e = queue.settle()[entry.id]
    assert e.attempts[0]["cleaned"]
    assert not any(fake.admin.resources().values())
