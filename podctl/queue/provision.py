"""The provisioning side effects of a tick: ask for an entry's slice, learn how a
vanished node's creation ended, delete a slice. None of them waits for anything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podctl.cloud import create, terminate
from podctl.cloud.types import SliceInfo, SliceSpec
from podctl.errors import NotFoundError
from podctl.queue import names
from podctl.queue.store import Entry

STOCKOUT_CODE = 8  # google.rpc.Code.RESOURCE_EXHAUSTED: "no more capacity in the zone"


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


async def ask(api: Any, entry: Entry, token: str, ssh_keys: str) -> str | None:
    """Create the entry's slice (named in the entry already); the node's create
    operation name, or None for a queued resource. Raises AlreadyExistsError when a
    slice of that name exists (the caller adopts it), StockoutError, QuotaExceededError."""
    request = create.CreateRequest(parent=parent_of(entry), name=entry.slice_name or "",
                                   spec=spec_of(entry), labels=names.labels(token, entry.id),
                                   ssh_keys=ssh_keys)
    creation = await create.create(api, request)
    return creation.operation.name if creation.kind == "node" else None


@dataclass(frozen=True)
class Creation:
    done: bool
    stockout: bool = False
    error: str | None = None


async def creation_outcome(api: Any, operation: str) -> Creation | None:
    """How the node creation OPERATION ended; None if the API has forgotten it."""
    try:
        op = await api.get_operation(operation)
    except NotFoundError:
        return None
    if not op.done:
        return Creation(done=False)
    if op.error is not None:
        code = op.error.get("code")
        return Creation(done=True, stockout=code == STOCKOUT_CODE,
                        error=f"code {code}: {op.error.get('message', '')}")
    return Creation(done=True)


async def delete(api: Any, entry: Entry, info: SliceInfo) -> None:
    """Start deleting INFO (a queued resource with force); a DELETING one is left be."""
    try:
        await terminate.delete(api, parent_of(entry), info)
    except NotFoundError:
        pass  # gone already
