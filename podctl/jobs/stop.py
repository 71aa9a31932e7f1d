"""Stop runs on a slice's hosts: the one way podctl stops a run it is not following
(`podctl stop`, a notebook's `Run.stop()`, a budget reached, the queue's tick).

As Ctrl-C does: every host's agent sends SIGTERM to the script's process group (the
template saves a checkpoint at the next step and exits 143), and when the script
exits, whatever it left running ends too. Then podctl waits, up to a grace, for every
host to write its status (a host that stops beating counts as ended: lost), and
closes each run's record as `stopped`, saying by whom.

A stop is final: before any host is signalled, the stop request is written to GCS
(run_files.request_stop, for the run and its live attempt), so that `run --recover`,
the queue and the stall watch see it and never relaunch the run. The hosts' agents
read that request too (agent_control.py): whoever cannot reach the hosts over SSH
(another identity: a team's cron with its own key) still stops the run, with the
same grace, through GCS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from podctl.base.errors import PodctlError
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo
from podctl.host import agent_control
from podctl.jobs import channels, run_files
from podctl.jobs.channels.base import HostAccess as HostAccess
from podctl.jobs.run_files import RunRecord
from podctl.jobs.run_record import HostStatus

POLL_SECONDS = 1.0
# A stop that reached the hosts only through GCS: the agents see it within their poll,
# and their statuses take a moment more to land.
GCS_STOP_MARGIN_SECONDS = agent_control.POLL_SECONDS + 30.0


async def signal_runs(storage: Storage, info: SliceInfo, records: list[RunRecord], access: HostAccess,
                      grace_seconds: float | None = None) -> bool:
    """SIGTERM each of RECORDS' runs (its live attempt) on every host of INFO, through the
    channel its record names (`via`; a host that is gone has nothing to stop); SIGKILL
    after GRACE_SECONDS (None: the agent's own grace) -> True when every host was asked
    directly, False when some read it from GCS within their poll."""
    by_kind: dict[str, list[str]] = {}
    for record in records:
        live_id = run_files.attempt_ids(record)[-1]
        # a recovered run's live attempt may have taken another channel (auto, a new slice)
        live = record if live_id == record.run_id else await run_files.read_record(storage, live_id)
        kind = channels.recorded((live or record).extra.get("via"))
        by_kind.setdefault(kind.name, []).append(live_id)
    direct = True
    for name, run_ids in by_kind.items():  # a dict of this call's own: no other task changes it
        direct = await channels.REGISTRY[name].signal(storage, info, access, run_ids, grace_seconds) and direct
    return direct


async def wait_ended(storage: Storage, run_id: str, num_hosts: int, *,
                     grace_seconds: float | None,
                     clock: Callable[[], float] = time.monotonic) -> bool:
    """Until every host of RUN_ID has ended (its status written, or silent for
    run_files.HOST_LOST_SECONDS), or GRACE_SECONDS (None: no limit) -> all ended?"""
    until = None if grace_seconds is None else clock() + grace_seconds
    since = time.time()
    statuses: dict[int, HostStatus] = {}
    while True:
        statuses = await run_files.read_statuses(storage, run_id, statuses)
        if len(statuses) >= num_hosts:
            return True
        beats = await run_files.read_heartbeats(storage, run_id)
        silent = run_files.silent_hosts(num_hosts, statuses, beats, since, time.time())
        if len(statuses) + len(silent) >= num_hosts:
            return True
        if until is not None and clock() >= until:
            return False
        await asyncio.sleep(POLL_SECONDS)


async def stop_runs(storage: Storage, info: SliceInfo, records: list[RunRecord],
                    access: HostAccess, *, stopped_by: str, grace_seconds: float | None,
                    clock: Callable[[], float] = time.monotonic,
                    notice: Callable[[str], None] = lambda text: None) -> list[str]:
    """Stop RECORDS' runs (a recovered run: its live attempt) on INFO's hosts for good:
    the stop request in GCS first, then SIGTERM over SSH (hosts SSH cannot reach get it
    from GCS); wait for them up to GRACE_SECONDS (the script's time to checkpoint, None:
    no limit), and close each record as stopped -> the run ids."""
    live = {r.run_id: run_files.attempt_ids(r)[-1] for r in records}
    await run_files.request_stop(storage, [i for r in records for i in (r.run_id, live[r.run_id])],
                                 by=stopped_by, grace_seconds=grace_seconds)
    wait = grace_seconds
    try:
        # through each run's own channel (its record's `via`): a run started through the
        # slice's watchers is not asked over SSH (which may be closed to it)
        direct = await signal_runs(storage, info, records, access, grace_seconds)
    except (PodctlError, OSError) as e:
        direct = False
        notice(f"could not reach the hosts of {info.name} over SSH ({e}); asked them to stop "
               f"through GCS (their agents read it within {agent_control.POLL_SECONDS:.0f} s)")
    if not direct and wait is not None:  # every agent reads the request within its poll
        wait += GCS_STOP_MARGIN_SECONDS
    for record in records:
        await wait_ended(storage, live[record.run_id], record.num_hosts,
                         grace_seconds=wait, clock=clock)
        for run_id in {record.run_id, live[record.run_id]}:
            await run_files.close_record(storage, run_id, "stopped", keep_exit_code=True,
                                         even_if_ended=True, stopped_by=stopped_by)
    return [r.run_id for r in records]
