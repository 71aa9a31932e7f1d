"""TpuApi: the narrow async face of google-cloud-tpu's TpuClient (REST transport).

Every call runs the blocking client in a worker thread, is counted (so tests and
benchmarks can show that waiting does not hammer the API), is retried with
capped exponential backoff and jitter when its error can pass (429 rate limit,
503, a reset connection), and has its errors translated to podctl's. The
client's own retries are switched off (`retry=None`) so that this is the only
retry policy and every HTTP request is counted once.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import requests

from podctl.base.errors import ConfigError, PodctlError, TransientError
from podctl.base.retry import RetryPolicy as RetryPolicy  # base/retry.py owns it; re-exported for connect.py
from podctl.cloud import operations
from podctl.cloud.convert import guest_entries
from podctl.cloud.operations import Operation
from podctl.cloud.translate import translate, translate_metadata_update
from podctl.cloud.types import GuestEntry

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2

T = TypeVar("T")
CALL_TIMEOUT = 60.0  # seconds for one create or delete request


def clock_offset(date_header: str | None, local: float) -> float | None:
    """The seconds to add to LOCAL (this machine's time.time()) for the time an HTTP
    Date header says (RFC 7231, to the second), or None without a readable one. Within
    a second of agreement the offset is taken as 0: the header cannot tell better."""
    if not date_header:
        return None
    try:
        said = email.utils.parsedate_to_datetime(date_header).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    offset = said - local
    return 0.0 if abs(offset) < 1.5 else offset


class TpuApi:
    def __init__(self, client: tpu_v2.TpuClient | Callable[[], tpu_v2.TpuClient], *, endpoint: str,
                 retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], Any] = asyncio.sleep,
                 override: str | None = None):
        # CLIENT or its maker, called at the first request: a command that opens a session
        # but only reads GCS (`podctl runs`, `logs`) never imports google.cloud.tpu_v2 (lazy_tpu.py)
        self._client: tpu_v2.TpuClient | None = None
        self._make_client = client if callable(client) else None
        self.endpoint = endpoint
        # Where ENDPOINT came from when a user moved it (e.g. "CLOUDSDK_API_ENDPOINT_OVERRIDES_TPU"):
        # one that does not answer is then their setting to fix, not an outage to wait out.
        self.override = override
        self.retry = retry
        self._sleep = sleep
        self.calls: Counter[str] = Counter()  # by method, each HTTP request once
        # The service's clock, from the Date header of its answers: budgets and expiry are
        # judged on it, since a client's clock can be hours off (`server_now`).
        self._clock_offset: float | None = None
        if not callable(client):
            self._adopt(client)

    @property
    def client(self) -> tpu_v2.TpuClient:
        if self._client is None:
            assert self._make_client is not None  # one of the two is always set
            self._adopt(self._make_client())
        assert self._client is not None
        return self._client

    def _adopt(self, client: tpu_v2.TpuClient) -> None:
        self._client = client
        session = getattr(client.transport, "_session", None)
        if session is not None and hasattr(session, "hooks"):
            session.hooks.setdefault("response", []).append(self._saw_date)

    def _saw_date(self, response: Any, *args: Any, **kwargs: Any) -> None:
        """A requests response hook: the offset of the service's clock from ours."""
        offset = clock_offset(response.headers.get("Date"), time.time())
        if offset is not None:
            self._clock_offset = offset

    async def server_clock(self, parent: str) -> float:
        """`server_now`, after one light call (a page of one node in PARENT) when the
        service has not answered this client yet."""
        if self._clock_offset is None:
            await self._call("nodes.list", f"listing nodes in {parent}", self.client.list_nodes,
                             request=tpu_v2.ListNodesRequest(parent=parent, page_size=1), retry=None)
        return self.server_now()

    def server_now(self) -> float:
        """Now on the service's clock (to the second), as of its last answer; this machine's
        clock until it has answered once. Every time podctl compares with a slice's
        createTime, a budget's deadline or a validUntil is read on this clock."""
        return time.time() + (self._clock_offset or 0.0)

    def close(self) -> None:
        """Close the HTTP sessions: the API's and the one its operations client made."""
        if self._client is None:  # never made: nothing to close
            return
        transport = self._client.transport
        operations = getattr(transport, "_operations_client", None)
        transport.close()
        session = getattr(getattr(operations, "transport", None), "_session", None)
        if session is not None:  # its REST transport has no close() of its own
            session.close()

    async def _call(self, method: str, what: str, fn: Callable[..., T], /, *args: Any,
                    mutates: bool = False,
                    translator: Callable[[BaseException, str], PodctlError] = translate,
                    **kwargs: Any) -> T:
        async def once() -> T:
            self.calls[method] += 1
            call = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
            try:
                return await asyncio.shield(call)
            except asyncio.CancelledError:
                if mutates:
                    # A create or delete that was sent is seen through, so that whoever
                    # handles the cancellation finds the world as the call left it.
                    with contextlib.suppress(Exception):
                        await call
                raise
            except Exception as e:  # translated below; nothing else escapes
                raise translator(e, what) from e

        try:
            return await self.retry.retrying(TransientError, self._sleep)(once)
        except TransientError as e:
            if self.override and isinstance(e.__cause__, (requests.ConnectionError, requests.Timeout)):
                raise ConfigError(
                    f"the Cloud TPU endpoint {self.endpoint} (set by {self.override}) does not answer "
                    f"while {what}: check it, or unset it to use https://tpu.googleapis.com.") from e
            raise

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    # ---- nodes ---------------------------------------------------------------------

    async def get_node(self, name: str) -> tpu_v2.Node:
        return await self._call("nodes.get", f"reading {name}", self.client.get_node,
                                name=name, retry=None)

    async def list_nodes(self, parent: str, page_size: int = 0) -> list[tpu_v2.Node]:
        return await self._list("nodes.list", f"listing nodes in {parent}", self.client.list_nodes,
                                tpu_v2.ListNodesRequest(parent=parent, page_size=page_size), "nodes")

    # The calls that answer with an operation go through operations.send (see there why
    # not through the generated client): their metadata is never unpacked.

    async def create_node(self, parent: str, node_id: str, node: tpu_v2.Node) -> Operation:
        return await self._call("nodes.create", f"creating node {node_id}", operations.send,
                                self.client, "POST", f"{parent}/nodes", params={"nodeId": node_id},
                                body=operations.to_body(node), mutates=True, timeout=CALL_TIMEOUT)

    async def delete_node(self, name: str) -> Operation:
        return await self._call("nodes.delete", f"deleting {name}", operations.send,
                                self.client, "DELETE", name, mutates=True, timeout=CALL_TIMEOUT)

    async def update_node_labels(self, name: str, labels: dict[str, str]) -> Operation:
        """PATCH the node's labels (the whole map: updateMask=labels replaces it); through
        operations.send like every call that answers with an operation."""
        return await self._call("nodes.patch", f"updating {name}", operations.send,
                                self.client, "PATCH", name, params={"updateMask": "labels"},
                                body={"labels": dict(labels)}, mutates=True, timeout=CALL_TIMEOUT)

    async def update_node_metadata(self, name: str, metadata: Mapping[str, str]) -> Operation:
        """PATCH the node's metadata with updateMask=metadata: METADATA is the whole map, which
        replaces the node's (the API has no fingerprint and documents no per-key mask: gcloud's
        `tpu-vm ssh` sends the map it read with one key changed). A 409 (another update of the
        node in flight) is an AlreadyExistsError; 403 and 400 say what was refused in one line
        (translate_metadata_update). Read-modify-write with retries: node_metadata.py."""
        def translator(e: BaseException, what: str) -> PodctlError:
            return translate_metadata_update(e, what, name)

        return await self._call("nodes.patch", f"updating the metadata of {name}", operations.send,
                                self.client, "PATCH", name, params={"updateMask": "metadata"},
                                body={"metadata": dict(metadata)}, mutates=True,
                                translator=translator, timeout=CALL_TIMEOUT)

    async def get_guest_attributes(self, name: str, query_path: str = "",
                                   worker_ids: Sequence[int | str] | None = None) -> list[list[GuestEntry]]:
        """nodes.getGuestAttributes: what the node's hosts published under QUERY_PATH
        ("", "NAMESPACE/" or "NAMESPACE/KEY"), one list per worker (WORKER_IDS, or all), in
        worker order as the API answers (its GuestAttributes carry no worker field)."""
        request = tpu_v2.GetGuestAttributesRequest(
            name=name, query_path=query_path, worker_ids=[str(w) for w in worker_ids or ()])
        response = await self._call("nodes.getGuestAttributes", f"reading the guest attributes of {name}",
                                    self.client.get_guest_attributes, request=request, retry=None)
        return guest_entries(response)

    # ---- queued resources -----------------------------------------------------------

    async def get_queued_resource(self, name: str) -> tpu_v2.QueuedResource:
        return await self._call("queuedResources.get", f"reading {name}",
                                self.client.get_queued_resource, name=name, retry=None)

    async def list_queued_resources(self, parent: str, page_size: int = 0) -> list[tpu_v2.QueuedResource]:
        request = tpu_v2.ListQueuedResourcesRequest(parent=parent, page_size=page_size)
        return await self._list("queuedResources.list", f"listing queued resources in {parent}",
                                self.client.list_queued_resources, request, "queued_resources")

    async def create_queued_resource(self, parent: str, qr_id: str,
                                     qr: tpu_v2.QueuedResource) -> Operation:
        return await self._call("queuedResources.create", f"creating queued resource {qr_id}",
                                operations.send, self.client, "POST", f"{parent}/queuedResources",
                                params={"queuedResourceId": qr_id}, body=operations.to_body(qr),
                                mutates=True, timeout=CALL_TIMEOUT)

    async def delete_queued_resource(self, name: str, force: bool) -> Operation:
        return await self._call("queuedResources.delete", f"deleting {name}", operations.send,
                                self.client, "DELETE", name,
                                params={"force": "true"} if force else None,
                                mutates=True, timeout=CALL_TIMEOUT)

    async def reset_queued_resource(self, name: str) -> Operation:
        """A SUSPENDED queued resource waits for capacity again, with its own terms."""
        return await self._call("queuedResources.reset", f"resetting {name}", operations.send,
                                self.client, "POST", f"{name}:reset", mutates=True,
                                timeout=CALL_TIMEOUT)

    # ---- catalog and operations ------------------------------------------------------

    async def get_accelerator_type(self, name: str) -> tpu_v2.AcceleratorType:
        return await self._call("acceleratorTypes.get", f"looking up {name}",
                                self.client.get_accelerator_type, name=name, retry=None)

    async def get_operation(self, name: str) -> Operation:
        """A long-running operation by name, e.g. one that an earlier process started:
        `done`, and `error["code"]` (8: stockout) when it failed."""
        return await self._call("operations.get", f"reading {name}", operations.send,
                                self.client, "GET", name, timeout=CALL_TIMEOUT)

    async def poll(self, operation: Operation) -> Operation:
        """The operation as it is now (one GET); a finished one is not asked again."""
        if operation.done:
            return operation
        return await self._call("operations.get", f"polling {operation.name}", operations.send,
                                self.client, "GET", operation.name, timeout=CALL_TIMEOUT)

    async def _list(self, method: str, what: str, fn: Callable[..., Any], request: Any,
                    field: str) -> list[Any]:
        """Follow nextPageToken page by page, each page one counted, retried call."""
        items: list[Any] = []
        token = ""
        while True:
            request.page_token = token
            pager = await self._call(method, what, fn, request=request, retry=None)
            page = next(iter(pager.pages))  # this call's page; the next is fetched here
            items.extend(getattr(page, field))
            token = page.next_page_token
            if not token:
                return items
