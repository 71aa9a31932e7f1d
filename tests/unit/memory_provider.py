"""A stand-in slice provider that keeps its slices in memory: the one new module a second
provider needs (cloud/provider.py's SliceProvider), for test_provider_seam.py only.

It makes a slice READY at once, with one node per slice and one host per TPU VM, and
forgets it on delete; its hosts publish no guest attributes and it announces no
maintenance.
Every other test runs on the fake cloud, which speaks the Cloud TPU API's wire protocol.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from podctl.base import topology
from podctl.cloud.create import CreateRequest, Creation, CreationOutcome
from podctl.cloud.describe import Kind
from podctl.cloud.placement import Placement
from podctl.cloud.provider import SliceProvider
from podctl.cloud.types import GuestEntry, Host, NodeInfo, SliceInfo
from podctl.cloud.wait import Clock, Progress, WaitPolicy
from podctl.base.errors import AlreadyExistsError, NotFoundError
from podctl.base.settings import Settings

# parent -> slice name -> slice: what every provider opened in this process sees (each CLI
# command opens its own, as it would open a client of a real API)
WORLD: dict[str, dict[str, SliceInfo]] = {}


def open_memory(settings: Settings) -> SliceProvider:
    """The registry's opener: Settings in, a SliceProvider out."""
    return MemoryProvider(WORLD)


class MemoryProvider:
    endpoint = "memory:"

    def __init__(self, world: dict[str, dict[str, SliceInfo]]):
        self.world = world
        self.calls = 0

    def _zone(self, parent: str) -> dict[str, SliceInfo]:
        self.calls += 1
        return self.world.setdefault(parent, {})

    @property
    def total_calls(self) -> int:
        return self.calls

    def server_now(self) -> float:
        return time.time()

    async def server_clock(self, parent: str) -> float:
        return time.time()

    def close(self) -> None:
        pass

    async def check_zone(self, parent: str, slice_type: topology.SliceType) -> None:
        pass

    async def create(self, request: CreateRequest) -> Creation:
        zone = self._zone(request.parent)
        if request.name in zone:
            raise AlreadyExistsError(f"a slice named {request.name!r} exists already.")
        spec = request.spec
        kind: Kind = "queued-resource" if spec.queued else "node"
        project, location = request.parent.split("/")[1], request.parent.split("/")[3]
        now = time.time()
        nodes = tuple(
            NodeInfo(name=f"{request.name}-{i}" if spec.num_slices > 1 else request.name,
                     state="READY", health="HEALTHY", accelerator_type=spec.slice_type.name,
                     topology=spec.slice_type.topology,
                     hosts=tuple(Host(slice_index=i, worker=w, ip=f"10.0.{i}.{w + 2}", port=22)
                                 for w in range(spec.slice_type.hosts)),
                     spot=spec.tier == "spot", created=now, labels=dict(request.labels),
                     queued_resource=request.name if spec.queued else None,
                     metadata=dict(request.metadata))
            for i in range(spec.num_slices))
        zone[request.name] = SliceInfo(
            name=request.name, project=project, zone=location, kind=kind,
            state="ACTIVE" if spec.queued else "READY", accelerator_type=spec.slice_type.name,
            topology=spec.slice_type.topology, num_slices=spec.num_slices, tier=spec.tier,
            created=now, labels=dict(request.labels), nodes=nodes)
        return Creation(request.name, kind)

    async def creation_outcome(self, operation_name: str) -> CreationOutcome | None:
        return None

    async def describe(self, parent: str, name: str, kind: Kind | None = None) -> SliceInfo:
        found = await self.find(parent, name)
        if found is None:
            raise NotFoundError(f"no slice named {name!r} in {parent.rsplit('/', 1)[-1]}; "
                                "`podctl ls` lists them.")
        return found

    async def find(self, parent: str, name: str) -> SliceInfo | None:
        return self._zone(parent).get(name)

    async def list_slices(self, parent: str, page_size: int = 0) -> list[SliceInfo]:
        return sorted(self._zone(parent).values(), key=lambda info: info.name)

    async def owning_slice(self, parent: str, info: SliceInfo) -> SliceInfo:
        return info

    async def delete(self, parent: str, info: SliceInfo) -> SliceInfo:
        return self._zone(parent).pop(info.name, info)

    async def ask_again(self, parent: str, member: str) -> None:  # no resource per slice here
        raise NotFoundError(f"{member}: this provider makes no queued resource per slice")

    async def stop_asking(self, parent: str, member: str) -> None:
        await self.ask_again(parent, member)

    async def wait_ready(self, parent: str, name: str, *, kind: Kind | None = None,
                         creation: Creation | None = None, policy: WaitPolicy | None = None,
                         clock: Clock | None = None, progress: Progress | None = None) -> SliceInfo:
        return await self.describe(parent, name, kind)

    async def wait_deleted(self, parent: str, name: str, *, kind: Kind | None = None,
                           policy: WaitPolicy | None = None, clock: Clock | None = None,
                           progress: Progress | None = None) -> None:
        assert await self.find(parent, name) is None

    async def set_labels(self, parent: str, info: SliceInfo, labels: Mapping[str, str],
                         policy: WaitPolicy | None = None) -> SliceInfo:
        current = await self.describe(parent, info.name)
        self._zone(parent)[info.name] = changed = dataclasses.replace(current, labels=dict(labels))
        return changed

    async def placement(self, parent: str, info: SliceInfo) -> Placement:
        return Placement()

    async def upcoming_maintenance(self, info: SliceInfo) -> dict[str, dict[str, Any]]:
        return {}

    def _write_metadata(self, node_name: str, key: str, value: str | None) -> dict[str, str]:
        parent, _, short = node_name.rpartition("/nodes/")
        for info in self._zone(parent).values():
            nodes = list(info.nodes)
            for i, node in enumerate(nodes):
                if node.name == short:
                    metadata = {k: v for k, v in node.metadata.items() if k != key}
                    if value is not None:
                        metadata[key] = value
                    nodes[i] = dataclasses.replace(node, metadata=metadata)
                    self._zone(parent)[info.name] = dataclasses.replace(info, nodes=tuple(nodes))
                    return metadata
        raise NotFoundError(f"no node {node_name}")

    async def set_metadata_key(self, node_name: str, key: str, value: str, *,
                               current: Mapping[str, str] | None = None,
                               wait: bool = True) -> dict[str, str]:
        return self._write_metadata(node_name, key, value)

    async def remove_metadata_key(self, node_name: str, key: str, *,
                                  current: Mapping[str, str] | None = None,
                                  wait: bool = True) -> dict[str, str]:
        return self._write_metadata(node_name, key, None)

    async def guest_attributes(self, node_name: str, query_path: str = "", *,
                               workers: int | None = None) -> list[list[GuestEntry]]:
        return [[] for _ in range(workers or 1)]
