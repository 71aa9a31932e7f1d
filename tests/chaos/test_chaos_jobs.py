"""Chaos rows for a job's own processes and for GCS going away under a follower:
a stray child of the script (x run, stop, queue), and an outage longer than the
client's retries while `run` follows."""

from __future__ import annotations

import asyncio
from pathlib import Path

from podctl import steps
from podctl.base.retry import RetryPolicy
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from tests.chaos.conftest import Kit, Record, run
from tests.chaos.test_chaos import _down, _up
from tests.queue_support import Queue
from tests.e2e.test_stray_child import left_alive

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


async def _start(kit: Kit, info, record: Record, script: str, *args: str):
    options = steps.RunOptions(steps.RunSpec(script=SCRIPTS / script, args=args), hosts="all")
    return await steps.start_run(kit.session, info, options, sink=record.sink, notice=record.notice)


def test_stray_child_at_run_end_finishes_and_is_ended_and_at_stop_is_ended_with_the_script(kit):
    """Both on one v5p-16 (one slice made and deleted, not two): a run whose script exits 0
    with its stray child, then a detached one stopped while its stray child lives."""
    info = run(_up(kit, "chaos-stray"))
    record = Record()

    async def to_its_end():
        job = await _start(kit, info, record, "stray_child.py")
        return job.run_id, await steps.follow_run(job)

    run_id, result = run(to_its_end())
    assert result.exit_code == 0 and left_alive(run_id) == []
    kit.record("training", "stray child, script exits 0", "finishes", "finished; children ended")

    async def stopped():
        job = await _start(kit, info, record, "stray_child.py", "300")  # a detached run
        run_id = job.run_id
        await job.close()
        while sum("children started" in line for _, line in await kit.stored_lines(run_id, 2)) < 2:
            await asyncio.sleep(0.5)
        return run_id, await steps.stop_run(kit.session, run_id)

    run_id, stop = run(stopped())
    assert stop.stopped and left_alive(run_id) == []
    run(_down(kit, "chaos-stray"))
    kit.record("training", "stray child, podctl stop", "stops", "stopped; no process left")


def test_stray_child_through_the_queue_finishes_and_cancel_ends_it(kit, api, isolated):
    queue = Queue(kit.fake, api, isolated)
    done = queue.add("stray_child.py", name="stray-done")
    entry = queue.settle()[done.id]
    assert entry.state == "succeeded" and left_alive(entry.run_id) == []
    kit.record("queue", "stray child, script exits 0", "finishes", f"entry {entry.state}")
    from podctl.queue import tick

    held = queue.add("stray_child.py", "300", name="stray-cancel")
    queue.until(lambda es: es[held.id].state == "running", "running")
    tick.cancel(queue.ctx, queue.store, held.id)
    entry = queue.settle()[held.id]
    assert entry.state == "cancelled" and left_alive(entry.run_id) == []
    kit.record("queue", "stray child, queue cancel", "cancels", f"entry {entry.state}; none left")


def test_gcs_outage_longer_than_the_clients_retries_is_followed_through(kit):
    info = run(_up(kit, "chaos-gcs-follow", "v5p-8"))
    record = Record()
    # a client that gives up on a call within a second: the outage outlasts its retries
    impatient = Storage.connect(FAKE_BUCKET, endpoint=kit.fake.gcs_url,
                                retry=RetryPolicy(attempts=2, initial=0.1, maximum=0.2, deadline=1.0))
    session = steps.Session(settings=kit.session.settings, ports=kit.session.ports, api=kit.session.api, storages={impatient.bucket_name: impatient})

    async def go():
        job = await steps.start_run(session, info, steps.RunOptions(
            steps.RunSpec(script=SCRIPTS / "ticker.py", args=("40", "0.25")), hosts="all"),
            sink=record.sink, notice=record.notice)
        follow = asyncio.ensure_future(steps.follow_run(job))
        while not record.lines.get(job.run_id):
            await asyncio.sleep(0.1)
        await asyncio.to_thread(kit.admin.gcs_outage, 6.0)
        return job.run_id, await follow

    run_id, result = run(go())
    assert result.exit_code == 0
    assert any(n.startswith("GCS cannot be reached") and f"podctl logs {run_id} --follow" in n
               for n in record.notices)
    assert any(n.startswith("GCS answers again") for n in record.notices)
    shown = [line for _, line in record.lines[run_id]]
    stored = [line for _, line in run(kit.stored_lines(run_id, 1))]
    assert shown == stored  # nothing lost, nothing twice
    run(_down(kit, "chaos-gcs-follow"))
    kit.record("training", "gcs 503 past the client's retries", "finishes",
               "finished; followed through, every line shown once")
