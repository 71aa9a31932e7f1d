"""`up --elastic`: K slices as K single-slice queued resources (NAME-0 ... NAME-(K-1)), one
slice to podctl. A preempted one is suspended alone (the others stay ACTIVE), is asked for
again alone (`:reset`: its tier and window kept); `down` deletes every one, a request
that waits included."""

from __future__ import annotations

import asyncio
import time

import pytest

from podctl.base.errors import InvalidValueError
from podctl.cloud import describe, terminate
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from tests.conftest import FAST, PARENT

KEY = "podctl:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests podctl"


def run(coro):
    return asyncio.run(coro)


def test_one_queued_resource_per_slice_lost_alone_asked_again_alone(api, fake):
    spec = SliceSpec.build("v5p-8", num_slices=2, tier="spot", elastic=True)
    info = run(up(api, UpRequest(parent=PARENT, name="el", spec=spec, ssh_keys=KEY,
                                 owner="tester", policy=FAST))).info
    assert info.ready and info.num_slices == 2 and [m.name for m in info.members] == ["el-0", "el-1"]
    assert [(h.slice_index, n.name) for n in info.nodes for h in n.hosts] == [(0, "el-0"), (1, "el-1")]
    for member in ("el-0", "el-1"):  # no multisliceParams: each its own slice, spot, with a window
        qr = api.client.get_queued_resource(name=f"{PARENT}/queuedResources/{member}")
        assert [s.node_id for s in qr.tpu.node_spec] == [member] and "spot" in qr
        assert qr.queueing_policy.valid_until_duration.total_seconds() > 0
    # a second `up` of the same spec reuses it; one without --elastic is another spec
    assert not run(up(api, UpRequest(parent=PARENT, name="el", spec=spec, ssh_keys=KEY,
                                     owner="tester", policy=FAST))).created
    assert run(api.list_slices(PARENT))[0].members and len(run(api.list_slices(PARENT))) == 1

    fake.admin.preempt("el-1")
    fake.admin.advance(100)
    lost = run(describe.describe(api, PARENT, "el"))
    assert [(m.name, m.state) for m in lost.members] == [("el-0", "ACTIVE"), ("el-1", "SUSPENDED")]
    assert [n.name for n in lost.nodes] == ["el-0"] and not lost.ready  # slice 0 runs on

    run(api.ask_again(PARENT, "el-1"))
    back = run(api.wait_ready(PARENT, "el", kind="queued-resource", policy=FAST))
    assert back.ready and [h.slice_index for h in back.hosts] == [0, 1]
    with pytest.raises(Exception, match="only SUSPENDED"):  # the fake as strict as the API
        run(api.ask_again(PARENT, "el-1"))

    fake.admin.preempt("el-1")  # lost again, asked again in a stockout: `down` while it waits
    fake.admin.advance(100)
    fake.admin.inject("stockout")
    try:
        run(api.ask_again(PARENT, "el-1"))
        fake.admin.advance(100)
        waiting = run(describe.describe(api, PARENT, "el"))
        assert [m.state for m in waiting.members] == ["ACTIVE", "WAITING_FOR_RESOURCES"]
        run(terminate.terminate(api, PARENT, "el", policy=FAST))
    finally:
        fake.admin.inject("capacity", "unlimited")
    assert not any(fake.admin.resources().values()), fake.admin.resources()


def test_a_second_up_of_an_elastic_slice_that_lost_one_says_so_at_once_and_asks_again(api, fake):
    """Issue 39: `up` again of an elastic slice with a lost slice neither waits for it (in
    a stockout, until --timeout) nor advises deleting the survivors: one line, the lost
    slice asked for again if SUSPENDED; `ls` prices the slices it holds."""
    from podctl.base.errors import SliceLostError
    from podctl.cloud.wait import WaitPolicy
    from podctl.money.cost import slice_cost

    spec = SliceSpec.build("v5p-8", num_slices=3, tier="spot", elastic=True)
    request = UpRequest(parent=PARENT, name="dg", spec=spec, ssh_keys=KEY, owner="tester", policy=FAST)
    whole = slice_cost(run(up(api, request)).info).usd_per_hour
    patient = UpRequest(parent=PARENT, name="dg", spec=spec, ssh_keys=KEY, owner="tester",
                        policy=WaitPolicy(initial=0.02, maximum=0.2, timeout=3600))
    fake.admin.inject("stockout")
    try:
        fake.admin.preempt("dg-1")
        fake.admin.advance(100)
        with pytest.raises(SliceLostError) as said:
            run(asyncio.wait_for(up(api, patient), 60))
        assert ("slice 'dg' exists with 2 of its 3 slices READY (slice 1 SUSPENDED, asked for again "
                "now): not waiting for the rest") in str(said.value) and "\n" not in str(said.value)
        fake.admin.advance(100)
        held = run(describe.describe(api, PARENT, "dg"))
        assert {m.name: m.state for m in held.members}["dg-1"] == "WAITING_FOR_RESOURCES"
        assert slice_cost(held).usd_per_hour == pytest.approx(whole * 2 / 3)  # two slices bill
        with pytest.raises(SliceLostError, match="slice 1 WAITING_FOR_RESOURCES"):  # no wait either
            run(asyncio.wait_for(up(api, patient), 60))
        run(terminate.terminate(api, PARENT, "dg", policy=FAST))
    finally:
        fake.admin.inject("capacity", "unlimited")
    assert not any(fake.admin.resources().values()), fake.admin.resources()


def test_elastic_needs_two_slices():
    with pytest.raises(InvalidValueError, match="--num-slices 2 or more"):
        SliceSpec.build("v5p-8", elastic=True)


def test_requests_ask_again_a_suspended_slice_and_are_deleted_at_the_deadline_and_when_cancelled(
        api, fake, isolated):
    """steps/elastic on the fake, in a stockout: a SUSPENDED member is asked for again
    (Requests.ask) and waits; the grow-back watch past --grow-deadline deletes it; a
    request withdrawn while its task is being cancelled (a stop signal) is deleted too."""
    from podctl.base.settings import Settings
    from podctl.steps.elastic import ElasticPolicy, Requests, Shrink, grow_watch
    from podctl.steps.session import Session
    from tests.conftest import PROJECT, ZONE

    session = Session(Settings(backend="fake", project=PROJECT, zone=ZONE,
                               config_dir=isolated / "config", state_dir=isolated / "state"), api)
    said: list[str] = []
    requests = Requests(session, said.append)
    spec = SliceSpec.build("v5p-8", num_slices=2, tier="spot", elastic=True)
    full = run(up(api, UpRequest(parent=PARENT, name="rq", spec=spec, ssh_keys=KEY, owner="tester",
                                 policy=FAST))).info

    def lose(index: int) -> None:
        fake.admin.preempt(f"rq-{index}")
        fake.admin.advance(100)
        run(requests.ask(run(describe.describe(api, PARENT, "rq")), {index}))
        assert requests.pending == {f"rq-{index}": index} and f"slice {index} of rq again" in said[-1]
        fake.admin.advance(100)
        waiting = run(describe.describe(api, PARENT, "rq"))
        assert {m.name: m.state for m in waiting.members}[f"rq-{index}"] == "WAITING_FOR_RESOURCES"

    fake.admin.inject("stockout")
    try:
        lose(1)
        policy = ElasticPolicy(grow_deadline=1.0, poll_seconds=0.01)
        shrink = Shrink(full, {0}, {1})
        watched = grow_watch(session, full, shrink, policy, time.time() - 10, said.append, set(),
                             requests)

        async def follow_past_the_deadline() -> object:
            done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(1.0, done.set_result, "ended")
            return await watched(done, None)  # type: ignore[arg-type]  # no job: none is halted

        assert run(follow_past_the_deadline()) == "ended"
        assert "deleting the request for slice 1 (rq-1): past --grow-deadline" in said[-1], said
        fake.admin.advance(100)
        assert [m.name for m in run(describe.describe(api, PARENT, "rq")).members] == ["rq-0"]

        lose(0)

        async def withdrawn_while_cancelled() -> None:
            task = asyncio.ensure_future(asyncio.sleep(3600))
            try:
                task.cancel()
                await task
            finally:
                await requests.withdraw("stopped")

        with pytest.raises(asyncio.CancelledError):
            run(withdrawn_while_cancelled())
        assert "deleting the request for slice 0 (rq-0): stopped" in said[-1]
        fake.admin.advance(100)
    finally:
        fake.admin.inject("capacity", "unlimited")
    assert not any(fake.admin.resources().values()), fake.admin.resources()


def test_a_preempted_multislice_queued_resource_leaves_no_survivor_said_in_one_line(api, fake, isolated):
    """One queued resource for all slices (`up` without --elastic) is suspended whole by a
    preemption: `run --elastic` has no slice to go on on and says so in one line, for
    today's whole re-create (tests/e2e/test_recovery.py makes one)."""
    from podctl.base.settings import Settings
    from podctl.steps.elastic import ElasticPolicy, ElasticRun, plan
    from podctl.steps.session import Session
    from tests.conftest import PROJECT, ZONE

    session = Session(Settings(backend="fake", project=PROJECT, zone=ZONE,
                               config_dir=isolated / "config", state_dir=isolated / "state"), api)
    said: list[str] = []
    spec = SliceSpec.build("v5p-8", num_slices=2, tier="spot")
    full = run(up(api, UpRequest(parent=PARENT, name="ms", spec=spec, ssh_keys=KEY, owner="tester",
                                 policy=FAST))).info
    ElasticRun(session, full, ElasticPolicy(), said.append)
    assert said == ["elastic: ms is one queued resource for its 2 slices, suspended whole if one is "
                    "preempted (`up --elastic` makes one per slice)"]
    fake.admin.preempt("ms-1")
    fake.admin.advance(100)
    assert [m.state for m in run(describe.describe(api, PARENT, "ms")).nodes] == []  # none left
    assert run(plan(session, full, ElasticPolicy(), said.append)) is None
    assert said[-1] == "elastic: no slice of ms answers (SUSPENDED): making all 2 slices again"
    run(terminate.terminate(api, PARENT, "ms", policy=FAST))
    assert not any(fake.admin.resources().values()), fake.admin.resources()
