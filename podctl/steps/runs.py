"""Run steps: start a run on a slice, follow it, stop it, list runs, find and pull a
run's checkpoints, run a plain command on a slice's hosts (`podctl exec`).

    job = await start_run(session, info, RunOptions(RunSpec(script)), sink=..., notice=...)
    result = await follow_run(job)        # Ctrl-C or a failure stops it on every host

`podctl run` (and `run --detach`), `Slice.run()` in the Python API, recovery's relaunches,
the demo and the queue's tick (detached, once-only, a fixed run id, the bundle of `queue
add`) start runs with `start_run`; `stop_run` is `podctl stop` and `Run.stop()`;
`signal_stop` is the queue's stop before it deletes the slice. `parse_env` (--env,
--env-file) and `valid_run_id` are the jobs layer's, named here for the callers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from podctl.base.errors import InvalidValueError, NotFoundError, PodctlError, StoragePermissionError
from podctl.base.vocabulary import LIVE_RUN_STATES
from podctl.cloud.connect import bucket_grant
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo
from podctl.host import run_layout
from podctl.jobs import bundle, channels, checkpoints, launch, run_files
from podctl.jobs.channels.base import Reach
from podctl.jobs.checkpoints import Checkpoint, PullResult
from podctl.jobs.env_lock import jax_extra_for
from podctl.jobs.job import Job, RunRequest, RunResult, exec_on_hosts, parse_hosts
from podctl.jobs.job import parse_env as parse_env
from podctl.jobs.run_files import load_record, read_record
from podctl.jobs.run_record import RunRecord, record_checkpoint_dir
from podctl.jobs.run_record import valid_run_id as valid_run_id
from podctl.jobs.run_spec import RunSpec as RunSpec
from podctl.jobs.stop import signal_runs, stop_runs
from podctl.steps.session import Session
from podctl.steps.slices import check_network_for_run, describe_slice, ready_slice

VIAS = channels.choices()  # what --via takes (the CLI's choice list)


def check_via(name: str, where: str = "--via") -> str:
    """NAME, if it is auto or a registered channel; else InvalidValueError in one line
    naming WHERE it was said (e.g. `queue add --via`)."""
    return channels.checked(name, where)
Notice = Callable[[str], None]
LineSink = Callable[[int, str], None]
PullProgress = Callable[[int, int], None]  # bytes done, bytes in all


@dataclass(frozen=True)
class RunOptions:
    """`podctl run`'s choices, as a user gives them: what runs (the one RunSpec) and how."""

    spec: RunSpec
    hosts: str = "0"  # whose lines to show: "all" or "0,3"
    fail_fast: bool = True
    resume: str | None = None  # a run id whose checkpoints this run continues from
    # A relaunch (recovery): the bundle uploaded by the first attempt, `script` being
    # its path inside it, and what the run's record says of the attempt.
    bundle_hash: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # --detach: return once every host has started, the run's connections closed (it is
    # followed, if at all, from GCS)
    detach: bool = False
    # A start that may be repeated (the queue's tick, which may die in the middle of it):
    # the run id is fixed in advance (RUN_ID), the hosts start it once only, and a start
    # that fails is left as it is for the next try to finish rather than stopped (the
    # hosts refuse the id twice, so a stop would leave nothing to finish). `run_started`
    # tells whether an earlier try got it going.
    once: bool = False
    run_id: str | None = None
    # How the run reaches its hosts: a channel's name from the registry (jobs/channels:
    # "ssh", a session per host; "boot", the slice's watchers, no SSH), or "auto" (the
    # first the slice takes whose hosts answer); None: the settings'.
    via: str | None = None

    def __post_init__(self) -> None:
        if self.via is not None:
            channels.checked(self.via)
        if self.bundle_hash is None:  # a relaunch's script is a path inside its bundle
            self.spec.check()
        if self.resume is not None and not valid_run_id(self.resume):
            raise InvalidValueError(f"--resume {self.resume!r} is not a run id (e.g. "
                                    "my-slice-20261202-173000-ab12); `podctl runs` lists them.")
        if self.once != (self.run_id is not None):  # a fixed id is what makes the hosts start it once
            raise InvalidValueError("a once-only start needs its run id fixed in advance, and a "
                                    "fixed run id is started once only: give both or neither.")


async def resume_checkpoint_dir(session: Session, run_id: str, *, unrecorded_ok: bool = False) -> str:
    """Where the run RUN_ID kept its checkpoints (checked: the run exists). UNRECORDED_OK:
    a run of the caller's own that may never have got as far as its record (a queued
    entry's first attempt, lost before its start): then where it would have kept them."""
    if unrecorded_ok:
        record = await read_record(session.storage, run_id)
        if record is None:
            return run_layout.checkpoint_dir(session.storage.bucket_name, run_id)
        return record_checkpoint_dir(record)
    return record_checkpoint_dir(await load_record(session.storage, run_id))


async def ship_bundle(session: Session, spec: RunSpec, notice: Notice) -> tuple[str, str]:
    """SPEC's workdir packed and put in the session's GCS now (`queue add`, so that a later
    edit does not change the queued run) -> (the bundle's hash, the script's path in it)."""
    root, script = spec.bundle_root()
    return await bundle.ship(session.storage, root, notice), script


async def run_started(session: Session, run_id: str) -> bool:
    """Whether an earlier start of RUN_ID (a fixed id: RunOptions.once) got it going:
    its record is past `starting`. The caller then adopts the run rather than start it."""
    record = await read_record(session.storage, run_id)
    return record is not None and record.state != "starting"


async def run_checkpoints(session: Session, run_id: str) -> tuple[Storage, str, list[Checkpoint]]:
    """RUN_ID's checkpoints -> (GCS of their bucket, their gs:// directory, the steps);
    a run started with --resume keeps its checkpoints where the earlier run did."""
    directory = record_checkpoint_dir(await load_record(session.storage, run_id))
    storage = session.storage_for(checkpoints.split_gs_url(directory)[0])
    return storage, directory, await checkpoints.list_checkpoints(storage, directory)


async def pull_checkpoint(session: Session, run_id: str, dest: Path, *, step: int | None = None,
                          parallel: int = checkpoints.PULL_PARALLEL,
                          pulling: Callable[[Checkpoint], AbstractContextManager[PullProgress | None]]
                          | None = None) -> PullResult:
    """Download RUN_ID's checkpoint STEP (default: the latest complete one) to DEST/STEP/,
    PARALLEL objects at a time; PULLING, given the checkpoint chosen, opens the download's
    progress (the CLI's bar names the step)."""
    storage, where, found = await run_checkpoints(session, run_id)
    chosen = checkpoints.choose(found, step, where)
    with pulling(chosen) if pulling is not None else nullcontext(None) as progress:
        result = await checkpoints.pull(storage, chosen, dest, parallel=parallel, progress=progress)
    return replace(result, skipped=checkpoints.skipped(found, chosen) if step is None else None)


async def list_runs(session: Session, *, as_shown: bool = False) -> list[RunRecord]:
    """The newest runs' records in the session's bucket, newest first (AS_SHOWN: a
    recovered run as its live attempt is, as `podctl runs` shows it)."""
    return await run_files.list_runs(session.storage, as_shown=as_shown)


async def exec_on_slice(session: Session, name: str, command: list[str], sink: LineSink, *,
                        hosts: str = "all") -> dict[int, int]:
    """`podctl exec NAME -- CMD`: COMMAND on HOSTS ("all" or "0,3") of the ready slice
    NAME, no bundle, its lines to SINK -> host -> exit code."""
    info = await ready_slice(session, name)
    access = session.host_access(info)
    targets = launch.targets_for(info, access.ssh_port)
    return await exec_on_hosts(targets, access.private_key, access.pins, list(command), sink,
                               parse_hosts(hosts, len(targets)), user=await access.login())


async def new_job(session: Session, info: SliceInfo, options: RunOptions, *,
                  sink: LineSink, notice: Notice) -> Job:
    """A run of OPTIONS on INFO's hosts, not started yet: its run id is known from here."""
    ssh_port, coordinator_port = session.job_ports()
    checkpoint_dir = None
    if options.resume:
        # a once-only run resumes its own series (the queue's first attempt), recorded or not
        checkpoint_dir = await resume_checkpoint_dir(session, options.resume, unrecorded_ok=options.once)
    request = RunRequest(info=info, spec=options.spec,
                         host_jax_extra=jax_extra_for(session.settings.backend),
                         grant=bucket_grant(session.settings),
                         ship_python=session.settings.backend != "fake",  # the fake is offline
                         hosts=parse_hosts(options.hosts, len(info.hosts)),
                         fail_fast=options.fail_fast, ssh_port=ssh_port,
                         coordinator_port=coordinator_port, checkpoint_dir=checkpoint_dir,
                         resumed_from=options.resume, bundle_hash=options.bundle_hash,
                         run_id=options.run_id, detach=options.detach,
                         record_extra=dict(options.extra))
    access = session.host_access(info)
    reach = Reach(api=session.api, storage=session.storage, parent=session.settings.parent, info=info,
                  config_dir=session.settings.config_dir,
                  access=access, grant=request.grant, notice=notice)
    kind = await channels.choose(reach, options.via, session.settings.via,
                                 secrets=bool(options.spec.env), signing_key=options.spec.build_on == "host",
                                 configured_from=session.settings.via_from)
    await check_network_for_run(session, info, ssh=kind.needs_ssh)
    return Job(session.storage, request, project=session.settings.project, zone=session.settings.zone,
               private_key=access.private_key, pins=access.pins, sink=sink, notice=notice,
               channel=channels.open_channel(kind, reach))


async def launch_job(job: Job, *, notice: Notice, once: bool = False) -> Job:
    """Bundle, upload, start the agents on every host; on Ctrl-C or a failure nothing
    is left running on the hosts (and the job's connections are closed). ONCE (a fixed
    run id, RunOptions.once): a failure leaves what started for the next try to finish."""
    request = job.request
    try:
        began = time.monotonic()
        spec = await job.prepare()
        job.timings["bundle"] = time.monotonic() - began
        notice(f"run {job.run_id} on {request.info.name} ({len(job.targets)} hosts, via {job.channel.name})"
               + (f", resuming from {request.resumed_from}" if request.resumed_from else ""))
        began = time.monotonic()
        await job.start(spec)
        job.timings["start"] = time.monotonic() - began
        notice(f"started on all {len(job.targets)} hosts")
    except BaseException as e:
        if not once:  # a start refused (busy, denied) failed; an interrupted one was stopped
            await job.stop(failed=f"could not start: {e}" if isinstance(e, PodctlError) else None)
        await job.close()
        raise
    return job


async def start_run(session: Session, info: SliceInfo, options: RunOptions, *,
                    sink: LineSink, notice: Notice) -> Job:
    """Bundle (or take OPTIONS' bundle, uploaded earlier), upload, start the agents on
    every host -> a started Job. Detached (OPTIONS.detach: `podctl run --detach`, the
    queue) its connections are closed here and the run is left to GCS; else the caller
    follows it (`follow_run`). OPTIONS.once (the queue): see RunOptions."""
    job = await new_job(session, info, options, sink=sink, notice=notice)
    await launch_job(job, notice=notice, once=options.once)
    if options.detach:
        await job.close()
    return job


async def follow_run(job: Job) -> RunResult:
    """Stream the run's logs until every host has ended -> RunResult; Ctrl-C or a
    failure here stops the run on every host."""
    try:
        return await job.follow()
    except StoragePermissionError:
        raise  # the role went mid-run: every agent ended its script itself; the record says failed
    except BaseException:
        await job.stop()
        raise
    finally:
        await job.close()


async def signal_stop(session: Session, info: SliceInfo, run_id: str) -> None:
    """SIGTERM RUN_ID's script on every host of INFO and return: no stop request in GCS
    and no wait, for a caller that deletes the slice next (which ends whatever is left)
    and closes the run's record itself (the queue's tick). `stop_run` is the stop for good."""
    record = await read_record(session.storage, run_id)
    if record is None:  # never recorded: it was never started on the hosts
        return
    await signal_runs(session.storage, info, [record], session.host_access(info))


@dataclass
class StopResult:
    run_id: str
    state: str  # the record's state after the stop: "stopped", or how it had ended before
    stopped: bool  # False: nothing was running (the run had ended, or its slice is gone)
    hosts: int = 0
    between: bool = False  # a recovered run between attempts: none will be started


async def stop_run(session: Session, run_id: str, *, wait: bool = True,
                   notice: Notice | None = None, by: str = "podctl stop") -> StopResult:
    """Stop a run started elsewhere (a detached run, another terminal's) for good: its
    stop request in GCS (so `--recover`, the queue and the stall watch never relaunch
    it), SIGTERM to its script on every host, as Ctrl-C does (the template saves a
    checkpoint first), then, with WAIT, until every host has ended; its record then
    says `stopped`. A recovered run is stopped by any of its ids: its live attempt."""
    storage = session.storage
    record = await run_files.run_of(storage, await load_record(storage, run_id))
    live = await run_files.live_attempt(storage, record)
    if live.state not in LIVE_RUN_STATES:
        if not record.extra.get("recovering") or record.state == "stopped":
            return StopResult(run_id, live.state, stopped=False)
        # Between attempts (the follower makes the slice again): none is started now.
        await run_files.request_stop(storage, [record.run_id], by=by)
        await run_files.close_record(storage, record.run_id, "stopped", keep_exit_code=True,
                                     even_if_ended=True, stopped_by=by)
        return StopResult(record.run_id, "stopped", stopped=True, between=True)
    try:
        info = await describe_slice(session, live.slice_name)
    except NotFoundError:
        info = None
    if info is None or not info.ready:
        if record.extra.get("recovering"):  # its follower would make the slice again: not now
            await run_files.request_stop(storage, [record.run_id, live.run_id], by=by)
            for ended in dict.fromkeys((record.run_id, live.run_id)):
                await run_files.close_record(storage, ended, "stopped", keep_exit_code=True,
                                             even_if_ended=True, stopped_by=by)
            return StopResult(record.run_id, "stopped", stopped=True, between=True)
        return StopResult(run_id, live.state, stopped=False)
    if notice:
        notice(f"run {record.run_id}: asked every host to stop (SIGTERM: a checkpoint first)")
    # Waiting has no limit of its own: a host that stops beating counts as ended.
    await stop_runs(storage, info, [record], session.host_access(info), stopped_by=by,
                    grace_seconds=None if wait else 0.0, notice=notice or (lambda text: None))
    return StopResult(record.run_id, "stopped", stopped=True, hosts=len(info.hosts))
