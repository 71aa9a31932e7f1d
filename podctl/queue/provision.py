"""The provisioning side effects of a tick: ask for an entry's slice, learn how a
vanished node's creation ended, delete a slice. None of them waits for anything; each
goes through the slice steps (steps/slices.py), as `podctl up` and `down` do."""

from __future__ import annotations

from podctl import steps
from podctl.base.errors import NotFoundError
from podctl.queue import entry_names
from podctl.queue.entry import Entry
from podctl.steps import CreationOutcome, SliceInfo
from podctl.steps.session import Session


def parent_of(entry: Entry) -> str:
    return f"projects/{entry.project}/locations/{entry.zone}"


def options_of(entry: Entry, token: str) -> steps.SliceOptions:
    """on-demand: a plain node (a stockout fails its creation; the entry backs off);
    spot and queued: a queued resource, which waits for capacity by itself; K slices: a
    queued resource, or with --elastic K of them (one per slice), as `up --elastic` makes
    them. Named in the entry already, labelled as the queue's (the labels are how a tick
    knows its own)."""
    return steps.SliceOptions(
        slice_type=entry.accelerator_type, name=entry.slice_name, queued=entry.tier != "on-demand",
        num_slices=entry.num_slices, elastic=entry.elastic,
        spot=entry.tier == "spot", valid_for=None if entry.valid_for is None else str(entry.valid_for),
        wait=False, labels=entry_names.labels(token, entry.id))


async def ask(session: Session, entry: Entry, token: str) -> str | None:
    """Create the entry's slice (SESSION at the entry's project and zone); the node's
    create operation name, or None for a queued resource. Raises AlreadyExistsError when
    a slice of that name exists (the caller adopts it), StockoutError, QuotaExceededError."""
    return await steps.ask_slice(session, steps.up_request(session.settings, options_of(entry, token)))


async def creation_outcome(session: Session, operation: str) -> CreationOutcome | None:
    """How the node creation OPERATION ended; None if the API has forgotten it."""
    return await steps.creation_outcome(session, operation)


async def delete(session: Session, info: SliceInfo) -> None:
    """Start deleting INFO (a queued resource with force); a DELETING one is left be.
    The entry's run record is the machine's to close, so the step closes none."""
    try:
        await steps.down(session, info.name, wait=False, found=info, by_owner=False)
    except NotFoundError:
        pass  # gone already
