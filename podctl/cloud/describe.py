"""Describe and list slices: a slice is a node, or a queued resource with its nodes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

from podctl.base.errors import NotFoundError
from podctl.cloud.convert import (
    queued_node_ids,
    short,
    slice_from_members,
    slice_from_node,
    slice_from_queued_resource,
)
from podctl.cloud.names import ELASTIC_OF_LABEL, ELASTIC_SLICES_LABEL, validate_name
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import SliceInfo

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2

Kind = Literal["node", "queued-resource"]


# Queued-resource states in which its nodes may exist; in the others, asking is a wasted call.
_WITH_NODES = {"PROVISIONING", "ACTIVE", "SUSPENDING", "DELETING", "FAILED"}


async def _nodes_of(api: TpuApi, parent: str, qr: tpu_v2.QueuedResource) -> dict[str, tpu_v2.Node]:
    if qr.state.state.name not in _WITH_NODES:
        return {}
    ids = queued_node_ids(qr)
    if len(ids) == 1:  # one GET beats listing a zone that may hold many nodes
        try:
            return {ids[0]: await api.get_node(f"{parent}/nodes/{ids[0]}")}
        except NotFoundError:
            return {}
    wanted = set(ids)
    return {short(n.name): n for n in await api.list_nodes(parent) if short(n.name) in wanted}


def _elastic_of(qr: tpu_v2.QueuedResource) -> str | None:
    """The elastic slice a queued resource is one slice of (`up --elastic`), if any."""
    specs = qr.tpu.node_spec
    return specs[0].node.labels.get(ELASTIC_OF_LABEL) if specs else None


def _elastic_slice(name: str, qrs: list[tpu_v2.QueuedResource], nodes: dict[str, tpu_v2.Node]) -> SliceInfo:
    k = max(int(qr.tpu.node_spec[0].node.labels.get(ELASTIC_SLICES_LABEL, "0") or 0) for qr in qrs)
    return slice_from_members(name, max(k, len(qrs)), qrs, nodes)


async def _elastic(api: TpuApi, parent: str, name: str) -> SliceInfo | None:
    """The elastic slice NAME (its queued resources NAME-0 ...), or None: one more call,
    made only where no queued resource or node is named NAME."""
    qrs = [qr for qr in await api.list_queued_resources(parent) if _elastic_of(qr) == name]
    if not qrs:
        return None
    nodes: dict[str, tpu_v2.Node] = {}
    if any(qr.state.state.name in _WITH_NODES for qr in qrs):
        nodes = {short(n.name): n for n in await api.list_nodes(parent)}
    return _elastic_slice(name, qrs, nodes)


async def describe(api: TpuApi, parent: str, name: str, kind: Kind | None = None) -> SliceInfo:
    """The slice NAME in PARENT; NotFoundError if there is none.

    Without KIND, a queued resource of that name is looked for first, then a node.
    A NAME that no slice can have (`../../x`) is refused before it goes into a URL.
    """
    validate_name(name)
    if kind in (None, "queued-resource"):
        try:
            qr = await api.get_queued_resource(f"{parent}/queuedResources/{name}")
        except NotFoundError:
            if kind == "queued-resource":
                elastic = await _elastic(api, parent, name)
                if elastic is None:
                    raise
                return elastic
        else:
            return slice_from_queued_resource(qr, await _nodes_of(api, parent, qr))
    try:
        return slice_from_node(await api.get_node(f"{parent}/nodes/{name}"))
    except NotFoundError as e:
        elastic = await _elastic(api, parent, name) if kind is None else None
        if elastic is not None:
            return elastic
        zone = parent.rsplit("/", 1)[-1]
        raise NotFoundError(f"no slice named {name!r} in {zone}; `podctl ls` lists them (a Compute "
                            "Engine slice, tpu7x-N or made with --api compute: add --api compute).") from e


async def find(api: TpuApi, parent: str, name: str) -> SliceInfo | None:
    try:
        return await describe(api, parent, name)
    except NotFoundError:
        return None


async def list_slices(api: TpuApi, parent: str, page_size: int = 0) -> list[SliceInfo]:
    """Every slice in the zone: queued resources (with their nodes) and plain nodes."""
    qrs, nodes = await asyncio.gather(api.list_queued_resources(parent, page_size),
                                      api.list_nodes(parent, page_size))
    by_id = {short(n.name): n for n in nodes}
    groups: dict[str, list[tpu_v2.QueuedResource]] = {}
    for qr in qrs:
        of = _elastic_of(qr)
        if of:
            groups.setdefault(of, []).append(qr)
    slices = [slice_from_queued_resource(qr, by_id) for qr in qrs if not _elastic_of(qr)]
    slices += [_elastic_slice(name, members, by_id) for name, members in groups.items()]
    owned = {node_id for qr in qrs for node_id in queued_node_ids(qr)}
    slices += [slice_from_node(n) for n in nodes if short(n.name) not in owned]
    return sorted(slices, key=lambda s: s.name)
