"""`podctl gc`: delete what podctl made that no longer serves anyone but still holds
the project's quota; list, never touch, such leftovers that podctl did not make.

A leftover is, in one zone:

- a queued resource that is FAILED (its validity window closed before capacity came,
  as Cloud TPU decides on its own clock, or the request was bad) or SUSPENDED (its nodes
  were preempted): Cloud TPU keeps each until it is deleted, and quota with it
  (https://cloud.google.com/tpu/docs/queued-resources: "The request remains in the
  queue until it is explicitly deleted");
- a node (or a queued resource's node) that is PREEMPTED or TERMINATED: it keeps its
  quota until deleted;
- a podctl slice whose budget (`--max-cost`, `--max-hours`: podctl/money/budget.py) ran out
  and on which no run is going any more.

podctl's own (the `podctl-managed=true` label) are deleted unless something still owns
them: a run recorded as going on that very slice whose hosts beat within
HOST_LOST_SECONDS (or whose record was written that recently: a run still starting),
both on the service's clock, never this machine's (so a preempted host finishing its
checkpoint, or a `run --recover` about to take the slice over, is left alone, and a
run killed while it started does not hold its slice forever), or an entry of this
machine's run queue (`podctl queue tick` deletes those itself). A run on a slice gc
deletes is closed first as `lost`, noting that gc collected its slice and in what
state: a `--recover` follower that slept through it reads that as the preemption it
was, not as its owner's delete. Steps over podctl/cloud's
list/delete/wait; `queue tick` and `budget check` call `survey` with a filter for
their own slices.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from podctl.base.errors import NotFoundError, PodctlError
from podctl.base.failures import dead_state
from podctl.base.vocabulary import HOST_LOST_SECONDS, LIVE_RUN_STATES
from podctl.cloud.names import QUEUE_LABEL
from podctl.cloud.provider import SliceProvider
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo
from podctl.cloud.wait import WaitPolicy
from podctl.host import run_layout
from podctl.jobs import run_record
from podctl.jobs.run_files import close_record, list_runs
from podctl.money import budget

Action = Literal["delete", "keep", "leave"]
Keep = Callable[[SliceInfo], Awaitable["str | None"]]  # why INFO must stay, or None
Notice = Callable[[str], None]

# ORPHANED: a Compute Engine slice's template (and policy) whose MIG an `up` never made
# (or a flex-start MIG whose resize request it never made: no VM can come of it)
DEAD_NODE_STATES = {"PREEMPTED", "TERMINATED", "ORPHANED"}


@dataclass(frozen=True)
class Leftover:
    """One slice that serves no one, and what gc does with it."""

    info: SliceInfo
    reason: str  # why it serves no one
    action: Action  # delete: podctl's; keep: podctl's but owned; leave: not podctl's
    note: str | None = None  # why it is kept or left
    deleted: bool = False
    error: str | None = None  # the delete was refused

    def to_json(self) -> dict[str, Any]:
        return {"name": self.info.name, "kind": self.info.kind, "state": self.info.state,
                "managed": self.info.managed, "reason": self.reason, "action": self.action,
                "note": self.note, "deleted": self.deleted, "error": self.error,
                "chips": self.info.chips, "labels": dict(self.info.labels)}


def dead_reason(info: SliceInfo, now: float) -> str | None:
    """Why INFO can run nothing any more yet still holds quota; None if it can (or is
    already being deleted). A queued resource past its validUntil is the service's to
    call expired (it turns FAILED): this client's clock may be hours off."""
    if info.state == "DELETING":
        return None
    if info.kind == "queued-resource":
        if info.state == "FAILED":
            return "FAILED" + (f" ({info.error})" if info.error else "")
        if info.state == "SUSPENDED":
            return "SUSPENDED (its nodes were preempted)"
    states = {info.state} if info.kind == "node" else {n.state for n in info.nodes}
    dead = sorted(states & DEAD_NODE_STATES)
    if dead:
        return dead[0] if info.kind == "node" else f"{info.state}, its nodes {'/'.join(dead)}"
    return None


def leftover_reason(info: SliceInfo, now: float) -> str | None:
    """Why INFO is a leftover: dead, or (podctl's) over its budget; None if it is not."""
    dead = dead_reason(info, now)
    if dead is not None:
        return dead
    if info.state == "DELETING":
        return None
    over = budget.overdue(info, now)
    return f"budget reached ({over})" if over else None


async def survey(slices: Iterable[SliceInfo], *, now: float | None = None,
                 select: Callable[[SliceInfo], bool] | None = None,
                 keep: Keep | None = None) -> list[Leftover]:
    """The leftovers among SLICES (those SELECT picks), each with what gc does with it."""
    now = time.time() if now is None else now
    found = []
    for info in slices:
        if select is not None and not select(info):
            continue
        reason = leftover_reason(info, now)
        if reason is None:
            continue
        if not info.managed:
            found.append(Leftover(info, reason, "leave", "not created by podctl: listed, not touched"))
            continue
        note = await keep(info) if keep is not None else None
        found.append(Leftover(info, reason, "keep" if note else "delete", note))
    return sorted(found, key=lambda item: item.info.name)


async def reap(api: SliceProvider, parent: str, leftovers: list[Leftover], *, dry_run: bool = False,
               wait: bool = True, policy: WaitPolicy = WaitPolicy(),
               notice: Notice = lambda text: None) -> list[Leftover]:
    """Delete the leftovers marked `delete` (all at once, then wait until every one is
    gone unless WAIT is false); one that cannot be deleted is reported, not raised."""
    if dry_run:
        return leftovers
    done: list[Leftover] = []
    deleting: list[SliceInfo] = []
    for item in leftovers:
        if item.action != "delete":
            done.append(item)
            continue
        try:
            deleting.append(await api.delete(parent, item.info))
        except NotFoundError:  # gone already: what gc wanted
            pass
        except PodctlError as e:
            done.append(dataclasses.replace(item, error=str(e)))
            continue
        notice(f"deleting {item.info.kind} {item.info.name}: {item.reason}")
        done.append(dataclasses.replace(item, deleted=True))
    if wait and deleting:
        await asyncio.gather(*(api.wait_deleted(parent, d.name, kind=d.kind, policy=policy)
                               for d in deleting))
    return done


async def collect(api: SliceProvider, parent: str, *, now: float | None = None, dry_run: bool = False,
                  select: Callable[[SliceInfo], bool] | None = None, keep: Keep | None = None,
                  wait: bool = True, policy: WaitPolicy = WaitPolicy(),
                  notice: Notice = lambda text: None,
                  before_delete: Callable[[list[SliceInfo]], Awaitable[Any]] | None = None,
                  ) -> list[Leftover]:
    """List PARENT's slices once, find the leftovers, delete podctl's that nothing owns
    (BEFORE_DELETE, given the slices about to go, first: close_runs). NOW (default: the
    service's clock, `SliceProvider.server_now`) judges budgets' deadlines."""
    slices = await api.list_slices(parent)
    now = api.server_now() if now is None else now
    found = await survey(slices, now=now, select=select, keep=keep)
    if before_delete is not None and not dry_run:
        await before_delete([item.info for item in found if item.action == "delete"])
    return await reap(api, parent, found, dry_run=dry_run, wait=wait, policy=policy, notice=notice)


# ---- what still owns a slice ----------------------------------------------------------

def all_of(*keepers: Keep | None) -> Keep:
    """The first keeper's reason to keep a slice."""
    async def keep(info: SliceInfo) -> str | None:
        for keeper in keepers:
            note = await keeper(info) if keeper is not None else None
            if note:
                return note
        return None
    return keep


class QueueEntry(Protocol):
    """What gc reads of a queue entry (podctl.queue.entry.Entry, a layer above)."""

    @property
    def id(self) -> int: ...
    @property
    def slice_name(self) -> str | None: ...
    @property
    def attempts(self) -> list[dict[str, Any]]: ...
    @property
    def terminal(self) -> bool: ...


class EventLog(Protocol):
    """The queue's structured log (podctl.queue.log: structlog): one event, its fields."""

    def info(self, event: str, **fields: Any) -> Any: ...


def queue_keeper(token: str, entries: Iterable[QueueEntry]) -> Keep:
    """Slices that entries of the queue TOKEN still own: an entry's current slice, and
    an ended attempt's slice that the queue has not yet seen gone (it deletes them)."""
    owned: dict[str, int] = {}
    for e in entries:
        for attempt in e.attempts:
            if attempt.get("slice") and not attempt.get("cleaned"):
                owned[attempt["slice"]] = e.id
        if not e.terminal and e.slice_name:
            owned[e.slice_name] = e.id

    async def keep(info: SliceInfo) -> str | None:
        if info.labels.get(QUEUE_LABEL) == token and info.name in owned:
            return f"queue entry {owned[info.name]} owns it (`podctl queue tick` deletes it)"
        return None
    return keep


def run_keeper(storage: Storage, *, now: float | None = None,
               clock: Callable[[], float] = time.time) -> Keep:
    """Slices a run is going on: a run recorded as going on that very slice whose
    hosts' agents beat within HOST_LOST_SECONDS, or whose record was written that
    recently (still starting), both GCS's times, set against CLOCK (the service's,
    `SliceProvider.server_now`, where the caller has one; or NOW): a client clock hours off
    cannot make a live run look dead, and a run killed while it started does not hold
    its slice forever. The runs are listed once, at the first slice asked about."""
    going: list[Any] | None = None

    async def last_spoke(run_id: str) -> float | None:
        beats = [obj.updated for obj in await storage.list(run_layout.heartbeat_prefix(run_id))]
        written = [obj.updated for obj in await storage.list(run_layout.record_object(run_id))]
        return max(beats + written, default=None)

    async def keep(info: SliceInfo) -> str | None:
        nonlocal going, now
        if going is None:
            going = [r for r in await list_runs(storage) if r.state in LIVE_RUN_STATES]
        now = clock() if now is None else now
        for record in going:
            if not run_record.on_slice(record, info.name, info.created):
                continue
            spoke = await last_spoke(record.run_id) or record.created
            silent = now - spoke
            if silent >= HOST_LOST_SECONDS:
                continue  # its hosts (or its starter) went quiet: nothing runs there
            if dead_reason(info, now) is None:
                return f"run {record.run_id} is going on it"
            return (f"run {record.run_id} was alive {max(0.0, silent):.0f} s ago (a checkpoint in "
                    "its notice period, or a `--recover`): try again in a few minutes")
        return None
    return keep


async def close_runs(storage: Storage, deleted: Iterable[SliceInfo]) -> list[str]:
    """Runs still recorded as going on slices gc deletes end as `lost`, with why and the
    slice's state when gc collected it (`collected`: a `--recover` follower reads it, so
    a preempted slice collected while it slept is recovered, not taken for a delete)."""
    deleted = list(deleted)
    closed = []
    for record in await list_runs(storage):
        if record.state not in LIVE_RUN_STATES:
            continue
        for info in deleted:
            if run_record.on_slice(record, info.name, info.created):
                state = dead_state(info) or info.state
                await close_record(storage, record.run_id, "lost", keep_exit_code=True,
                                   reason=f"slice {state}, collected by podctl gc",
                                   collected={"state": state, "by": "podctl gc"})
                closed.append(record.run_id)
                break
    return closed


# ---- for `queue tick` and `budget check`: their own slices only -------------------------

async def reap_queue_leftovers(api: SliceProvider, token: str, entries: Iterable[QueueEntry],
                               listed: dict[str, dict[str, SliceInfo]], log: EventLog) -> list[Leftover]:
    """`queue tick`: delete the dead slices labelled with this queue's TOKEN that no entry
    owns any more, among those the tick listed anyway (LISTED: parent -> name -> slice;
    no extra API call). Never waits, as nothing in a tick does."""
    keep = queue_keeper(token, list(entries))
    done: list[Leftover] = []
    for parent, slices in sorted(listed.items()):
        found = await survey(slices.values(), keep=keep,
                             select=lambda info: info.labels.get(QUEUE_LABEL) == token)
        for item in await reap(api, parent, found, wait=False):
            log.info("gc", slice=item.info.name, reason=item.reason, action=item.action,
                     deleted=item.deleted, **({"error": item.error} if item.error else {}))
            done.append(item)
    return done


async def reap_budgeted(api: SliceProvider, parent: str, slices: Iterable[SliceInfo], *, now: float,
                        dry_run: bool, keep: Keep | None, notice: Notice,
                        policy: WaitPolicy) -> list[Any]:
    """`budget check`: the dead slices among SLICES that carry a podctl budget (they are
    budget check's own) -> budget.Reaped, deleted unless KEEP says a run still owns one."""
    found = await survey(slices, now=now, keep=keep,
                         select=lambda info: info.managed and budget.slice_budget(info) is not None)
    found = [item for item in found if dead_reason(item.info, now) is not None]
    done = await reap(api, parent, found, dry_run=dry_run, policy=policy, notice=notice)
    return [budget.Reaped(item.info, item.reason, deleted=item.deleted) for item in done
            if item.action == "delete" and not item.error]
