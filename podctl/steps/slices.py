"""Slice steps: make one (`up`), find a ready one, delete one (`down`).

    up_request(settings, SliceOptions(...)) -> up(session, request) -> ... -> down(session, name)

The CLI, the Python API, recovery and the demo make and delete slices with these, so a
slice made in a notebook and one made by `podctl up` are made (and deleted) the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podctl import tombstones
from podctl.vocabulary import DEFAULT_WAIT
from podctl.vocabulary import LIVE_RUN_STATES
from podctl.cloud import describe, firewall, names, terminate
from podctl.cloud.connect import compute_reader
from podctl.cloud import up as cloud_up
from podctl.cloud.placement import Placement
from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.types import SliceInfo, SliceSpec, Tier
from podctl.cloud.up import UpRequest, UpResult
from podctl.cloud.wait import Progress, WaitPolicy, wait_deleted
from podctl.durations import parse_duration
from podctl.errors import InvalidValueError, JobError, PodctlError
from podctl.jobs.run_files import close_record, list_runs
from podctl.jobs.runs import on_slice
from podctl.settings import Settings
from podctl.steps.session import Session
from podctl.storage import Storage

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
    timeout: str = DEFAULT_WAIT
    labels: dict[str, str] = field(default_factory=dict)
    placement: Placement | None = None  # reservation, network, service account, tags


def up_request(settings: Settings, options: SliceOptions) -> UpRequest:
    """Check the options and turn them into an UpRequest: no API call, so bad input is
    refused before anything is started or connected."""
    if options.spot and options.guaranteed:
        raise InvalidValueError("--spot and --guaranteed are two tiers: choose one.")
    tier: Tier = "spot" if options.spot else "guaranteed" if options.guaranteed else "on-demand"
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
                     labels=dict(options.labels), placement=placement,
                     named_for_owner=options.name is None)


async def up(session: Session, request: UpRequest, progress: Progress | None = None) -> UpResult:
    """Create (or reuse) the slice and wait until it is ready -> UpResult. On a network
    of the user's, first check that it admits SSH (cloud/firewall.py)."""
    placement = request.placement
    if placement.network or placement.subnetwork:
        reader = compute_reader(session.settings, session.api)
        try:
            note = await firewall.check_ssh(
                reader, project=session.settings.project, region=session.settings.zone.rsplit("-", 1)[0],
                network=placement.network, subnetwork=placement.subnetwork, tags=placement.tags)
        finally:
            reader.close()
        if note and progress:
            progress(f"note: {note}; podctl reaches the hosts by SSH (tcp:22)")
    return await cloud_up.up(session.api, request, progress=progress)


async def ready_slice(session: Session, name: str) -> SliceInfo:
    info = await describe.describe(session.api, session.settings.parent, name)
    if not info.ready:
        raise JobError(f"slice {name} is {info.state}, not ready; wait with `podctl up` "
                       f"(or see `podctl status {name}`).")
    return info


async def down(session: Session, name: str, *, wait: bool = True, timeout: str = DEFAULT_WAIT,
               progress: Progress | None = None) -> SliceInfo:
    """Delete the slice NAME (the queued resource that owns it, if any); wait until gone."""
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
    tombstones.write(session.settings.state_dir, info)


async def close_runs_of_deleted(settings: Settings, storage: Storage, info: SliceInfo) -> list[str]:
    """After INFO is deleted: the runs still `running` on it (detached ones, that no
    podctl follows) end as `lost`, "slice deleted" -> their ids. Best effort: a delete
    never fails for want of GCS."""
    closed = []
    try:
        for record in await list_runs(storage):
            if record.state in LIVE_RUN_STATES and on_slice(record, info.name, info.created):
                await close_record(storage, record.run_id, "lost", keep_exit_code=True,
                                   reason="slice deleted")
                closed.append(record.run_id)
    except PodctlError:
        pass
    return closed




async def describe_slice(session: Session, name: str) -> SliceInfo:
    return await describe.describe(session.api, session.settings.parent, name)
