"""`podctl gc`: collect the zone's leftovers that hold quota (what is one, and what
still owns one, is podctl/policy/gc.py's); `queue tick`: reap_queue_leftovers, the queue's own.

    found = await collect(session, dry_run=False, queue=QueueOwners(token, entries))

What still owns a slice: this machine's run queue (QUEUE, read by the caller: the steps
do not reach up into podctl/queue), a run going on it (the session's bucket; none set:
a dead slice is kept, as nothing can tell). A run on a slice about to be deleted ends
as `lost` first, so a `--recover` follower reads why its slice went.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from podctl.cloud.types import SliceInfo
from podctl.policy import gc
from podctl.steps.session import Session

Notice = Callable[[str], None]


@dataclass(frozen=True)
class QueueOwners:
    """The run queue (this machine's, or the team's in PostgreSQL): its token and its entries
    (podctl.queue.entry.Entry)."""

    token: str
    entries: Iterable[gc.QueueEntry]


async def collect(session: Session, *, dry_run: bool = False, queue: QueueOwners | None = None,
                  notice: Notice = lambda text: None) -> list[gc.Leftover]:
    """The leftovers in the session's zone, podctl's own that nothing owns deleted (not
    with DRY_RUN); NOTICE hears of each run that ended with its slice."""
    api, settings = session.api, session.settings
    queue_keep = gc.queue_keeper(queue.token, queue.entries) if queue is not None else None
    storage = session.storage_for(settings.bucket) if settings.bucket else None

    async def no_bucket(info: SliceInfo) -> str | None:
        if gc.dead_reason(info, api.server_now()) is None:
            return "no bucket (--bucket, PODCTL_BUCKET) to see whether a run goes on it"
        return None

    runs_keep = gc.run_keeper(storage, clock=api.server_now) if storage is not None else no_bucket

    async def close_runs(deleting: list[SliceInfo]) -> None:
        # before the delete: a `--recover` follower then reads why its slice went
        if storage is not None:
            for run_id in await gc.close_runs(storage, deleting):
                notice(f"run {run_id} ended with its slice (collected)")

    return await gc.collect(api, settings.parent, dry_run=dry_run,
                            keep=gc.all_of(queue_keep, runs_keep), before_delete=close_runs)


async def reap_queue_leftovers(session: Session, queue: QueueOwners,
                               listed: dict[str, dict[str, SliceInfo]],
                               log: gc.EventLog) -> list[gc.Leftover]:
    """`queue tick`: delete the dead slices labelled with QUEUE's token that none of its
    entries owns any more, among those the tick listed anyway (LISTED: parent -> name ->
    slice, at any of the entries' zones: one provider serves them all); never waits."""
    return await gc.reap_queue_leftovers(session.api, queue.token, queue.entries, listed, log)
