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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from podctl.cloud.sshkey import SSH_USER
from podctl.cloud.types import SliceInfo
from podctl.errors import PodctlError
from podctl.jobs import agent_control, launch, run_files
from podctl.jobs.run_files import RunRecord
from podctl.jobs.run_record import HostStatus
from podctl.jobs.ssh import Fleet, HostPins
from podctl.storage import Storage

POLL_SECONDS = 1.0
# A stop that reached the hosts only through GCS: the agents see it within their poll,
# and their statuses take a moment more to land.
GCS_STOP_MARGIN_SECONDS = agent_control.POLL_SECONDS + 30.0


@dataclass(frozen=True)
class HostAccess:
    """How to reach a slice's hosts: the SSH key, the host-key pins, the SSH port, and
    the user (podctl's own, or OS Login's POSIX username: cloud/oslogin.py)."""

    private_key: Path
    pins: HostPins
    ssh_port: int | None
    user: str = SSH_USER
    # asked at connection time instead of USER, so that an OS Login import that fails
    # fails inside the SSH step, which a stop survives by asking through GCS
    who: Callable[[], Awaitable[str]] | None = None

    async def login(self) -> str:
        return await self.who() if self.who is not None else self.user


async def signal_runs(info: SliceInfo, run_ids: list[str], access: HostAccess,
                      grace_seconds: float | None = None) -> None:
    """SIGTERM each run's script on every host of INFO (a host that is gone has nothing
    to stop); SIGKILL after GRACE_SECONDS (None: the agent's own grace)."""
    async with Fleet(launch.targets_for(info, access.ssh_port), access.private_key,
                     access.pins, user=await access.login()) as fleet:
        for run_id in run_ids:
            await launch.stop_agents(fleet, run_id, grace_seconds)


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
    if all(r.extra.get("via") == "boot" for r in records):
        # started through the slice's watchers: the hosts are not asked over SSH (which may be
        # closed to them); every agent reads the request within its poll
        if wait is not None:
            wait += GCS_STOP_MARGIN_SECONDS
    else:
        try:
            await signal_runs(info, list(live.values()), access, grace_seconds)
        except (PodctlError, OSError) as e:
            if wait is not None:
                wait += GCS_STOP_MARGIN_SECONDS
            notice(f"could not reach the hosts of {info.name} over SSH ({e}); asked them to stop "
                   f"through GCS (their agents read it within {agent_control.POLL_SECONDS:.0f} s)")
    for record in records:
        await wait_ended(storage, live[record.run_id], record.num_hosts,
                         grace_seconds=wait, clock=clock)
        for run_id in {record.run_id, live[record.run_id]}:
            await run_files.close_record(storage, run_id, "stopped", keep_exit_code=True,
                                         even_if_ended=True, stopped_by=stopped_by)
    return [r.run_id for r in records]
