"""Elastic multislice's decisions that need no cloud: a fail-fast that stops waiting for
hosts known gone (Job.gone, set by an elastic run), and the grow-back watch past its
deadline (the run finishes on the survivors, the lost slice no longer asked for)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from podctl.cloud.types import Host, NodeInfo, SliceInfo
from podctl.jobs import job as job_module
from podctl.jobs.job import GONE_WHY, Job, RunRequest, RunResult
from podctl.jobs.logs import LogReader
from podctl.jobs.run_record import HostStatus
from podctl.jobs.run_spec import RunSpec
from podctl.steps.elastic import ElasticPolicy, Shrink, grow_watch


def _slices(k: int) -> SliceInfo:
    nodes = tuple(NodeInfo(name=f"el-{i}", state="READY", health="HEALTHY", accelerator_type="v5p-8",
                           topology="2x2x1", hosts=(Host(i, 0, f"10.0.0.{i}", 22),), spot=False,
                           created=0.0, labels={}, queued_resource="el") for i in range(k))
    return SliceInfo(name="el", project="p", zone="z", kind="queued-resource", state="ACTIVE",
                     accelerator_type="v5p-8", topology="2x2x1", num_slices=k, tier="on-demand",
                     created=0.0, labels={}, nodes=nodes)


def _job(info: SliceInfo, said: list[str]) -> Job:
    return Job(None, RunRequest(info, RunSpec(script=Path("train.py"))),  # type: ignore[arg-type]
               project="p", zone="z", private_key=Path("key"), pins={}, sink=lambda h, line: None,
               notice=said.append)


def test_a_fail_fast_ends_once_the_silent_hosts_are_gone_not_before(monkeypatch):
    monkeypatch.setattr(job_module, "GONE_POLL_SECONDS", 0.01)
    said: list[str] = []
    job = _job(_slices(3), said)
    reader = LogReader(None, job.run_id, 3, lambda h, line: None)  # type: ignore[arg-type]
    reader.progress.statuses[2] = HostStatus(host=2, exit_code=134, ended=time.time())
    asked: list[set[int]] = []

    async def gone(hosts: set[int]) -> set[int]:
        asked.append(set(hosts))
        if len(asked) == 3:  # host 0 ends meanwhile (JAX ended it for the lost peer)
            reader.progress.statuses[0] = HostStatus(host=0, exit_code=134, ended=time.time())
        return hosts & {1}  # host 1 takes no SSH connection; host 0 does

    asyncio.run(job._end_when_gone(reader, gone))
    assert asked[:3] == [{0, 1}] * 3 and asked[3] == {1}  # not while host 0 was still going
    assert reader.done and reader.progress.statuses[1].error == GONE_WHY
    assert reader.progress.statuses[0].exit_code == 134  # a status written is kept
    assert said == [f"host 0001: {GONE_WHY}; not waiting for its end"]


def test_past_the_grow_deadline_the_run_goes_on_on_the_survivors_without_asking():
    """With the deadline passed, the watch says so once and lets the attempt run to its
    end; it never asks the cloud or the hosts (no session: a call would raise)."""
    full = _slices(3)
    shrink = Shrink(full, {0, 2}, {1})
    said: list[str] = []
    policy = ElasticPolicy(grow_deadline=60.0, poll_seconds=0.01)
    watch = grow_watch(None, full, shrink, policy, time.time() - 61, said.append,  # type: ignore[arg-type]
                       back := set())

    async def attempt() -> RunResult:
        await asyncio.sleep(0.1)  # several polls
        return RunResult("el-run", 0, None, {})

    result = asyncio.run(watch(attempt(), None))  # type: ignore[arg-type]
    assert result.exit_code == 0 and not back
    assert said == ["elastic: slice 1 of el not back within 0.017 h: no longer asked for; going on on 2"]


def test_once_the_gone_hosts_ended_the_follow_the_stop_is_not_waited_for_long(monkeypatch):
    """A dead host's hung SSH connection holds a fail-fast's stop: where the gone watch
    ended the follow, it gets GONE_SETTLE_SECONDS, not the 30 s a stop of live hosts gets."""
    monkeypatch.setattr(job_module, "GONE_SETTLE_SECONDS", 0.05)

    async def settle(watch_done: bool) -> tuple[float, bool]:
        halt = asyncio.ensure_future(asyncio.sleep(3600))  # a stop that does not come back
        watch = asyncio.ensure_future(asyncio.sleep(0 if watch_done else 3600))
        await asyncio.sleep(0.01)
        began = time.monotonic()
        if watch_done:
            await job_module._settle([halt, watch])
        else:  # the follow ended by the fail-fast's deadline: the stop keeps its time
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job_module._settle([halt, watch]), 0.5)
        took, let_go = time.monotonic() - began, halt.cancelling() > 0  # _settle cancelled it
        halt.cancel()
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(halt, watch)
        return took, let_go

    took, let_go = asyncio.run(settle(True))
    assert took < 0.5 and let_go
    took, let_go = asyncio.run(settle(False))
    assert took >= 0.5 and not let_go  # still waiting for the stop when cut off


def test_below_the_floor_with_the_lost_requests_failed_it_makes_all_again_at_once(monkeypatch):
    """--min-slices 3 of 3, slices 1 and 2 lost, slice 1's request FAILED (its window
    closed): the floor can never be met again, so the run does not wait to the deadline
    (hours, no step) but is made again whole, said in one line; the FAILED request deleted."""
    import dataclasses

    from podctl.base.settings import Settings
    from podctl.cloud.types import Member
    from podctl.steps import elastic
    from podctl.steps.session import Session

    full = _slices(3)
    members = (Member(0, "el-0", "ACTIVE"), Member(1, "el-1", "FAILED"), Member(2, "el-2", "SUSPENDED"))
    now = dataclasses.replace(full, nodes=full.nodes[:1], members=members, state="FAILED")
    deleted: list[str] = []
    asked: list[str] = []

    class Api:
        async def describe(self, parent: str, name: str) -> SliceInfo:
            return now

        async def stop_asking(self, parent: str, member: str) -> None:
            deleted.append(member)

        async def ask_again(self, parent: str, member: str) -> None:
            asked.append(member)

    async def answering(session, info, ids=None) -> set[int]:
        return info.ready_slices if ids is None else info.ready_slices & ids

    monkeypatch.setattr(elastic, "answering_slices", answering)
    settings = Settings(backend="gcp", project="p", zone="z", config_dir=Path("/nonexistent"),
                        state_dir=Path("/nonexistent"))
    said: list[str] = []
    policy = ElasticPolicy(min_slices=3, poll_seconds=3600.0)  # a wait would hang the test
    planned = elastic.plan(Session(settings, Api()), full, policy, said.append)  # type: ignore[arg-type]
    assert asyncio.run(asyncio.wait_for(planned, 10)) is None  # a wait would be the bug
    assert asked == ["el-2"] and "el-1" in deleted
    assert said[-1] == ("elastic: 1 of 3 slices answer, below --min-slices 3, the request for "
                        "slice 1 failed: making all 3 again")
