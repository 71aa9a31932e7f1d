"""The run side of a tick: start an entry's run detached on its READY slice (with
the bundle uploaded at `queue add` and the entry's fixed run id, through the job
layer's Job), read how it is doing from GCS, and stop it.

Reading a run costs two GCS lists (status/ and heartbeat/), plus one small
download per host status when the run ends; the Cloud TPU API is not asked.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.cloud.types import SliceInfo
from podctl.jobs import launch, runs
from podctl.jobs.job import Job, RunRequest
from podctl.jobs.runs import HostStatus, RunRecord
from podctl.jobs.ssh import Fleet, HostPins, pins_path
from podctl.queue.store import Entry

HOST_LOST_SECONDS = 600.0  # no heartbeat from a host for this long (and no status): lost


def _pins(ctx: Any, entry: Entry, info: SliceInfo) -> HostPins:
    return HostPins(pins_path(ctx.config_dir, entry.project, entry.zone, info.name, info.created))


async def read_record(storage: Any, run_id: str) -> RunRecord | None:
    from podctl.storage import StorageNotFound

    try:
        data = await storage.download_bytes(f"{runs.run_prefix(run_id)}/run.json")
    except StorageNotFound:
        return None
    return RunRecord.from_json(json.loads(data))


async def start(ctx: Any, entry: Entry, info: SliceInfo) -> bool:
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
                         bundle_hash=entry.bundle_hash,
                         checkpoint_dir=runs.checkpoint_dir(storage.bucket_name, resumed) if resumed else None,
                         resumed_from=resumed,
                         record_extra={"parent": resumed, "attempt": entry.attempt} if resumed else {})
    job = Job(storage, request, project=entry.project, zone=entry.zone,
              private_key=ctx.private_key, pins=_pins(ctx, entry, info),
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
    lost: str | None = None  # why the run's hosts count as gone (an infrastructure failure)


async def read(storage: Any, entry: Entry, num_hosts: int) -> RunState:
    assert entry.run_id
    statuses: dict[int, HostStatus] = {}
    for obj in await storage.list(runs.status_prefix(entry.run_id)):
        host = int(obj.name.rsplit("/", 1)[-1].split("-")[1].split(".")[0])
        data = json.loads(await storage.download_bytes(obj.name))
        statuses[host] = HostStatus(host=host, exit_code=int(data["exit_code"]),
                                    ended=float(data["ended"]), stopped=bool(data.get("stopped")),
                                    error=data.get("error"))
    failed = [s for s in statuses.values() if s.exit_code != 0 and not s.stopped]
    if failed or len(statuses) >= num_hosts:
        code, host = runs.job_exit_code(statuses)
        return RunState(done=True, exit_code=code, failed_host=host.host if host else None)
    # GCS's clock, not the tick's (which tests may move): how long since a host beat
    beats = {int(o.name.rsplit("/", 1)[-1].split("-")[1].split(".")[0]): o.updated
             for o in await storage.list(runs.heartbeat_prefix(entry.run_id))}
    since = entry.started or time.time()
    silent = [h for h in range(num_hosts) if h not in statuses
              and time.time() - max(beats.get(h, 0.0), since) > HOST_LOST_SECONDS]
    if silent:
        return RunState(done=False, lost=f"host {silent[0]:04d} sent no heartbeat for "
                                         f"{HOST_LOST_SECONDS:.0f} s")
    return RunState(done=False)


async def stop(ctx: Any, entry: Entry, info: SliceInfo | None, why: str) -> None:
    """Ask every host to stop the run and record it as stopped; best effort, since the
    slice is deleted right after (which stops everything on it anyway)."""
    storage = ctx.storage(entry.bucket)
    if info is not None and info.hosts and entry.run_id:
        try:
            targets = launch.targets_for(info, ctx.ssh_port)
            async with Fleet(targets, ctx.private_key, _pins(ctx, entry, info)) as fleet:
                await launch.stop_agents(fleet, entry.run_id)
        except Exception as e:  # unreachable hosts: the deletion stops them
            ctx.log.warning("stop_failed", entry=entry.id, run_id=entry.run_id, error=str(e))
    await close_record(storage, entry, "stopped", None, why)


async def close_record(storage: Any, entry: Entry, state: str, exit_code: int | None,
                       why: str | None = None) -> None:
    """Write the run's end into run.json and its index entry (`podctl runs` reads them),
    unless an earlier tick did."""
    if not entry.run_id:
        return
    record = await read_record(storage, entry.run_id)
    if record is None or record.state not in ("starting", "running"):
        return
    record.state, record.exit_code, record.ended = state, exit_code, time.time()  # type: ignore[assignment]
    record.extra["queue_entry"] = entry.id
    if why:
        record.extra["stopped_by"] = why
    data = json.dumps(record.to_json()).encode()
    for name in (f"{runs.run_prefix(entry.run_id)}/run.json", f"{runs.INDEX}/{entry.run_id}.json"):
        await storage.upload_bytes(name, data, content_type="application/json")
