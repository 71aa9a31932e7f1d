"""Where a detached run stands, read from GCS (no SSH, no Cloud TPU API): for callers
that look at a run now and then rather than follow it (the queue's tick, once a tick).

    progress = await run_progress(session, run_id, num_hosts, since=started)
    stop = await owner_stop(session, run_id)      # `podctl stop RUN_ID`, `Run.stop()`
    await close_run(session, run_id, "failed", exit_code=1, queue_entry=3)
    record = await load_run(session, run_id)      # `Cloud.run(RUN_ID)`
    code = await follow_from_gcs(session, run_id, num_hosts, sink)  # an earlier run, to its end
    await ask_stop(session, [run_id], by="podctl.api")   # the owner's stop, final

A look costs two GCS lists (status/ and heartbeat/), plus one small download per host
status when the run ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from podctl.base.failures import coordination_abort
from podctl.jobs import run_files, run_record
from podctl.jobs.logs import LineSink, LogReader
from podctl.jobs.peer_cause import peer_cause
from podctl.jobs.run_files import HOST_LOST_SECONDS, StopRequest
from podctl.jobs.run_record import RunRecord
from podctl.steps.session import Session


@dataclass(frozen=True)
class RunProgress:
    done: bool  # every host wrote its status, or one failed on its own
    exit_code: int | None = None
    failed_host: int | None = None
    failed_error: str | None = None  # what the failed host's status says
    failed_stopped: bool = False  # the failed host was stopped by podctl
    lost: str | None = None  # why the run's hosts count as gone (an infrastructure failure)
    # the failed host was ended by JAX's coordination service for a peer that stopped
    # answering: that peer is `failed_host`, and this says both (jobs/peer_cause.py)
    cause: str | None = None


async def run_progress(session: Session, run_id: str, num_hosts: int, *, since: float) -> RunProgress:
    """RUN_ID on NUM_HOSTS hosts, started at SINCE (epoch seconds): ended, lost (a host
    silent for HOST_LOST_SECONDS), or going."""
    storage = session.storage
    statuses = await run_files.read_statuses(storage, run_id)
    failed = [s for s in statuses.values() if s.exit_code != 0 and not s.stopped]
    if failed or len(statuses) >= num_hosts:
        code, host = run_record.job_exit_code(statuses)
        cause = None
        if host is not None and coordination_abort(host.explanation()) is not None:
            cause = peer_cause(statuses, await run_files.read_beats(storage, run_id), num_hosts,
                               time.time())
        if cause is not None:
            return RunProgress(done=True, exit_code=code, failed_host=cause.host,
                               failed_error=cause.describe(), cause=cause.describe())
        return RunProgress(done=True, exit_code=code, failed_host=host.host if host else None,
                           failed_error=host.error if host else None,
                           failed_stopped=bool(host and host.stopped))
    beats = await run_files.read_heartbeats(storage, run_id)
    silent = run_files.silent_hosts(num_hosts, statuses, beats, since=since, now=time.time())
    if silent:
        return RunProgress(done=False, lost=f"host {silent[0]:04d} sent no heartbeat for "
                                            f"{HOST_LOST_SECONDS:.0f} s")
    return RunProgress(done=False)


async def owner_stop(session: Session, run_id: str) -> StopRequest | None:
    """The stop RUN_ID's owner asked for (`podctl stop`, `Run.stop()`, a budget), if any."""
    return await run_files.read_stop_request(session.storage, run_id)


async def close_run(session: Session, run_id: str, state: str, *, exit_code: int | None,
                    **extra: Any) -> None:
    """Write RUN_ID's end into its record (`podctl runs` reads it), unless it has ended."""
    await run_files.close_record(session.storage, run_id, state, exit_code=exit_code, **extra)


async def load_run(session: Session, run_id: str) -> RunRecord:
    """RUN_ID's record (NotFoundError, one line, when the bucket has none)."""
    return await run_files.load_record(session.storage, run_id)


async def follow_from_gcs(session: Session, run_id: str, num_hosts: int, sink: LineSink) -> int:
    """Every line of RUN_ID to SINK until each host has ended -> the run's exit code: a run
    this process did not start (no connection to its hosts), read as `podctl logs -f` does."""
    reader = LogReader(session.storage, run_id, num_hosts, sink, None)
    return run_record.job_exit_code(await reader.follow())[0]


async def ask_stop(session: Session, run_ids: list[str], *, by: str) -> None:
    """The owner's stop of RUN_IDS, written to GCS: final (recovery, the queue and the
    stall watch never relaunch it), and the hosts' agents act on it too."""
    await run_files.request_stop(session.storage, run_ids, by=by)
