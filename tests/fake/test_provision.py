"""The provisioning layer, through the real google-cloud-tpu REST client, against
the fake Cloud TPU API: every state transition, LRO polling, paging, the error
mappings, queued resources, multislice, idempotent `up`, and cleanup on failure."""

from __future__ import annotations

import asyncio

import pytest
from google.cloud import tpu_v2

from podctl.cloud import describe, terminate
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud.wait import WaitPolicy, wait_deleted
from podctl.base.errors import (
    AlreadyExistsError, InvalidValueError, NotFoundError, PermissionDeniedError, QuotaExceededError,
    SliceLostError, SpecMismatchError, StockoutError, TransientError, WaitTimeoutError,
)
from tests.conftest import FAST, PARENT

KEY = "podctl:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests podctl"


def request(name: str, slice_name: str = "v5p-16", wait: bool = True, policy: WaitPolicy = FAST,
            **spec: object) -> UpRequest:
    return UpRequest(parent=PARENT, name=name, spec=SliceSpec.build(slice_name, **spec),
                     ssh_keys=KEY, owner="tester", wait=wait, policy=policy)


def run(coro):
    return asyncio.run(coro)


async def down(api, name: str) -> None:
    await terminate.terminate(api, PARENT, name, policy=FAST)


def test_node_lifecycle_creating_ready_deleting_gone(api, fake):
    states: list[str] = []
    result = run(up(api, request("life"), progress=states.append))
    info = result.info
    # the finished create's Node carries no health (as recorded from Google); a GET does
    assert result.created and info.ready and info.state == "READY" and info.health is None
    assert "CREATING" in states
    assert (info.kind, info.accelerator_type, info.topology, len(info.hosts)) == ("node", "v5p-16", "2x2x2", 2)
    assert [h.worker for h in info.hosts] == [0, 1] and all(h.ip for h in info.hosts)
    assert info.labels["podctl-managed"] == "true" and info.labels["podctl-owner"] == "tester"
    assert int(info.labels["podctl-created"]) > 0
    node = api.client.get_node(name=f"{PARENT}/nodes/life")
    assert node.metadata["ssh-keys"] == KEY
    # the create operation was polled, not the node hammered
    assert api.calls["operations.get"] >= 1
    assert run(describe.describe(api, PARENT, "life")).health == "HEALTHY"
    fake.admin.set_timings(node_delete=3000)  # slow enough to see DELETING
    run(terminate.delete(api, PARENT, info))
    assert run(describe.describe(api, PARENT, "life")).state == "DELETING"
    fake.admin.advance(3000)
    run(wait_deleted(api, PARENT, "life", policy=FAST))
    with pytest.raises(NotFoundError, match="no slice named 'life'"):
        run(describe.describe(api, PARENT, "life"))


def test_no_wait_returns_while_creating(api, fake):
    fake.admin.set_timings(node_create=1e6)
    result = run(up(api, request("later", wait=False)))
    assert result.created and result.info.state == "CREATING" and not result.info.ready
    run(down(api, "later"))


def test_listing_follows_next_page_token(api, fake):
    fake.admin.set_timings(node_create=1e6)
    for i in range(5):
        run(up(api, request(f"page-{i}", "v5p-8", wait=False)))
    api.calls.clear()
    slices = run(describe.list_slices(api, PARENT, page_size=2))
    assert [s.name for s in slices] == [f"page-{i}" for i in range(5)]
    assert api.calls["nodes.list"] == 3  # pages of 2, 2, 1
    for i in range(5):
        run(down(api, f"page-{i}"))


def test_idempotent_up_reuses_same_spec_and_refuses_another(api, fake):
    first = run(up(api, request("same")))
    second = run(up(api, request("same")))
    assert first.created and not second.created
    assert second.info.created == first.info.created
    with pytest.raises(SpecMismatchError, match="type v5p-16, not v5p-32"):
        run(up(api, request("same", "v5p-32")))
    with pytest.raises(SpecMismatchError, match="tier on-demand, not spot"):
        run(up(api, request("same", tier="spot")))
    with pytest.raises(SpecMismatchError, match="not a queued-resource"):
        run(up(api, request("same", queued=True)))
    run(down(api, "same"))


def test_up_refuses_a_slice_podctl_did_not_create(api, fake):
    api.client.create_node(parent=PARENT, node_id="theirs", node=tpu_v2.Node(
        accelerator_type="v5p-16", runtime_version="v2-alpha-tpuv5")).result(timeout=10)
    with pytest.raises(SpecMismatchError, match="not created by podctl"):
        run(up(api, request("theirs")))
    run(down(api, "theirs"))


def test_stockout_fails_cleanly_and_leaves_nothing(api, fake):
    fake.admin.capacity(4)  # one v5p-8's worth of chips
    with pytest.raises(StockoutError, match="no TPU capacity in us-central1-a"):
        run(up(api, request("big", "v5p-16")))
    assert fake.admin.is_empty()


def test_quota_is_reported_as_quota_not_retried(api, fake):
    fake.admin.set_quota(4, project="test-project", zone="us-central1-a")
    api.calls.clear()
    with pytest.raises(QuotaExceededError, match="quota TPUV5PPerProjectPerRegionForTPUAPI .* region us-central1"):
        run(up(api, request("over", "v5p-16")))
    assert api.calls["nodes.create"] == 1


def test_already_exists_is_translated(api, fake):
    node = tpu_v2.Node(accelerator_type="v5p-8", runtime_version="v2-alpha-tpuv5")
    run(api.create_node(PARENT, "dup", node))
    with pytest.raises(AlreadyExistsError):
        run(api.create_node(PARENT, "dup", node))
    fake.admin.advance(1000)
    run(down(api, "dup"))


@pytest.mark.parametrize("code", [429, 503, "drop"])
def test_transient_errors_are_retried(api, fake, code):
    fake.admin.fail_calls(2, code)
    api.calls.clear()
    assert run(describe.list_slices(api, PARENT)) == []
    assert sum(api.calls.values()) == 2 + 2  # two failed calls retried, then one list of each kind


def test_transient_errors_give_up_after_the_retry_budget(api, fake):
    fake.admin.fail_calls(50, 503)
    with pytest.raises(TransientError, match="failed for a moment"):
        run(api.list_nodes(PARENT))
    assert api.calls["nodes.list"] == api.retry.attempts
    fake.admin.fail_calls(0)


def test_permission_denied_is_translated(api, fake):
    fake.admin.fail_calls(1, 403)
    with pytest.raises(PermissionDeniedError, match="roles/tpu.admin"):
        run(api.list_nodes(PARENT))


def test_unknown_zone_and_bad_names_are_refused_before_creating(api, fake):
    bad_zone = UpRequest(parent="projects/test-project/locations/mars-central1-a", name="x",
                         spec=SliceSpec.build("v5p-8"), ssh_keys=KEY, owner="t", policy=FAST)
    with pytest.raises(InvalidValueError, match="offers no TPU v5p"):
        run(up(api, bad_zone))
    for name in ("Upper", "1starts-with-digit", "ends-with-", "has_underscore", "x" * 64):
        with pytest.raises(InvalidValueError, match="not a valid slice name"):
            run(up(api, request(name)))
    assert fake.admin.is_empty()


def test_queued_resource_waits_for_capacity_then_becomes_active(api, fake):
    fake.admin.capacity(0)
    result = run(up(api, request("q", queued=True, tier="spot", wait=False)))
    assert result.info.kind == "queued-resource" and result.info.tier == "spot"
    fake.admin.advance(10)
    assert run(describe.describe(api, PARENT, "q")).state == "WAITING_FOR_RESOURCES"
    fake.admin.capacity(None)
    states: list[str] = []
    info = run(up(api, request("q", queued=True, tier="spot"), progress=states.append)).info
    assert info.ready and info.state == "ACTIVE" and len(info.hosts) == 2
    assert info.nodes[0].queued_resource == "q"
    run(down(api, "q"))


def test_queued_resource_that_expires_fails_and_is_cleaned(api, fake):
    fake.admin.capacity(0)
    with pytest.raises(SliceLostError, match="FAILED: .*validity window"):
        run(up(api, request("exp", queued=True, valid_for_seconds=60)))
    # up deleted what it created once the wait failed
    assert fake.admin.resources()["queued_resources"] in ([], [f"{PARENT}/queuedResources/exp"])
    run(wait_deleted(api, PARENT, "exp", policy=FAST))


def test_multislice_creates_prefixed_nodes(api, fake):
    info = run(up(api, request("ms", num_slices=2))).info
    assert info.kind == "queued-resource" and info.num_slices == 2
    assert [n.name for n in info.nodes] == ["ms-0", "ms-1"]
    assert [(h.slice_index, h.worker) for h in info.hosts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert info.chips == 16
    assert api.client.get_node(name=f"{PARENT}/nodes/ms-1").multislice_node
    run(down(api, "ms"))


def test_preempted_node_is_reported_and_down_cleans_it(api, fake):
    run(up(api, request("pre", tier="spot")))
    fake.admin.preempt("pre")
    info = run(describe.describe(api, PARENT, "pre"))
    assert info.state == "PREEMPTED" and info.billable
    with pytest.raises(SliceLostError, match="PREEMPTED"):
        run(up(api, request("pre", tier="spot")))
    run(down(api, "pre"))


def test_suspended_queued_resource_is_reported_and_down_cleans_it(api, fake):
    run(up(api, request("sus", queued=True, tier="spot")))
    fake.admin.preempt("sus")
    fake.admin.advance(100)
    info = run(describe.describe(api, PARENT, "sus"))
    assert info.state == "SUSPENDED" and info.nodes == ()
    with pytest.raises(SliceLostError, match="SUSPENDED"):
        run(up(api, request("sus", queued=True, tier="spot")))
    run(down(api, "sus"))


def test_preemption_during_the_wait_fails_up_and_deletes(api, fake):
    fake.admin.set_timings(node_create=1e6)
    run(up(api, request("mid", queued=True, wait=False)))
    fake.admin.advance(10)  # accepted, provisioning
    fake.admin.preempt("mid")
    with pytest.raises(SliceLostError, match="SUSPEND"):
        run(up(api, request("mid", queued=True)))
    run(down(api, "mid"))


def test_timeout_deletes_what_up_created(api, fake):
    fake.admin.set_timings(node_create=1e6)
    policy = WaitPolicy(initial=0.02, maximum=0.05, jitter=0.0, timeout=0.3)
    with pytest.raises(WaitTimeoutError, match="gave up"):
        run(up(api, request("slow", policy=policy)))
    fake.admin.advance(1000)
    assert fake.admin.is_empty()


def test_interrupt_during_the_wait_deletes_what_up_created(api, fake):
    fake.admin.set_timings(node_create=1e6)

    async def interrupted() -> None:
        task = asyncio.create_task(up(api, request("ctrlc")))
        while api.calls["operations.get"] < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(interrupted())
    assert api.calls["nodes.delete"] == 1
    fake.admin.advance(1000)
    assert fake.admin.is_empty()


def test_waiting_ten_simulated_minutes_takes_few_calls(api, fake):
    """Simulated time: each sleep of the waiter moves the fake clock instead."""
    from podctl.cloud.wait import Clock

    fake.admin.set_timings(time_scale=1.0, node_create=600)
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        fake.admin.advance(seconds)

    api.calls.clear()
    policy = WaitPolicy(timeout=3600)
    info = run(up(api, request("ten", policy=policy), clock=Clock(now=lambda: now[0], sleep=sleep))).info
    assert info.ready and 600 <= now[0] <= 700
    assert api.total_calls <= 30, api.calls
    fake.admin.set_timings(node_delete=1)
    run(down(api, "ten"))


def test_interrupt_while_the_create_call_is_in_flight_deletes(api, fake):
    """The create request is answered after the task was cancelled: the slice exists,
    carries this call's label, and is deleted."""
    fake.admin.set_timings(node_create=1e6)

    async def interrupted() -> None:
        task = asyncio.create_task(up(api, request("inflight")))
        while api.calls["nodes.create"] < 1:
            await asyncio.sleep(0.005)
        fake.admin.latency(0)  # let the answer through; the task is cancelled meanwhile
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    fake.admin.latency(0.3)
    run(interrupted())
    run(wait_deleted(api, PARENT, "inflight", policy=FAST))


def test_lost_create_answer_is_recognised_as_ours(api, fake):
    """The create went through but its answer was lost; the retry gets 409. The label
    unique to the call says the slice is ours: it counts as created, so the failed
    wait deletes it (a reused slice would be left alone)."""
    fake.admin.set_timings(node_create=1e6)
    fake.admin.fail_calls(1, "lose", call="nodes.create")
    api.calls.clear()
    policy = WaitPolicy(initial=0.02, maximum=0.05, jitter=0.0, timeout=0.2)
    with pytest.raises(WaitTimeoutError):
        run(up(api, request("lost", policy=policy)))
    assert api.calls["nodes.create"] == 2 and api.calls["nodes.delete"] == 1
    run(wait_deleted(api, PARENT, "lost", policy=FAST))


def test_spot_node_preempted_while_creating_fails_fast(api, fake):
    fake.admin.set_timings(node_create=1e6)

    async def go():
        task = asyncio.create_task(up(api, request("early", tier="spot")))
        while api.calls["operations.get"] < 1:
            await asyncio.sleep(0.005)
        fake.admin.preempt("early")
        await task

    with pytest.raises(Exception, match="preempted while it was being created"):
        run(go())
    run(wait_deleted(api, PARENT, "early", policy=FAST))


def test_a_node_cannot_take_a_waiting_queued_resources_node_id(api, fake):
    fake.admin.capacity(0)
    run(up(api, request("qq", queued=True, wait=False)))
    with pytest.raises(AlreadyExistsError):
        run(api.create_node(PARENT, "qq", tpu_v2.Node(accelerator_type="v5p-8",
                                                      runtime_version="v2-alpha-tpuv5")))
    run(down(api, "qq"))


def test_multislice_name_taken_by_a_node_says_which(api, fake):
    run(api.create_node(PARENT, "ms2-1", tpu_v2.Node(accelerator_type="v5p-8",
                                                     runtime_version="v2-alpha-tpuv5")))
    with pytest.raises(AlreadyExistsError, match="ms2-0 ... ms2-1"):
        run(up(api, request("ms2", num_slices=2)))
    fake.admin.advance(1000)
    run(down(api, "ms2-1"))


def test_operation_polls_are_counted_once_each(api, fake):
    fake.admin.set_timings(node_create=1e6)
    op = run(api.create_node(PARENT, "poll", tpu_v2.Node(accelerator_type="v5p-8",
                                                         runtime_version="v2-alpha-tpuv5")))
    fake.admin.reset_stats()
    api.calls.clear()
    fake.admin.fail_calls(2, 503)
    assert run(api.poll(op)).done is False
    assert api.calls["operations.get"] == fake.admin.stats()["by_call"]["operations.get"] == 3
    run(down(api, "poll"))


def test_deleting_a_node_of_a_queued_resource_deletes_the_resource(api, fake):
    run(up(api, request("own", num_slices=2)))
    node = run(describe.describe(api, PARENT, "own-0"))
    assert run(terminate.owning_slice(api, PARENT, node)).name == "own"
    run(terminate.terminate(api, PARENT, "own-0", policy=FAST))
    assert fake.admin.is_empty()


def test_default_names_are_unique_per_user_and_stable():
    from podctl.cloud import names

    spec = SliceSpec.build("v5p-8")
    users = ["john-doe", "John.Doe", "john_doe", "ünï", "üni", "n", "123", "u123", "你好", "a" * 80]
    made = [names.default_name(spec, u) for u in users]
    assert len(set(made)) == len(users), made  # no two users share a slice by default
    assert [names.validate_name(n) for n in made] == made and all(len(n) <= 50 for n in made)
    assert made[0] == "john-doe-v5p-8"  # a name that fits stays as it was
    assert made == [names.default_name(spec, u) for u in users]  # stable: `up` twice reuses
    owners = [names.owner(u) for u in users]
    assert len(set(owners)) == len(users), owners


def test_up_does_not_reuse_a_default_named_slice_of_another_owner(api, fake):
    mine = UpRequest(parent=PARENT, name="john-doe-v5p-8", spec=SliceSpec.build("v5p-8"),
                     ssh_keys=KEY, owner="john-doe", policy=FAST, named_for_owner=True)
    first = run(up(api, mine))
    theirs = UpRequest(parent=PARENT, name="john-doe-v5p-8", spec=SliceSpec.build("v5p-8"),
                       ssh_keys=KEY, owner="someone-else", policy=FAST, named_for_owner=True)
    with pytest.raises(SpecMismatchError, match="belongs to 'john-doe'.*choose a --name"):
        run(up(api, theirs))
    assert not run(up(api, mine)).created  # its owner still reuses it
    assert first.created
    run(down(api, "john-doe-v5p-8"))


def test_up_refuses_to_reuse_an_unhealthy_slice(api, fake):
    run(up(api, request("sick", "v5p-8")))
    fake.admin.inject("unhealthy", name="sick", health="UNHEALTHY_TENSORFLOW", symptom="HBM_OUT_OF_MEMORY",
                      worker=0)
    with pytest.raises(SliceLostError, match="unfit to run on .*UNHEALTHY_TENSORFLOW.*podctl down sick"):
        run(up(api, request("sick", "v5p-8")))
    run(down(api, "sick"))
