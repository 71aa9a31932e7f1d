"""A node's metadata, one key at a time, and what its hosts publish (guest attributes).

Cloud TPU's Node.metadata is a plain map with no fingerprint, and the v2 API documents
no per-key update mask: a change is one nodes.patch with updateMask=metadata and the
whole map, as last read, with one key set or removed, then a wait for its operation.
That is what gcloud's `tpu-vm ssh` does to add its key (googlecloudsdk
command_lib/compute/tpus/tpu_vm: UpdateMetadataKey, UpdateNode). A patch sent while
another update of the node is in flight is refused with 409 (gcloud's
HttpConflictError): the node is read again and the patch retried, with backoff, for at
most CONFLICT_SECONDS. Within one process the writes to a node take turns (a lock per
node), so that two of podctl's own never drop each other's key.

Whoever may read the node (tpu.nodes.get) reads its metadata: never put a secret there.
"""

from __future__ import annotations

import asyncio
import random
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from podctl.base.errors import AlreadyExistsError, CloudError, InvalidValueError, PodctlError
from podctl.cloud.operations import Operation
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.translate import METADATA_LIMITS, translate_metadata_update
from podctl.cloud.types import GuestEntry
from podctl.cloud.wait import Clock, WaitPolicy, wait_until

CONFLICT_SECONDS = 60.0  # how long a patch is retried while other updates of the node run
_BACKOFF = (1.0, 8.0)  # the first wait after a 409, and the longest
# How long a patch's operation is waited for. The service's own time for it is not
# documented (gcloud waits with no deadline, saying "Propagating SSH public key to all
# TPU workers"); five minutes is far past anything a metadata change should take.
UPDATE_WAIT = WaitPolicy(initial=0.5, maximum=5.0, jitter=0.5, timeout=300.0)

# Compute Engine's limits on metadata (Metadata.items), assumed on the TPU API too.
_KEY = re.compile(r"[a-zA-Z0-9_-]+")
KEY_BYTES = 128  # a key is shorter than this
VALUE_BYTES = 262144  # a value is at most this
TOTAL_BYTES = 512 * 1024  # keys and values together are shorter than this



@dataclass
class _Turns:
    """This process's writes to one node take turns; a patch not waited for (wait=False)
    is waited for by the next write, which must read the map it leaves."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    pending: Operation | None = None


# Per event loop (an asyncio.Lock belongs to one), per node name.
_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Turns]] = (
    weakref.WeakKeyDictionary())


def check_metadata(metadata: Mapping[str, str], node: str) -> None:
    """Refuse, before any call, a map past the metadata limits (InvalidValueError, one line
    naming NODE, a short node id)."""
    total = 0
    for key, value in metadata.items():
        size = len(key.encode())
        if not _KEY.fullmatch(key) or size >= KEY_BYTES:
            raise InvalidValueError(f"metadata key {key[:140]!r} of node {node} is refused: "
                                    f"{METADATA_LIMITS}.")
        value_size = len(value.encode())
        if value_size > VALUE_BYTES:
            raise InvalidValueError(f"metadata value of {key!r} on node {node} is {value_size} bytes, "
                                    f"past the limit: {METADATA_LIMITS}.")
        total += size + value_size
    if total >= TOTAL_BYTES:
        raise InvalidValueError(f"the metadata of node {node} would be {total} bytes, past the limit: "
                                f"{METADATA_LIMITS}.")


async def set_key(api: TpuApi, node_name: str, key: str, value: str, *,
                  current: Mapping[str, str] | None = None, wait: bool = True,
                  policy: WaitPolicy = UPDATE_WAIT, clock: Clock = Clock()) -> dict[str, str]:
    """Set KEY=VALUE in the metadata of NODE_NAME (projects/P/locations/Z/nodes/N) and keep
    every other key: one nodes.patch of CURRENT (the map as last read, e.g. NodeInfo.metadata;
    read with nodes.get when None) plus KEY, then (WAIT) its operation waited for. Returns
    the map written. No call when the map already holds KEY=VALUE."""
    return await _update(api, node_name, lambda m: {**m, key: value}, current,
                         f"setting {key} on node {_short(node_name)}", wait, policy, clock)


async def remove_key(api: TpuApi, node_name: str, key: str, *,
                     current: Mapping[str, str] | None = None, wait: bool = True,
                     policy: WaitPolicy = UPDATE_WAIT, clock: Clock = Clock()) -> dict[str, str]:
    """Remove KEY from the metadata of NODE_NAME, as set_key sets one; no call when the map
    has no KEY. Returns the map written."""
    return await _update(api, node_name, lambda m: {k: v for k, v in m.items() if k != key}, current,
                         f"removing {key} from node {_short(node_name)}", wait, policy, clock)


async def guest_attributes(api: TpuApi, node_name: str, query_path: str = "", *,
                           workers: int | None = None) -> list[list[GuestEntry]]:
    """What each host of NODE_NAME published under QUERY_PATH ("NAMESPACE/" or
    "NAMESPACE/KEY"), one list per worker in worker order (TpuApi.get_guest_attributes).

    The answer's entries name no worker: Google documents one per worker, but an answer
    that leaves out the workers with nothing under QUERY_PATH (as the fake's does) cannot
    say whose is whose. With WORKERS (the node's host count), such an answer (fewer lists
    than workers) is asked again worker by worker, one call each, so that list i is always
    worker i's."""
    got = await api.get_guest_attributes(node_name, query_path)
    if workers is None or len(got) == workers:
        return got
    each = await asyncio.gather(*(api.get_guest_attributes(node_name, query_path, worker_ids=[w])
                                  for w in range(workers)))
    return [answer[0] if answer else [] for answer in each]


def _short(node_name: str) -> str:
    return node_name.rsplit("/", 1)[-1]


def _turns_of(node_name: str) -> _Turns:
    per_loop = _turns.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(node_name, _Turns())


async def _update(api: TpuApi, node_name: str, change: Callable[[dict[str, str]], dict[str, str]],
                  current: Mapping[str, str] | None, what: str, wait: bool, policy: WaitPolicy,
                  clock: Clock) -> dict[str, str]:
    turns = _turns_of(node_name)
    if turns.lock.locked() or turns.pending is not None:
        current = None  # another write of this process goes first: CURRENT will be stale
    async with turns.lock:
        if turns.pending is not None:
            pending, turns.pending = turns.pending, None
            try:
                await _finished(api, pending, node_name, what, policy, clock)
            except PodctlError:
                pass  # that write's failure was not this one's; the map is read again below
        deadline = clock.now() + CONFLICT_SECONDS
        delay = _BACKOFF[0]
        read = dict(current) if current is not None else None
        while True:
            if read is None:
                read = dict((await api.get_node(node_name)).metadata)
            wanted = change(read)
            if wanted == read:
                return wanted
            check_metadata(wanted, _short(node_name))
            try:
                operation = await api.update_node_metadata(node_name, wanted)
                if wait:
                    await _finished(api, operation, node_name, what, policy, clock)
                elif not operation.done:
                    turns.pending = operation
                return wanted
            except AlreadyExistsError as e:  # 409: another update of the node is in flight
                left = deadline - clock.now()
                if left <= 0:
                    raise CloudError(
                        f"gave up {what} after {CONFLICT_SECONDS:g} s: another update of the node "
                        "(another podctl, or gcloud adding an SSH key) was still in flight; try "
                        "again in a minute.") from e
                await clock.sleep(min(delay * (0.5 + random.random() / 2), left))
                delay = min(delay * 2, _BACKOFF[1])
                read = None  # the other update may have changed the map: read it again


async def _finished(api: TpuApi, operation: Operation, node_name: str, what: str,
                    policy: WaitPolicy, clock: Clock) -> Operation:
    """OPERATION polled until done; its error translated as the patch's own would be."""
    current = operation

    async def done() -> Operation | None:
        nonlocal current
        current = await api.poll(current)
        if not current.done:
            return None
        error = current.exception()
        if error is not None:
            raise translate_metadata_update(error, what, node_name) from error
        return current

    if current.done:
        finished = await done()
        if finished is not None:
            return finished
    return await wait_until(done, what=what, policy=policy, clock=clock)
