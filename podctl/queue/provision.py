"""The provisioning side effects of a tick: ask for an entry's slice, learn how a
vanished node's creation ended, delete a slice. None of them waits for anything."""

from __future__ import annotations

from podctl.cloud import create, terminate
from podctl.cloud.api import TpuApi
from podctl.cloud.create import CreationOutcome
from podctl.cloud.types import SliceInfo, SliceSpec
from podctl.errors import NotFoundError
from podctl.queue import names
from podctl.queue.store import Entry

def parent_of(entry: Entry) -> str:
    return f"projects/{entry.project}/locations/{entry.zone}"


def spec_of(entry: Entry) -> SliceSpec:
    """on-demand: a plain node (a stockout fails its creation; the entry backs off);
    spot and queued: a queued resource, which waits for capacity by itself."""
    if entry.tier == "on-demand":
        return SliceSpec.build(entry.accelerator_type)
    return SliceSpec.build(entry.accelerator_type, queued=True,
                           tier="spot" if entry.tier == "spot" else "on-demand",
                           valid_for_seconds=entry.valid_for)


async def ask(api: TpuApi, entry: Entry, token: str, ssh_keys: str) -> str | None:
    """Create the entry's slice (named in the entry already); the node's create
    operation name, or None for a queued resource. Raises AlreadyExistsError when a
    slice of that name exists (the caller adopts it), StockoutError, QuotaExceededError."""
    request = create.CreateRequest(parent=parent_of(entry), name=entry.slice_name or "",
                                   spec=spec_of(entry), labels=names.labels(token, entry.id),
                                   ssh_keys=ssh_keys)
    creation = await create.create(api, request)
    return creation.operation.name if creation.kind == "node" else None


async def creation_outcome(api: TpuApi, operation: str) -> CreationOutcome | None:
    """How the node creation OPERATION ended; None if the API has forgotten it."""
    return await create.creation_outcome(api, operation)


async def delete(api: TpuApi, entry: Entry, info: SliceInfo) -> None:
    """Start deleting INFO (a queued resource with force); a DELETING one is left be."""
    try:
        await terminate.delete(api, parent_of(entry), info)
    except NotFoundError:
        pass  # gone already
