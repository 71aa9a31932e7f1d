"""The steps of a job's life, shared by the CLI, the Python API and the demo.

    Session.open(settings) -> up(...) -> start_run(...) -> follow_run(job) -> down(...)

Each step is a plain async function over a Session (settings, the TPU API, GCS, the
SSH key); the CLI renders what they return, the Python API wraps them in sync
methods, so a slice made in a notebook and one made by `podctl up` are made the same way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from podctl.cloud.types import SliceInfo
from podctl.errors import JobError, PodctlError
from podctl.settings import Settings

Notice = Callable[[str], None]


@dataclass
class Session:
    """What every step needs, opened once: the API client, GCS, the SSH key."""

    settings: Settings
    api: Any  # podctl.cloud.api.TpuApi
    _storage: Any = None
    # (SSH port, JAX coordinator port) of the cloud this session talks to; None: ask the
    # settings (22 and 8482 on Google Cloud, the fake daemon's). A session on an
    # in-process fake (tests, notebooks) gives its own, so no daemon is started for it.
    ports: tuple[int | None, int] | None = None

    @classmethod
    def open(cls, settings: Settings) -> "Session":
        from podctl.cloud.connect import connect

        return cls(settings=settings, api=connect(settings))

    @property
    def storage(self) -> Any:
        if self._storage is None:
            from podctl.cloud.connect import storage_endpoint
            from podctl.storage import Storage

            self._storage = Storage.connect(self.settings.require_bucket(),
                                            endpoint=storage_endpoint(self.settings))
        return self._storage

    def storage_for(self, bucket: str) -> Any:
        """GCS for BUCKET: this session's own when it is the same bucket."""
        if bucket == self.settings.bucket:
            return self.storage
        from podctl.cloud.connect import storage_endpoint
        from podctl.storage import Storage

        return Storage.connect(bucket, endpoint=storage_endpoint(self.settings))

    def close(self) -> None:
        """Close the HTTP connections. They are keep-alive: the fake's single-threaded
        GCS emulator would otherwise wait on them when asked to stop."""
        import contextlib

        if self._storage is not None:
            with contextlib.suppress(Exception):
                self._storage.client._http.close()
        if self.api is not None:
            with contextlib.suppress(Exception):
                self.api.close()

    def job_ports(self) -> tuple[int | None, int]:
        if self.ports is None:
            from podctl.cloud.connect import job_ports

            self.ports = job_ports(self.settings)
        return self.ports

    def ssh_key(self) -> Any:
        from podctl.cloud.sshkey import ensure_ssh_key

        return ensure_ssh_key(self.settings.config_dir)

    def pins(self, info: SliceInfo) -> Any:
        from podctl.jobs.ssh import HostPins, pins_path

        s = self.settings
        return HostPins(pins_path(s.config_dir, s.project, s.zone, info.name, info.created))


# ---- slices -------------------------------------------------------------------------

@dataclass(frozen=True)
class SliceOptions:
    """`podctl up`'s choices, as a user gives them."""

    slice_type: str
    name: str | None = None
    queued: bool = False
    spot: bool = False
    guaranteed: bool = False
    num_slices: int = 1
    valid_for: str | None = None
    runtime_version: str | None = None
    wait: bool = True
    timeout: str = "30m"
    labels: dict[str, str] = field(default_factory=dict)
    placement: Any = None  # podctl.cloud.placement.Placement: reservation, network, ...


def up_request(settings: Settings, options: SliceOptions) -> Any:
    """Check the options and turn them into an UpRequest: no API call, so bad input is
    refused before anything is started or connected."""
    from podctl.cloud.sshkey import ensure_ssh_key
    from podctl.cloud import names
    from podctl.cloud.types import SliceSpec
    from podctl.cloud.up import UpRequest
    from podctl.cloud.wait import WaitPolicy
    from podctl.durations import parse_duration
    from podctl.errors import InvalidValueError

    if options.spot and options.guaranteed:
        raise InvalidValueError("--spot and --guaranteed are two tiers: choose one.")
    from podctl.cloud.placement import Placement

    tier = "spot" if options.spot else "guaranteed" if options.guaranteed else "on-demand"
    placement = options.placement or Placement()
    queued = options.queued or placement.reservation is not None  # a named reservation is queued
    placement = placement.checked(project=settings.project, zone=settings.zone,
                                  queued=queued or options.num_slices > 1, spot=options.spot)
    spec = SliceSpec.build(
        options.slice_type, num_slices=options.num_slices, queued=queued, tier=tier,
        valid_for_seconds=parse_duration(options.valid_for, "--valid-for") if options.valid_for else None,
        runtime_version=options.runtime_version)
    wait_seconds = parse_duration(options.timeout, "--timeout")
    name = names.validate_name(options.name or names.default_name(spec), spec.num_slices)
    return UpRequest(parent=settings.parent, name=name, spec=spec,
                     ssh_keys=ensure_ssh_key(settings.config_dir).metadata_entry, owner=names.owner(),
                     wait=options.wait, policy=WaitPolicy(timeout=wait_seconds),
                     labels=dict(options.labels), placement=placement)


async def up(session: Session, request: Any, progress: Callable[[str], None] | None = None) -> Any:
    """Create (or reuse) the slice and wait until it is ready -> UpResult."""
    from podctl.cloud.up import up as up_step

    return await up_step(session.api, request, progress=progress)


async def ready_slice(session: Session, name: str) -> SliceInfo:
    from podctl.cloud.describe import describe

    info = await describe(session.api, session.settings.parent, name)
    if not info.ready:
        raise JobError(f"slice {name} is {info.state}, not ready; wait with `podctl up` "
                       f"(or see `podctl status {name}`).")
    return info


async def down(session: Session, name: str, *, wait: bool = True, timeout: str = "30m",
               progress: Callable[[str], None] | None = None) -> SliceInfo:
    """Delete the slice NAME (the queued resource that owns it, if any); wait until gone."""
    from podctl.cloud import describe, terminate
    from podctl.cloud.wait import WaitPolicy, wait_deleted
    from podctl.durations import parse_duration

    parent = session.settings.parent
    info = await describe.describe(session.api, parent, name)
    info = await terminate.owning_slice(session.api, parent, info)
    deleted = await terminate.delete(session.api, parent, info)
    _tombstone(session, info)
    if session.settings.bucket:
        await close_runs_of_deleted(session.settings, session.storage, info)
    if wait:
        await wait_deleted(session.api, parent, deleted.name, kind=deleted.kind,
                           policy=WaitPolicy(timeout=parse_duration(timeout, "--timeout")),
                           progress=progress)
    return deleted


def _tombstone(session: Session, info: SliceInfo) -> None:
    """The owner deleted this slice: `run --recover` must not make it again."""
    from podctl import tombstones

    tombstones.write(session.settings.state_dir, info)


async def close_runs_of_deleted(settings: Settings, storage: Any, info: SliceInfo) -> list[str]:
    """After INFO is deleted: the runs still `running` on it (detached ones, that no
    podctl follows) end as `lost`, "slice deleted" -> their ids. Best effort: a delete
    never fails for want of GCS."""
    from podctl.budget import close_vanished
    from podctl.jobs.history import list_runs
    from podctl.jobs.runs import on_slice

    closed = []
    try:
        for record in await list_runs(storage):
            if record.state in ("starting", "running") and on_slice(record, info.name, info.created):
                await close_vanished(storage, record)
                closed.append(record.run_id)
    except PodctlError:
        pass
    return closed


# ---- runs ---------------------------------------------------------------------------

@dataclass(frozen=True)
class RunOptions:
    """`podctl run`'s choices, as a user gives them."""

    script: Path
    args: tuple[str, ...] = ()
    workdir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    setup: str | None = None
    requirements: Path | None = None  # None: the workdir's requirements.txt, if any
    hosts: str = "0"  # whose lines to show: "all" or "0,3"
    fail_fast: bool = True
    resume: str | None = None  # a run id whose checkpoints this run continues from
    # A relaunch (recovery): the bundle uploaded by the first attempt, `script` being
    # its path inside it, and what the run's record says of the attempt.
    bundle_hash: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from podctl.errors import InvalidValueError
        from podctl.jobs.runs import valid_run_id

        if self.bundle_hash is None:  # a relaunch's script is a path inside its bundle
            from podctl.jobs.job import check_script

            check_script(self.script, self.workdir)
        if self.resume is not None and not valid_run_id(self.resume):
            raise InvalidValueError(f"--resume {self.resume!r} is not a run id (e.g. "
                                    "my-slice-20261202-173000-ab12); `podctl runs` lists them.")


async def resume_checkpoint_dir(session: Session, run_id: str) -> str:
    """Where the run RUN_ID kept its checkpoints (checked: the run exists)."""
    from podctl.jobs.history import load_record
    from podctl.jobs.runs import record_checkpoint_dir

    record = await load_record(session.storage, run_id)
    return record_checkpoint_dir(record)


async def run_checkpoints(session: Session, run_id: str) -> tuple[Any, str, list[Any]]:
    """RUN_ID's checkpoints -> (GCS of their bucket, their gs:// directory, the steps);
    a run started with --resume keeps its checkpoints where the earlier run did."""
    from podctl.jobs import checkpoints
    from podctl.jobs.history import load_record
    from podctl.jobs.runs import record_checkpoint_dir

    directory = record_checkpoint_dir(await load_record(session.storage, run_id))
    storage = session.storage_for(checkpoints.split_gs_url(directory)[0])
    return storage, directory, await checkpoints.list_checkpoints(storage, directory)


async def start_run(session: Session, info: SliceInfo, options: RunOptions, *,
                    sink: Callable[[int, str], None], notice: Notice) -> Any:
    """Bundle, upload, start the agents on every host -> a started Job (its fleet closed
    when it is to be followed elsewhere; `follow_run` reopens nothing, it reads GCS)."""
    from podctl.jobs.job import Job, RunRequest, parse_hosts

    ssh_port, coordinator_port = session.job_ports()
    checkpoint_dir = None
    if options.resume:
        checkpoint_dir = await resume_checkpoint_dir(session, options.resume)
    request = RunRequest(info=info, script=options.script, args=list(options.args),
                         workdir=options.workdir, env=dict(options.env), setup=options.setup,
                         requirements=options.requirements,
                         hosts=parse_hosts(options.hosts, len(info.hosts)),
                         fail_fast=options.fail_fast, ssh_port=ssh_port,
                         coordinator_port=coordinator_port, checkpoint_dir=checkpoint_dir,
                         resumed_from=options.resume, bundle_hash=options.bundle_hash,
                         record_extra=dict(options.extra))
    job = Job(session.storage, request, project=session.settings.project, zone=session.settings.zone,
              private_key=session.ssh_key().private_path, pins=session.pins(info), sink=sink,
              notice=notice)
    job.timings = {}  # seconds per phase, for the demo's summary and benchmarks
    try:
        began = time.monotonic()
        spec = await job.prepare()
        job.timings["bundle"] = time.monotonic() - began
        notice(f"run {job.run_id} on {info.name} ({len(job.targets)} hosts)"
               + (f", resuming from {options.resume}" if options.resume else ""))
        began = time.monotonic()
        await job.start(spec)
        job.timings["start"] = time.monotonic() - began
        notice(f"started on all {len(job.targets)} hosts")
    except BaseException as e:  # Ctrl-C or a failure: nothing keeps running on the hosts
        await job.stop()
        await job.close()
        if isinstance(e, PodctlError):
            e.run_id = job.run_id  # type: ignore[attr-defined]  # which run did not start
        raise
    return job


async def follow_run(job: Any) -> Any:
    """Stream the run's logs until every host has ended -> RunResult; Ctrl-C or a
    failure here stops the run on every host."""
    try:
        return await job.follow()
    except BaseException:
        await job.stop()
        raise
    finally:
        await job.close()


@dataclass
class StopResult:
    run_id: str
    state: str  # the record's state after the stop: "stopped", or how it had ended before
    stopped: bool  # False: nothing was running (the run had ended, or its slice is gone)
    hosts: int = 0


async def stop_run(session: Session, run_id: str, *, wait: bool = True,
                   notice: Notice | None = None) -> StopResult:
    """Stop a run started elsewhere (a detached run, another terminal's): SIGTERM to its
    script on every host, as Ctrl-C does (the template saves a checkpoint first), then,
    with WAIT, until every host has ended; its record then says `stopped`."""
    from podctl.errors import NotFoundError
    from podctl.jobs import launch
    from podctl.jobs.history import load_record, save_record
    from podctl.jobs.logs import LogReader
    from podctl.jobs.ssh import Fleet

    record = await load_record(session.storage, run_id)
    attempts = [a["run_id"] for a in record.extra.get("attempts", []) if a.get("run_id")]
    live_id = attempts[-1] if attempts else run_id  # a recovered run: its last attempt
    if record.state not in ("starting", "running"):
        return StopResult(run_id, record.state, stopped=False)
    try:
        info = await describe_slice(session, record.slice_name)
    except NotFoundError:
        return StopResult(run_id, record.state, stopped=False)
    if not info.ready:
        return StopResult(run_id, record.state, stopped=False)
    targets = launch.targets_for(info, session.job_ports()[0])
    async with Fleet(targets, session.ssh_key().private_path, session.pins(info)) as fleet:
        await launch.stop_agents(fleet, live_id)
    if notice:
        notice(f"run {run_id}: asked every host to stop (SIGTERM: a checkpoint first)")
    if wait:  # until every host wrote its status (a lost host counts after its heartbeats stop)
        await LogReader(session.storage, live_id, len(targets), lambda h, line: None, set()).follow()
    record = await load_record(session.storage, run_id)  # a follower may have written it since
    record.state, record.ended = "stopped", record.ended or time.time()
    await save_record(session.storage, record)
    return StopResult(run_id, "stopped", stopped=True, hosts=len(targets))


async def describe_slice(session: Session, name: str) -> SliceInfo:
    from podctl.cloud.describe import describe

    return await describe(session.api, session.settings.parent, name)
