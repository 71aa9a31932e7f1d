"""Create a slice: a plain node, or a queued resource (single slice or multislice)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from podctl.base.errors import InvalidValueError, NotFoundError
from podctl.cloud.describe import Kind
from podctl.cloud.names import ELASTIC_OF_LABEL, ELASTIC_SLICES_LABEL
from podctl.cloud.node_metadata import check_metadata
from podctl.cloud.operations import Operation
from podctl.cloud.placement import Placement
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import SliceSpec

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2

# Every queued resource carries a validity window, so that a request forgotten in a
# queue (a client killed, a cron entry removed) fails on its own instead of turning
# into a slice nobody runs on days later. 24 h unless --valid-for says otherwise.
DEFAULT_VALID_FOR_SECONDS = 24 * 3600


@dataclass(frozen=True)
class CreateRequest:
    parent: str
    name: str
    spec: SliceSpec
    labels: dict[str, str]
    ssh_keys: str  # the node's `ssh-keys` metadata
    placement: Placement = Placement()  # reservation, network, service account, tags
    # More node metadata beside `ssh-keys` (e.g. a startup script and its version): keys
    # and values as Compute Engine limits them; `ssh-keys` is the field above, not one of these.
    extra_metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.extra_metadata:
            return
        if "ssh-keys" in self.extra_metadata:
            raise InvalidValueError("extra metadata may not name ssh-keys: the slice's keys are "
                                    "CreateRequest.ssh_keys.")
        check_metadata(self.metadata, self.name)

    @property
    def metadata(self) -> dict[str, str]:
        """The node's metadata: EXTRA_METADATA and `ssh-keys` (which wins)."""
        return {**self.extra_metadata, "ssh-keys": self.ssh_keys}


@dataclass(frozen=True)
class Creation:
    """A create asked for (any provider's: cloud/provider.py); OPERATION is the provider's
    handle on it, None where there is nothing to follow (the slice was made at once)."""

    name: str
    kind: Kind
    operation: Operation | None = None

    @property
    def operation_name(self) -> str | None:
        """What `creation_outcome` follows from another process: a node's create operation;
        None for a queued resource (it waits for capacity by itself) or nothing to follow."""
        return self.operation.name if self.operation is not None and self.kind == "node" else None


def node_template(request: CreateRequest) -> tpu_v2.Node:
    spec = request.spec
    node = tpu_v2.Node(
        accelerator_type=spec.slice_type.name,
        runtime_version=spec.runtime_version,
        labels=request.labels,
        metadata=request.metadata,
        description=f"podctl {spec.describe()}",
    )
    request.placement.apply_to_node(node)
    if spec.tier == "spot" and not spec.queued:  # a queued resource carries its tier itself
        node.scheduling_config = tpu_v2.SchedulingConfig(spot=True)
    return node


def elastic_members(request: CreateRequest) -> list[tuple[str, tpu_v2.QueuedResource]]:
    """An elastic slice's K queued resources, one slice each: NAME-i holds the node NAME-i
    (the ids a multislice queued resource would give them), with the same tier and window.
    Why: in the Cloud TPU API v2 a queued resource has one state (SUSPENDING -> SUSPENDED
    when preempted; `:reset` takes only SUSPENDED back to waiting), and no source at hand
    (shared/reference/cloud-tpu.md, the API's proto) says a multislice one keeps its other
    slices when one is preempted, nor that the slices of one multislice job must share a
    queued resource (podctl sets MEGASCALE_* itself: host/host_config.py). One resource per
    slice is what lets the others run on and the lost one be asked for again on its own."""
    k = request.spec.num_slices
    labels = {**request.labels, ELASTIC_OF_LABEL: request.name, ELASTIC_SLICES_LABEL: str(k)}
    one = replace(request.spec, num_slices=1, elastic=False)
    return [(f"{request.name}-{i}", queued_resource(replace(request, name=f"{request.name}-{i}",
                                                            spec=one, labels=labels)))
            for i in range(k)]


def queued_resource(request: CreateRequest) -> tpu_v2.QueuedResource:
    spec = request.spec
    node_spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=request.parent, node=node_template(request))
    if spec.num_slices > 1:  # nodes NAME-0 ... NAME-(K-1)
        node_spec.multislice_params = tpu_v2.QueuedResource.Tpu.NodeSpec.MultisliceParams(
            node_count=spec.num_slices, node_id_prefix=request.name)
    else:
        node_spec.node_id = request.name
    qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[node_spec]))
    if spec.tier == "spot":
        qr.spot = tpu_v2.QueuedResource.Spot()
    elif spec.tier == "guaranteed":
        qr.guaranteed = tpu_v2.QueuedResource.Guaranteed()
    request.placement.apply_to_queued(qr)
    valid_for = spec.valid_for_seconds if spec.valid_for_seconds is not None else DEFAULT_VALID_FOR_SECONDS
    qr.queueing_policy = tpu_v2.QueuedResource.QueueingPolicy(
        valid_until_duration=datetime.timedelta(seconds=valid_for))
    return qr


async def create(api: TpuApi, request: CreateRequest) -> Creation:
    """Ask for the slice; returns at once with the operation to wait on."""
    if request.spec.elastic:  # one at a time: a refusal (quota) leaves the rest unasked
        for name, qr in elastic_members(request):
            op = await api.create_queued_resource(request.parent, name, qr)
        return Creation(request.name, "queued-resource", op)
    if request.spec.queued:
        op = await api.create_queued_resource(request.parent, request.name, queued_resource(request))
        return Creation(request.name, "queued-resource", op)
    op = await api.create_node(request.parent, request.name, node_template(request))
    return Creation(request.name, "node", op)


STOCKOUT_CODE = 8  # google.rpc.Code.RESOURCE_EXHAUSTED in a failed create: "no more capacity"


@dataclass(frozen=True)
class CreationOutcome:
    """How a node's create operation, started earlier (by another process), ended."""

    done: bool
    stockout: bool = False  # failed for want of capacity: worth asking again later
    error: str | None = None  # why it failed


async def creation_outcome(api: TpuApi, operation_name: str) -> CreationOutcome | None:
    """How the create operation OPERATION_NAME ended; None if the API has forgotten it."""
    try:
        op = await api.get_operation(operation_name)
    except NotFoundError:
        return None
    if not op.done:
        return CreationOutcome(done=False)
    if op.error is not None:
        code = op.error.get("code")
        return CreationOutcome(done=True, stockout=code == STOCKOUT_CODE,
                               error=f"code {code}: {op.error.get('message', '')}")
    return CreationOutcome(done=True)
