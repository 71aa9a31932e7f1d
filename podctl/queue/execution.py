"""The run side of a tick: start an entry's run detached on its READY slice (with
the bundle uploaded at `queue add` and the entry's fixed run id, through the job
layer's Job), read how it is doing from GCS, and stop it.

Reading a run costs two GCS lists (status/ and heartbeat/), plus one small
download per host status when the run ends; the Cloud TPU API is not asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path


from podctl.cloud.types import SliceInfo
from podctl.jobs import run_files, run_layout, runs
from podctl.jobs.job import Job, RunRequest
from podctl.jobs.run_files import HOST_LOST_SECONDS, read_record
from podctl.jobs.ssh import HostPins, pins_for
from podctl.jobs.stop import HostAccess, signal_runs
from podctl.queue.store import Entry
from podctl.queue.context import TickContext
from podctl.storage import Storage


def _pins(ctx: TickContext, entry: Entry, info: SliceInfo) -> HostPins:
    return pins_for(ctx.config_dir, info)


async def start(ctx: TickContext, entry: Entry, info: SliceInfo) -> bool:
    """Start the run unless a tick before this one did; True if this call started it.
    On the hosts the start is once-only for a fixed run id, so a start repeated after
    a tick died in the middle of it runs nothing twice."""
    storage = ctx.storage(entry.bucket)
    assert entry.run_id
    record = await read_record(storage, entry.run_id)
    if record is not None and record.state != "starting":
        return False  # started (and recorded) by an earlier tick: adopt it
    # A retry after the infrastructure failed goes on from the first attempt's
    # checkpoints (the template resumes from the latest complete one), as --recover does.
    first = next((a["run_id"] for a in entry.attempts if a.get("run_id")), None)
    resumed = first if first and first != entry.run_id else None
    request = RunRequest(info=info, script=Path(entry.script), args=list(entry.args),
                         env=dict(entry.env), hosts=None, detach=True, ssh_port=ctx.ssh_port,
                         coordinator_port=ctx.coordinator_port(), run_id=entry.run_id,
                         bundle_hash=entry.bundle_hash, host_jax_extra=ctx.host_jax_extra,
                         fake_cloud=ctx.fake_cloud,
                         checkpoint_dir=run_layout.checkpoint_dir(storage.bucket_name, resumed) if resumed else None,
                         resumed_from=resumed,
                         record_extra={"parent": resumed, "attempt": entry.attempt} if resumed else {})
    job = Job(storage, request, project=entry.project, zone=entry.zone,
              private_key=ctx.private_key, pins=_pins(ctx, entry, info), user=await ctx.ssh_user(info),
              sink=lambda host, line: None,
              notice=lambda text: ctx.log.debug("job", entry=entry.id, run_id=entry.run_id, note=text))
    try:
        await job.start(await job.prepare())
    finally:
        await job.close()
    return True


@dataclass(frozen=True)
class RunState:
    done: bool
    exit_code: int | None = None
    failed_host: int | None = None
    failed_error: str | None = None  # what the failed host's status says
    failed_stopped: bool = False  # the failed host was stopped by podctl
    lost: str | None = None  # why the run's hosts count as gone (an infrastructure failure)


async def read(storage: Storage, entry: Entry, num_hosts: int) -> RunState:
    assert entry.run_id
    statuses = await run_files.read_statuses(storage, entry.run_id)
    failed = [s for s in statuses.values() if s.exit_code != 0 and not s.stopped]
    if failed or len(statuses) >= num_hosts:
        code, host = runs.job_exit_code(statuses)
        return RunState(done=True, exit_code=code, failed_host=host.host if host else None,
                        failed_error=host.error if host else None,
                        failed_stopped=bool(host and host.stopped))
    beats = await run_files.read_heartbeats(storage, entry.run_id)
    silent = run_files.silent_hosts(num_hosts, statuses, beats, since=entry.started or time.time(),
                                    now=time.time())
    if silent:
        return RunState(done=False, lost=f"host {silent[0]:04d} sent no heartbeat for "
                                         f"{HOST_LOST_SECONDS:.0f} s")
    return RunState(done=False)


async def stop_request(storage: Storage, entry: Entry) -> run_files.StopRequest | None:
    """The owner's stop of the entry's run (`podctl stop RUN_ID`), if one was asked."""
    return await run_files.read_stop_request(storage, entry.run_id) if entry.run_id else None


async def stop(ctx: TickContext, entry: Entry, info: SliceInfo | None, why: str) -> None:
    """Ask every host to stop the run and record it as stopped; best effort and without
    waiting, since the slice is deleted right after (which stops everything on it)."""
    storage = ctx.storage(entry.bucket)
    if info is not None and info.hosts and entry.run_id:
        try:
            await signal_runs(info, [entry.run_id], HostAccess(ctx.private_key, _pins(ctx, entry, info),
                                                               ctx.ssh_port, who=partial(ctx.ssh_user, info)))
        except Exception as e:  # unreachable hosts: the deletion stops them
            ctx.log.warning("stop_failed", entry=entry.id, run_id=entry.run_id, error=str(e))
    await close_record(storage, entry, "stopped", None, why)


async def close_record(storage: Storage, entry: Entry, state: str, exit_code: int | None,
                       why: str | None = None) -> None:
    """Write the run's end into its record (`podctl runs` reads it), unless an earlier
    tick did."""
    if entry.run_id:
        await run_files.close_record(storage, entry.run_id, state, exit_code=exit_code,
                                     queue_entry=entry.id, stopped_by=why)
