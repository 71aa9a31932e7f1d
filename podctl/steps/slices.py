"""Slice steps: make one (`up`), find a ready one, delete one (`down`).

    up_request(settings, SliceOptions(...)) -> up(session, request) -> ... -> down(session, name)
    up_request(settings, SliceOptions(..., wait=False)) -> ask_slice(session, request)

The CLI, the Python API, recovery, the demo and the queue make and delete slices with
these, so a slice made in a notebook, one made by `podctl up` and one the queue's tick
asks for are made (and deleted) the same way. The queue never waits: it asks
(`ask_slice`), learns later how a node's creation ended (`creation_outcome`), and
deletes with `down(..., wait=False, by_owner=False)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podctl.base.durations import parse_duration
from podctl.base.errors import InvalidValueError, JobError, PodctlError
from podctl.base.settings import Settings
from podctl.base.topology import parse_slice
from podctl.base.vocabulary import DEFAULT_WAIT, LIVE_RUN_STATES
from podctl.cloud import firewall, maintenance_info, names, provider, tombstones
from podctl.cloud import up as cloud_up
from podctl.cloud.connect import compute_reader
from podctl.cloud.create import CreationOutcome
from podctl.cloud.placement import Placement
from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo, SliceSpec, Tier
from podctl.cloud.up import UpRequest, UpResult
from podctl.cloud.wait import Progress, WaitPolicy
from podctl.jobs import boot_script, pointer_sign
from podctl.jobs.channels import boot as boot_channel
from podctl.jobs.run_files import close_record, list_runs
from podctl.jobs.run_record import on_slice
from podctl.money.budget import describe_labels, existing_budget_labels, set_on_existing, with_budget
from podctl.steps.session import Session

Notice = Callable[[str], None]
Waiting = Callable[[SliceInfo], AbstractContextManager[Progress | None]]


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
    elastic: bool = False  # one queued resource per slice (cloud/create.py)
    wait: bool = True
    timeout: str = DEFAULT_WAIT
    labels: dict[str, str] = field(default_factory=dict)
    placement: Placement | None = None  # reservation, network, service account, tags
    # More public keys (files) whose signed runs the slice's watchers accept (--trust-key)
    trusted_keys: tuple[str, ...] = ()


def settings_for_slice(settings: Settings, slice_type: str) -> Settings:
    """SETTINGS with the API that makes SLICE_TYPE when no --api was chosen: TPU7x, which
    the Cloud TPU API does not serve, goes through Compute Engine by itself."""
    return provider.api_for(settings, parse_slice(slice_type))


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
        runtime_version=options.runtime_version, elastic=options.elastic)
    wait_seconds = parse_duration(options.timeout, "--timeout")
    # '' is a name given, and no slice's: refused, never read as "the default name"
    name = names.validate_name(names.default_name(spec) if options.name is None else options.name,
                               spec.num_slices)
    return UpRequest(parent=settings.parent, name=name, spec=spec,
                     ssh_keys=ensure_ssh_key(settings.config_dir).metadata_entry, owner=names.owner(),
                     wait=options.wait, policy=WaitPolicy(timeout=wait_seconds),
                     labels=dict(options.labels), placement=placement,
                     named_for_owner=options.name is None,
                     # every slice carries the host watcher: runs may reach it without SSH
                     metadata=watcher_metadata(settings, options))


def watcher_metadata(settings: Settings, options: SliceOptions) -> dict[str, str]:
    """The watcher's startup-script and the slice's pin: the keys (this client's, then
    --trust-key's) whose signed pointers its watchers will accept, and the bucket (kept
    by each host at its first boot, never changed after: host/host_pin.py)."""
    trusted = tuple(pointer_sign.read_trusted_key(Path(path)) for path in options.trusted_keys)
    signer = pointer_sign.Signer.load(settings.config_dir)
    return {**boot_script.boot_metadata(), **pointer_sign.pin_metadata(signer, settings.bucket, trusted)}


async def up(session: Session, request: UpRequest, progress: Progress | None = None) -> UpResult:
    """Create (or reuse) the slice and wait until it is ready -> UpResult. On a network
    of the user's, or without external IPs, first check the network (cloud/firewall.py):
    no SSH rule, or no Private Google Access for internal IPs, is refused before anything
    is made; no rule between the hosts is a note (a run says it again, and refuses)."""
    placement = request.placement
    if placement.network or placement.subnetwork or placement.internal_ips:
        reader = compute_reader(session.settings, session.api)
        try:
            note = await firewall.check_up(
                reader, project=session.settings.project, region=session.settings.zone.rsplit("-", 1)[0],
                network=placement.network, subnetwork=placement.subnetwork,
                needs=firewall.Needs(hosts=request.spec.slice_type.hosts, slices=request.spec.num_slices,
                                     internal_ips=placement.internal_ips, tags=placement.tags))
        finally:
            reader.close()
        if note and progress:
            progress(f"note: {note}")
    return await cloud_up.up(session.api, request, progress=progress)


async def check_network_for_run(session: Session, info: SliceInfo, *, ssh: bool) -> None:
    """Before a run on INFO: InvalidValueError in one line, with the gcloud command, when
    the slice's VPC lacks what the run needs (SSH from here if SSH starts it; TCP between
    its hosts on JAX's coordinator port, and megascale's for several slices; Private
    Google Access without external IPs), rather than a run that hangs on billed chips."""
    if len(info.hosts) < 2 and not ssh and all(h.external_ip for h in info.hosts):
        return  # one host started by its watcher, with external IPs: nothing to judge
    where = await session.api.placement(session.settings.parent, info)
    reader = compute_reader(session.settings, session.api)
    try:
        await firewall.check_run(
            reader, project=session.settings.project, region=session.settings.zone.rsplit("-", 1)[0],
            network=where.network, subnetwork=where.subnetwork,
            needs=firewall.Needs(ssh=ssh, hosts=len(info.hosts) // max(1, info.num_slices),
                                 slices=info.num_slices, internal_ips=where.internal_ips, tags=where.tags))
    finally:
        reader.close()


async def ask_slice(session: Session, request: UpRequest) -> str | None:
    """`up` with no wait at all, for a caller that keeps its own state and looks again
    later (the queue's tick): ask for the slice once and return -> the node's create
    operation (None: a queued resource, which waits for capacity by itself). Nothing is
    looked up first and nothing undone, so it costs one call: REQUEST's labels are the
    slice's only mark (the caller's own), a name already taken raises AlreadyExistsError
    (the caller's next look adopts the slice), no capacity StockoutError, no quota
    QuotaExceededError."""
    creation = await session.api.create(cloud_up.create_request_of(request, request.labels))
    return creation.operation_name


async def creation_outcome(session: Session, operation: str) -> CreationOutcome | None:
    """How the node creation OPERATION (an `ask_slice` of an earlier process) ended;
    None if the API has forgotten it."""
    return await session.api.creation_outcome(operation)


@dataclass(frozen=True)
class Budget:
    """`podctl up --max-cost/--max-hours`: a budget written on the slice as labels."""

    max_cost: float | None = None
    max_hours: str | None = None  # 3.5, 90m, 6h
    price: float | None = None  # USD per chip-hour for max_cost (None: podctl.toml, the table)

    @property
    def given(self) -> bool:
        return self.max_cost is not None or self.max_hours is not None


async def budget_request(session: Session, request: UpRequest, budget: Budget) -> UpRequest:
    """REQUEST with BUDGET's labels (unchanged without one). A deadline is on the
    service's clock, as `budget check` reads it: this machine's may be hours off."""
    if not budget.given:
        return request
    now = await session.api.server_clock(session.settings.parent)
    return with_budget(request, session.settings.zone, max_cost=budget.max_cost,
                       max_hours=budget.max_hours, price=budget.price, now=now)


@dataclass(frozen=True)
class BudgetSet:
    said: str  # 'max $500, deadline 2026-12-03 18:00 UTC'
    on_existing: bool  # written now on a slice that `up` found already there


async def keep_budget(session: Session, request: UpRequest, result: UpResult,
                      budget: Budget) -> tuple[UpResult, BudgetSet | None]:
    """After `up`: a budget given is a budget kept, also on the slice that already
    existed (written on it now) -> the result (with the labelled slice) and what was set."""
    if budget.given and not result.created:
        labels = existing_budget_labels(result.info, max_cost=budget.max_cost,
                                        max_hours=budget.max_hours, price=budget.price,
                                        now=session.api.server_now())
        info = await set_on_existing(session.api, session.settings.parent, result.info, labels)
        return dataclasses.replace(result, info=info), BudgetSet(describe_labels(labels), True)
    said = describe_labels(request.labels)
    return result, BudgetSet(said, False) if result.created and said else None


async def ready_slice(session: Session, name: str) -> SliceInfo:
    info = await session.api.describe(session.settings.parent, name)
    if not info.ready:
        raise JobError(f"slice {name} is {info.state}, not ready; wait with `podctl up` "
                       f"(or see `podctl status {name}`).")
    return info


async def to_delete(session: Session, name: str) -> SliceInfo:
    """What `down NAME` deletes: NAME, or the queued resource that owns it (its nodes go
    with it). A caller that asks the user first shows this, then hands it to `down`."""
    parent = session.settings.parent
    info = await session.api.describe(parent, name)
    return await session.api.owning_slice(parent, info)


async def down(session: Session, name: str, *, wait: bool = True, timeout: str = DEFAULT_WAIT,
               progress: Progress | None = None, found: SliceInfo | None = None,
               notice: Notice | None = None, waiting: Waiting | None = None,
               by_owner: bool = True) -> SliceInfo:
    """Delete the slice NAME (the queued resource that owns it, if any); wait until gone.

    FOUND: what `to_delete` found (and the user was asked about), deleted as it is. NOTICE
    hears of each detached run that ended with the slice. WAITING, given what was deleted,
    opens the wait's PROGRESS (the CLI's spinner starts with the wait, not before).
    BY_OWNER False: the caller made the slice for a run whose record it keeps itself
    (the queue, with WAIT False and FOUND from its listing): no tombstone (no follower
    would make it again) and no run records closed here (the caller closes its own), so
    the delete costs one call."""
    wait_seconds = parse_duration(timeout, "--timeout")  # refused before anything is deleted
    parent = session.settings.parent
    info = found or await to_delete(session, name)
    deleted = await session.api.delete(parent, info)
    if by_owner:
        _tombstone(session, info)
    if by_owner and session.settings.bucket:  # a detached run on it is over
        try:
            storage: Storage | None = session.storage
        except PodctlError:
            storage = None  # the delete stands; the records stay as they were
        for run_id in await close_runs_of_deleted(session.settings, storage, info) if storage else []:
            if notice is not None:
                notice(f"run {run_id} ended with its slice (slice deleted)")
    if wait:
        with waiting(deleted) if waiting is not None else contextlib.nullcontext(progress) as shown:
            await session.api.wait_deleted(parent, deleted.name, kind=deleted.kind,
                                           policy=WaitPolicy(timeout=wait_seconds), progress=shown)
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
    return await session.api.describe(session.settings.parent, name)


LIST_PAGE_SIZE = 1000  # the Cloud TPU API's largest page


async def slices_in(session: Session, parent: str) -> list[SliceInfo]:
    """Every slice in PARENT (projects/P/locations/Z): one list of nodes and one of
    queued resources, LIST_PAGE_SIZE to a page (the queue's tick: once per zone)."""
    return await session.api.list_slices(parent, LIST_PAGE_SIZE)


@dataclass(frozen=True)
class SliceStatus:
    """`podctl status NAME`: the slice, and its nodes' upcoming maintenance."""

    info: SliceInfo
    maintenance: dict[str, dict[str, Any]]  # node -> its upcomingMaintenance (v2alpha1), as --json shows it
    # node -> per worker, its watcher's word (jobs/channels/boot.watcher_states); {}: no watchers
    watchers: dict[str, list[str]] = field(default_factory=dict)

    def watchers_said(self) -> str | None:
        """'2/2 ready', or '1/2 ready (dead on worker 1: last beat 63 s ago)', '62/64 ready
        (booting on workers 3, 40)'; a last pointer a ready watcher refused (one the slice's
        pin does not accept: someone else's), said after: '2/2 ready; pointer refused on
        workers 0, 1: RUN refused WHY'. None without watchers."""
        if not self.watchers:
            return None
        states = [(node, w, s) for node, each in sorted(self.watchers.items()) for w, s in enumerate(each)]
        ready = sum(1 for _, _, s in states if s.startswith("ready"))
        said = f"{ready}/{len(states)} ready"
        by_kind: dict[str, list[str]] = {}
        refused: dict[str, list[str]] = {}  # a refusal's words -> where
        for node, w, s in states:
            where = f"{node} worker {w}" if len(self.watchers) > 1 else f"worker {w}"
            if not s.startswith("ready"):
                kind, _, detail = s.replace(", ", ": ", 1).partition(": ")
                by_kind.setdefault(kind, []).append(where + (f": {detail}" if detail else ""))
            elif " refused " in s:
                refused.setdefault(s.partition(", ")[2], []).append(where)
        if by_kind:
            said += " (" + "; ".join(f"{kind} on {', '.join(where[:4])}{' ...' if len(where) > 4 else ''}"
                                     for kind, where in sorted(by_kind.items())) + ")"
        for words, places in sorted(refused.items()):
            said += f"; pointer refused on {', '.join(places[:4])}{' ...' if len(places) > 4 else ''}: {words}"
        return said

    def maintenance_said(self) -> dict[str, str]:
        """Node -> its maintenance in words ('PENDING SCHEDULED 2026-12-03T17:00:00Z to ...')."""
        return {node: maintenance_info.describe(plan) for node, plan in self.maintenance.items()}


async def slice_status(session: Session, name: str) -> SliceStatus:
    info = await describe_slice(session, name)
    # an extra of the provider's (Cloud TPU: v2alpha1 only): any failure is no maintenance shown
    return SliceStatus(info, await session.api.upcoming_maintenance(info),
                       await boot_channel.watcher_states(session.api, session.settings.parent, info))
