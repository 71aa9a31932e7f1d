"""Delete a slice and, if asked, wait until it is gone.

A queued resource is deleted with force=true, which takes its nodes with it; a
node that belongs to a queued resource is deleted through that resource. A
PREEMPTED node or SUSPENDED queued resource still holds quota, so it is deleted
like any other.
"""

from __future__ import annotations

from podctl.base.errors import NotFoundError
from podctl.cloud import describe
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import SliceInfo
from podctl.cloud.wait import Clock, Progress, WaitPolicy, wait_deleted


async def owning_slice(api: TpuApi, parent: str, info: SliceInfo) -> SliceInfo:
    """What deleting INFO deletes: a node of a queued resource goes with the whole resource."""
    if info.kind == "node" and info.nodes and info.nodes[0].queued_resource:
        return await describe.describe(api, parent, info.nodes[0].queued_resource, "queued-resource")
    return info


async def delete(api: TpuApi, parent: str, info: SliceInfo) -> SliceInfo:
    """Start deleting INFO's slice; returns the slice as it was found."""
    info = await owning_slice(api, parent, info)
    if info.state == "DELETING":
        return info  # already on its way; a second request would only be refused
    try:
        if info.members:  # an elastic slice: each of its queued resources
            for member in info.members:
                await delete_member(api, parent, member.name)
        elif info.kind == "queued-resource":
            await api.delete_queued_resource(f"{parent}/queuedResources/{info.name}", force=True)
        else:
            await api.delete_node(f"{parent}/nodes/{info.name}")
    except NotFoundError:
        # Gone since it was described: a delete whose answer was lost and was sent again
        # (the first one did it), or another hand. Gone is what was asked for.
        pass
    return info


async def delete_member(api: TpuApi, parent: str, name: str) -> None:
    """Delete one queued resource of an elastic slice (force: with its node), gone or not."""
    try:
        await api.delete_queued_resource(f"{parent}/queuedResources/{name}", force=True)
    except NotFoundError:
        pass


async def terminate(api: TpuApi, parent: str, name: str, *, wait: bool = True,
                    policy: WaitPolicy = WaitPolicy(), clock: Clock = Clock(),
                    progress: Progress | None = None) -> SliceInfo:
    """Delete the slice NAME (NotFoundError if none) and wait until it is gone."""
    info = await delete(api, parent, await describe.describe(api, parent, name))
    if wait:
        await wait_deleted(api, parent, info.name, kind=info.kind, policy=policy, clock=clock,
                           progress=progress)
    return info
