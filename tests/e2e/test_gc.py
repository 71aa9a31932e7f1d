"""Quota hygiene: queued resources carry validUntil and expire as Google's do; `podctl
gc` deletes podctl's leftovers (FAILED, SUSPENDED, expired, PREEMPTED, over budget)
and only lists other people's; `budget check` and `queue tick` reap their own."""

from __future__ import annotations

import asyncio
import time

import pytest

from podctl.base.settings import FAKE_BUCKET
from podctl.cloud import create as create_step
from podctl.cloud.describe import describe, list_slices
from podctl.cloud.names import podctl_labels
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceSpec
from podctl.cloud.wait import wait_until
from podctl.jobs.run_files import save_record
from podctl.jobs.run_record import RunRecord, new_run_id
from podctl.money import budget
from podctl.policy import gc
from podctl.steps import budget_check
from tests.cli_in_process import podctl_here
from tests.conftest import FAST, PARENT, assert_one_line_error


def _create(api, name: str, *, queued: bool = False, tier: str = "on-demand", own: bool = True,
            valid_for: int | None = None, labels: dict | None = None) -> None:
    spec = SliceSpec.build("v5p-8", queued=queued, tier=tier, valid_for_seconds=valid_for)
    own_labels = podctl_labels("t") if own else {"team": "someone-else"}
    request = create_step.CreateRequest(parent=PARENT, name=name, spec=spec,
                                        labels={**own_labels, **(labels or {})}, ssh_keys="")
    asyncio.run(create_step.create(api, request))


def _wait_state(api, name: str, *states: str) -> None:
    async def reached() -> bool | None:
        return (await describe(api, PARENT, name)).state in states or None
    asyncio.run(wait_until(reached, what=f"{name} {states}", policy=FAST))


def _plant(api, fake) -> None:
    """Own and foreign leftovers, and slices that are no leftovers at all."""
    fake.admin.capacity(0)  # these two wait, then their validity window closes
    _create(api, "own-expired", queued=True, valid_for=3600)
    _create(api, "their-expired", queued=True, valid_for=3600, own=False)
    fake.admin.advance(3601)
    _wait_state(api, "own-expired", "FAILED")
    _wait_state(api, "their-expired", "FAILED")
    fake.admin.capacity(None)
    _create(api, "own-suspended", queued=True, tier="spot")
    _create(api, "own-preempted", tier="spot")
    _create(api, "their-preempted", tier="spot", own=False)
    _create(api, "own-over-budget", labels={budget.DEADLINE_LABEL: str(int(time.time()) - 60)})
    _create(api, "own-busy", labels={budget.DEADLINE_LABEL: str(int(time.time()) - 60)})
    _create(api, "own-fine", labels={budget.DEADLINE_LABEL: str(int(time.time()) + 3600)})
    _create(api, "their-fine", own=False)
    for name in ("own-suspended", "own-preempted", "their-preempted", "own-over-budget",
                 "own-busy", "own-fine", "their-fine"):
        _wait_state(api, name, "ACTIVE", "READY")
    for name in ("own-suspended", "own-preempted", "their-preempted"):
        fake.admin.preempt(name, grace=0)
    _wait_state(api, "own-suspended", "SUSPENDED")
    _wait_state(api, "own-preempted", "PREEMPTED")
    _wait_state(api, "their-preempted", "PREEMPTED")


def _remove_the_rest(api, fake=None) -> None:
    for info in asyncio.run(list_slices(api, PARENT)):
        if info.state != "DELETING":
            asyncio.run(budget.delete_slice(api, PARENT, info, FAST))


def test_a_queued_resource_always_carries_valid_until(api, fake):
    _create(api, "qr-default", queued=True)
    _create(api, "qr-six-hours", queued=True, valid_for=6 * 3600)
    default = asyncio.run(api.get_queued_resource(f"{PARENT}/queuedResources/qr-default"))
    six = asyncio.run(api.get_queued_resource(f"{PARENT}/queuedResources/qr-six-hours"))
    assert default.queueing_policy.valid_until_duration.total_seconds() == 24 * 3600
    assert six.queueing_policy.valid_until_duration.total_seconds() == 6 * 3600
    info = asyncio.run(describe(api, PARENT, "qr-default"))
    assert info.valid_until == pytest.approx(info.created + 24 * 3600, abs=1)
    _remove_the_rest(api, fake)


def test_an_expired_queued_resource_fails_and_stays_until_deleted(api, fake):
    fake.admin.capacity(0)
    _create(api, "waits", queued=True, valid_for=600)
    fake.admin.advance(601)
    _wait_state(api, "waits", "FAILED")
    info = asyncio.run(describe(api, PARENT, "waits"))
    assert "validity window" in info.error
    fake.admin.capacity(None)
    fake.admin.advance(3600)  # FAILED is final: capacity coming back changes nothing
    assert asyncio.run(describe(api, PARENT, "waits")).state == "FAILED"
    assert gc.dead_reason(info, time.time()).startswith("FAILED")
    _remove_the_rest(api, fake)


def test_gc_lists_exactly_the_leftovers_and_deletes_only_podctls(api, fake, isolated):
    _plant(api, fake)
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    busy = asyncio.run(describe(api, PARENT, "own-busy"))
    record = RunRecord(run_id=new_run_id("own-busy"), slice_name="own-busy", project="test-project",
                       zone=busy.zone, num_hosts=1, kind="script", script="train.py", args=[],
                       env_keys=[], bundle_hash=None, created=time.time(), state="running",
                       extra={"slice_created": busy.created})
    asyncio.run(save_record(storage, record))
    keep = gc.run_keeper(storage)

    dry = asyncio.run(gc.collect(api, PARENT, dry_run=True, keep=keep, policy=FAST))
    actions = {item.info.name: item.action for item in dry}
    assert actions == {"own-expired": "delete", "own-suspended": "delete", "own-preempted": "delete",
                       "own-over-budget": "delete", "own-busy": "keep",
                       "their-expired": "leave", "their-preempted": "leave"}
    assert not any(item.deleted for item in dry)
    assert record.run_id in next(i.note for i in dry if i.info.name == "own-busy")
    assert len(asyncio.run(list_slices(api, PARENT))) == 9  # the dry run touched nothing

    said: list[str] = []
    done = asyncio.run(gc.collect(api, PARENT, keep=gc.run_keeper(storage), policy=FAST,
                                  notice=said.append))
    assert sorted(i.info.name for i in done if i.deleted) == [
        "own-expired", "own-over-budget", "own-preempted", "own-suspended"]
    left = {i.name for i in asyncio.run(list_slices(api, PARENT))}
    assert left == {"own-busy", "own-fine", "their-expired", "their-preempted", "their-fine"}
    assert len(said) == 4
    _remove_the_rest(api, fake)


def test_a_preempted_host_still_beating_is_not_collected(api, fake, isolated):
    _create(api, "saving", tier="spot")
    _wait_state(api, "saving", "READY")
    info = asyncio.run(describe(api, PARENT, "saving"))
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    record = RunRecord(run_id=new_run_id("saving"), slice_name="saving", project="test-project",
                       zone=info.zone, num_hosts=1, kind="script", script="train.py", args=[],
                       env_keys=[], bundle_hash=None, created=time.time(), state="running",
                       extra={"slice_created": info.created})
    asyncio.run(save_record(storage, record))
    asyncio.run(storage.upload_bytes(f"podctl/runs/{record.run_id}/heartbeat/host-0000.json", b"{}"))
    fake.admin.preempt("saving", grace=0)
    _wait_state(api, "saving", "PREEMPTED")
    kept = asyncio.run(gc.collect(api, PARENT, keep=gc.run_keeper(storage), policy=FAST))
    assert [(i.action, i.deleted) for i in kept] == [("keep", False)]
    # its hosts gone quiet for longer than a host is given: collected, its record closed
    later = time.time() + gc.HOST_LOST_SECONDS + 1
    done = asyncio.run(gc.collect(api, PARENT, now=later, keep=gc.run_keeper(storage, now=later),
                                  policy=FAST))
    assert [(i.action, i.deleted) for i in done] == [("delete", True)]
    assert asyncio.run(gc.close_runs(storage, [info])) == [record.run_id]


def test_budget_check_reaps_its_own_dead_slices_too(api, fake):
    _create(api, "budgeted-spot", tier="spot",
            labels={budget.DEADLINE_LABEL: str(int(time.time()) + 3600)})
    _create(api, "plain-spot", tier="spot")
    for name in ("budgeted-spot", "plain-spot"):
        _wait_state(api, name, "READY")
        fake.admin.preempt(name, grace=0)
        _wait_state(api, name, "PREEMPTED")
    reaped = asyncio.run(budget_check.reap(api, PARENT, policy=FAST))
    assert [(r.info.name, r.reason, r.deleted) for r in reaped] == [("budgeted-spot", "PREEMPTED", True)]
    assert [i.name for i in asyncio.run(list_slices(api, PARENT))] == ["plain-spot"]  # not its own
    _remove_the_rest(api, fake)


def test_queue_tick_reaps_its_own_orphans_only(api, fake, tmp_path):
    from podctl.queue.entry_names import labels as queue_labels

    class Log:
        def __init__(self):
            self.lines = []

        def info(self, event, **fields):
            self.lines.append((event, fields))

    token = "abc123"
    for name, entry in (("q-abc123-1-1", 1), ("q-abc123-2-1", 2), ("q-other-1-1", 1)):
        labels = queue_labels(token if "abc123" in name else "ffffff", entry)
        spec = SliceSpec.build("v5p-8", tier="spot")
        asyncio.run(create_step.create(api, create_step.CreateRequest(
            parent=PARENT, name=name, spec=spec, labels=labels, ssh_keys="")))
        _wait_state(api, name, "READY")
        fake.admin.preempt(name, grace=0)
        _wait_state(api, name, "PREEMPTED")

    class Entry:  # entry 2 is still running on its slice: the queue's own machine owns it
        def __init__(self, id, slice_name, terminal, attempts):
            self.id, self.slice_name, self.terminal, self.attempts = id, slice_name, terminal, attempts

    entries = [Entry(1, None, True, [{"slice": "q-abc123-1-1", "cleaned": True}]),
               Entry(2, "q-abc123-2-1", False, [{"slice": "q-abc123-2-1"}])]
    listed = {PARENT: {s.name: s for s in asyncio.run(list_slices(api, PARENT))}}
    log = Log()
    done = asyncio.run(gc.reap_queue_leftovers(api, token, entries, listed, log))
    assert [(i.info.name, i.action, i.deleted) for i in done] == [
        ("q-abc123-1-1", "delete", True), ("q-abc123-2-1", "keep", False)]
    assert [f["slice"] for _, f in log.lines] == ["q-abc123-1-1", "q-abc123-2-1"]
    _remove_the_rest(api)


def test_gc_from_the_cli(podctl):
    """`podctl gc` as a user runs it; what sets the case up or reads its state runs in this
    process (tests/cli_in_process.py), each of those commands' own output is other files'."""
    import json

    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl.env["CLOUDSDK_COMPUTE_ZONE"] = "us-east5-a"

    def here(*args: str) -> object:
        return json.loads(podctl_here(podctl.tmp, *args, "--json", env=podctl.env, check=True).stdout)

    assert podctl_here(podctl.tmp, "gc", env=podctl.env, check=True).stdout.strip() == "no leftovers in us-east5-a"
    up = here("up", "--slice", "v5p-8", "--name", "spot-one", "--spot")
    assert up["managed"]
    here("up", "--slice", "v5p-8", "--name", "queued-one", "--queued")
    queued = here("status", "queued-one")
    assert queued["valid_until"] == pytest.approx(queued["created"] + 24 * 3600, abs=1)
    # a Compute Engine slice over its budget: `gc` without --api looks on both APIs (the
    # Cloud TPU API does not list a MIG, and its VMs bill as much)
    over = here("--api", "compute", "up", "--slice", "v5p-8", "--name", "ce-over", "--max-hours", "0.001")
    podctl_here(podctl.tmp, "fake", "inject", "preempt", "spot-one", "--grace", "0", env=podctl.env, check=True)
    deadline = time.time() + 60
    while here("status", "spot-one")["state"] != "PREEMPTED" and time.time() < deadline:
        time.sleep(0.5)
    # its 3.6 s are past (on this machine's clock, the fake's too): not left to how long
    # the commands above took
    time.sleep(max(0.0, int(over["labels"]["podctl-deadline"]) + 1 - time.time()))
    dry = here("gc", "--dry-run")
    assert sorted((d["name"], d["action"], d["deleted"]) for d in dry) == [
        ("ce-over", "delete", False), ("spot-one", "delete", False)]
    text = podctl("gc", "--dry-run").stdout
    assert text.startswith("would delete") and "spot-one" in text and "PREEMPTED" in text
    assert "ce-over" in text and "Compute Engine MIG" in text and "budget reached" in text
    done = podctl.json("gc")
    assert sorted((d["name"], d["deleted"]) for d in done) == [("ce-over", True), ("spot-one", True)]
    assert [s["name"] for s in here("ls")] == ["queued-one"]
    assert here("ls", "--api", "compute") == []
    # bad input: one line, exit 2, nothing touched (one through a process, the others here)
    assert_one_line_error(podctl("gc", "--zone", "nowhere-1z", check=False), 2, "nowhere-1z")
    assert_one_line_error(podctl_here(podctl.tmp, "gc", "extra", env=podctl.env), 2, "extra")
    assert_one_line_error(podctl_here(podctl.tmp, "gc", "--bogus", env=podctl.env), 2, "--bogus")
    here("down", "queued-one", "--yes")
    # without --api both APIs were listed: nothing to point at; with --api tpu, a MIG made
    # through Compute Engine is not listed, and the empty answer says where to look
    assert podctl("ls").stdout.strip() == "no slices in us-east5-a (project fake-project)"
    assert "`podctl ls --api compute`" in podctl_here(podctl.tmp, "--api", "tpu", "ls", env=podctl.env,
                                                     check=True).stdout


def test_gc_leaves_a_waiting_queued_resource_to_the_services_word_on_its_expiry(api, fake, isolated):
    fake.admin.capacity(0)
    _create(api, "waiting", queued=True, valid_for=3600)
    _wait_state(api, "waiting", "WAITING_FOR_RESOURCES")
    fast_client = time.time() + 7 * 3600  # a client clock 7 h fast: past its validUntil
    assert gc.dead_reason(asyncio.run(describe(api, PARENT, "waiting")), fast_client) is None
    assert asyncio.run(gc.collect(api, PARENT, now=fast_client, policy=FAST)) == []
    assert asyncio.run(describe(api, PARENT, "waiting")).state == "WAITING_FOR_RESOURCES"
    fake.admin.capacity(None)
    _remove_the_rest(api, fake)


def _record_on(storage, info, state: str) -> RunRecord:
    record = RunRecord(run_id=new_run_id(info.name), slice_name=info.name, project="test-project",
                       zone=info.zone, num_hosts=1, kind="script", script="train.py", args=[],
                       env_keys=[], bundle_hash=None, created=time.time(), state=state,
                       extra={"slice_created": info.created})
    asyncio.run(save_record(storage, record))
    return record


def test_a_run_killed_while_starting_does_not_keep_its_slice_from_gc(api, fake, isolated):
    """A run SIGKILLed a second after it started: its record says `starting` forever,
    and no host ever beats. Its slice, over budget, is kept only as long as a start
    could still be under way."""
    from podctl.jobs.run_files import read_record

    _create(api, "killed-start", labels={budget.DEADLINE_LABEL: str(int(time.time()) - 60)})
    _wait_state(api, "killed-start", "READY")
    info = asyncio.run(describe(api, PARENT, "killed-start"))
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    record = _record_on(storage, info, "starting")
    kept = asyncio.run(gc.collect(api, PARENT, keep=gc.run_keeper(storage), policy=FAST))
    assert [(i.action, i.deleted) for i in kept] == [("keep", False)]  # it may be starting
    later = api.server_now() + gc.HOST_LOST_SECONDS + 1
    done = asyncio.run(gc.collect(api, PARENT, now=later, keep=gc.run_keeper(storage, now=later),
                                  policy=FAST, before_delete=lambda infos: gc.close_runs(storage, infos)))
    assert [(i.action, i.deleted) for i in done] == [("delete", True)]
    assert asyncio.run(read_record(storage, record.run_id)).state == "lost"


def test_a_slice_gc_collected_after_a_preemption_is_recovered_not_taken_for_a_delete(api, fake, isolated):
    """gc collects a PREEMPTED slice while its `--recover` follower sleeps (a laptop):
    the run's record says what gc saw, so the follower recovers instead of reading the
    slice's absence as its owner's `podctl down`."""
    from podctl.steps.recovery import collected_state

    _create(api, "slept", tier="spot")
    _wait_state(api, "slept", "READY")
    info = asyncio.run(describe(api, PARENT, "slept"))
    storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
    record = _record_on(storage, info, "running")
    fake.admin.preempt("slept", grace=0)
    _wait_state(api, "slept", "PREEMPTED")
    info = asyncio.run(describe(api, PARENT, "slept"))
    later = api.server_now() + gc.HOST_LOST_SECONDS + 1
    done = asyncio.run(gc.collect(api, PARENT, now=later, keep=gc.run_keeper(storage, now=later),
                                  policy=FAST, before_delete=lambda infos: gc.close_runs(storage, infos)))
    assert [(i.action, i.deleted) for i in done] == [("delete", True)]
    said: list[str] = []
    assert asyncio.run(collected_state(storage, record.run_id, said.append)) == "PREEMPTED"
    assert said == ["slice slept was PREEMPTED, and `podctl gc` collected it meanwhile"]
