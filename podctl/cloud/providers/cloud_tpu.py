"""The Cloud TPU API (tpu.googleapis.com v2) as a SliceProvider.

CloudTpu is TpuApi (the counted, retried, translated client: cloud/tpu_client.py) with the
slice-level operations the provider interface names, each one of cloud/'s Cloud TPU
modules: a slice is a node or a queued resource (describe.py), made by create.py, waited
for by wait.py, deleted by terminate.py, its node's metadata and guest attributes
node_metadata.py's, its placement placement.py's, its maintenance maintenance_info.py's.
Only cloud/ names this class; above it the session holds a SliceProvider.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podctl.base import topology
from podctl.base.errors import CloudError, InvalidValueError, NotFoundError
from podctl.cloud import create as create_step
from podctl.cloud import describe as describe_step
from podctl.cloud import maintenance_info, node_metadata, placement, terminate
from podctl.cloud import wait as wait_step
from podctl.cloud.create import CreateRequest, Creation, CreationOutcome
from podctl.cloud.describe import Kind
from podctl.cloud.placement import Placement
from podctl.cloud.provider import refuse_off_cloud_tpu
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import GuestEntry, SliceInfo
from podctl.cloud.wait import Clock, Progress, WaitPolicy

LABELS_WAIT = WaitPolicy(timeout=120)  # a labels patch's operation


class CloudTpu(TpuApi):
    """TpuApi's calls, plus the SliceProvider's slices (cloud/provider.py)."""

    async def check_zone(self, parent: str, slice_type: topology.SliceType) -> None:
        """One call that tells a zone without this slice's generation (or no such zone)
        before anything is created. It asks for the generation's smallest type in Google's
        table, which every zone of the generation lists, not for the size asked."""
        gen = slice_type.generation
        refuse_off_cloud_tpu(slice_type)
        try:
            smallest = gen.valid_sizes(documented_only=True)[0]
            await self.get_accelerator_type(f"{parent}/acceleratorTypes/{gen.key}-{smallest}")
        except NotFoundError as e:
            zone = parent.rsplit("/", 1)[-1]
            raise InvalidValueError(f"zone {zone!r} offers no {gen.name} (or does not exist); "
                                    f"{gen.name} zones include {', '.join(gen.zones[:2])}: "
                                    f"pass --zone {gen.zones[0]}.") from e

    async def create(self, request: CreateRequest) -> Creation:
        refuse_off_cloud_tpu(request.spec.slice_type)
        return await create_step.create(self, request)

    async def creation_outcome(self, operation_name: str) -> CreationOutcome | None:
        return await create_step.creation_outcome(self, operation_name)

    async def describe(self, parent: str, name: str, kind: Kind | None = None) -> SliceInfo:
        return await describe_step.describe(self, parent, name, kind)

    async def find(self, parent: str, name: str) -> SliceInfo | None:
        return await describe_step.find(self, parent, name)

    async def list_slices(self, parent: str, page_size: int = 0) -> list[SliceInfo]:
        return await describe_step.list_slices(self, parent, page_size)

    async def owning_slice(self, parent: str, info: SliceInfo) -> SliceInfo:
        return await terminate.owning_slice(self, parent, info)

    async def delete(self, parent: str, info: SliceInfo) -> SliceInfo:
        return await terminate.delete(self, parent, info)

    async def ask_again(self, parent: str, member: str) -> None:
        await self.reset_queued_resource(f"{parent}/queuedResources/{member}")

    async def stop_asking(self, parent: str, member: str) -> None:
        await terminate.delete_member(self, parent, member)

    async def wait_ready(self, parent: str, name: str, *, kind: Kind | None = None,
                         creation: Creation | None = None, policy: WaitPolicy | None = None,
                         clock: Clock | None = None, progress: Progress | None = None) -> SliceInfo:
        """A node's create operation is polled (it carries a stockout as code 8); a queued
        resource, or a slice with no creation at hand, is described until ready."""
        operation = creation.operation if creation is not None and creation.kind == "node" else None
        return await wait_step.wait_ready(self, parent, name, kind=kind, operation=operation,
                                          policy=policy or WaitPolicy(), clock=clock or Clock(),
                                          progress=progress)

    async def wait_deleted(self, parent: str, name: str, *, kind: Kind | None = None,
                           policy: WaitPolicy | None = None, clock: Clock | None = None,
                           progress: Progress | None = None) -> None:
        await wait_step.wait_deleted(self, parent, name, kind=kind, policy=policy or WaitPolicy(),
                                     clock=clock or Clock(), progress=progress)

    async def set_labels(self, parent: str, info: SliceInfo, labels: Mapping[str, str],
                         policy: WaitPolicy | None = None) -> SliceInfo:
        """A node's labels (the whole map, nodes.patch updateMask=labels); a queued
        resource's cannot be changed (the v2 API has no update for it): refused. Callers
        that can say what to do instead (budget.set_on_existing) check first."""
        if info.kind != "node" or any(n.queued_resource for n in info.nodes):
            raise InvalidValueError(f"{info.name} is a queued resource, whose labels Cloud TPU "
                                    f"cannot change; `podctl down {info.name}` and make it again "
                                    "with the labels wanted.")
        operation = await self.update_node_labels(f"{parent}/nodes/{info.name}", dict(labels))

        async def finished() -> bool | None:
            current = await self.get_operation(operation.name)
            if not current.done:
                return None
            error = current.exception()
            if error is not None:
                raise CloudError(f"the labels of {info.name} could not be written: {error}")
            return True

        await wait_step.wait_until(finished, what=f"labelling {info.name}", policy=policy or LABELS_WAIT)
        return await self.describe(parent, info.name, "node")

    async def placement(self, parent: str, info: SliceInfo) -> Placement:
        return await placement.read(self, parent, info)

    async def upcoming_maintenance(self, info: SliceInfo) -> dict[str, dict[str, Any]]:
        return await maintenance_info.upcoming(self, info)

    async def set_metadata_key(self, node_name: str, key: str, value: str, *,
                               current: Mapping[str, str] | None = None,
                               wait: bool = True) -> dict[str, str]:
        return await node_metadata.set_key(self, node_name, key, value, current=current, wait=wait)

    async def remove_metadata_key(self, node_name: str, key: str, *,
                                  current: Mapping[str, str] | None = None,
                                  wait: bool = True) -> dict[str, str]:
        return await node_metadata.remove_key(self, node_name, key, current=current, wait=wait)

    async def guest_attributes(self, node_name: str, query_path: str = "", *,
                               workers: int | None = None) -> list[list[GuestEntry]]:
        return await node_metadata.guest_attributes(self, node_name, query_path, workers=workers)
