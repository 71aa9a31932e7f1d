"""Protobufs of the Cloud TPU API -> podctl's dataclasses (types.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from podctl.base.errors import InvalidSliceError
from podctl.base.topology import parse_slice
from podctl.cloud.types import GuestEntry, Host, Member, NodeInfo, SliceInfo, Tier

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2


def short(name: str) -> str:
    """projects/p/locations/z/nodes/x -> x"""
    return name.rsplit("/", 1)[-1]


def _seconds(timestamp: object) -> float:
    # proto-plus gives DatetimeWithNanoseconds; an unset timestamp is the epoch.
    return timestamp.timestamp() if hasattr(timestamp, "timestamp") else 0.0


def _enum(value: object) -> str | None:
    name = getattr(value, "name", None)
    return None if name is None or name.endswith("UNSPECIFIED") else name


def node_info(node: tpu_v2.Node, slice_index: int = 0) -> NodeInfo:
    hosts = tuple(
        Host(slice_index=slice_index, worker=i, ip=ep.ip_address, port=ep.port,
             external_ip=ep.access_config.external_ip or None)
        for i, ep in enumerate(node.network_endpoints)
    )
    return NodeInfo(
        name=short(node.name),
        state=_enum(node.state) or "UNKNOWN",
        health=_enum(node.health),
        accelerator_type=node.accelerator_type,
        topology=node.accelerator_config.topology or _topology(node.accelerator_type),
        hosts=hosts,
        spot=node.scheduling_config.spot or node.scheduling_config.preemptible,
        created=_seconds(node.create_time),
        labels=dict(node.labels),
        queued_resource=short(node.queued_resource) if node.queued_resource else None,
        symptoms=tuple(_symptom(s) for s in node.symptoms),
        os_login=node.metadata.get("enable-oslogin"),
        metadata=dict(node.metadata),
    )


def guest_entries(response: tpu_v2.GetGuestAttributesResponse) -> list[list[GuestEntry]]:
    """getGuestAttributes' answer: one list of entries per GuestAttributes, in the order the
    API gives them (one per worker, in worker order: the message has no worker field)."""
    return [[GuestEntry(namespace=item.namespace, key=item.key, value=item.value)
             for item in attributes.query_value.items]
            for attributes in response.guest_attributes]


def _symptom(symptom: tpu_v2.Symptom) -> str:
    """What a detector and a human read: TYPE on worker N: details."""
    where = f" on worker {symptom.worker_id}" if symptom.worker_id else ""
    return f"{_enum(symptom.symptom_type) or 'SYMPTOM'}{where}" + (
        f": {symptom.details}" if symptom.details else "")


def _topology(accelerator_type: str) -> str:
    try:
        return parse_slice(accelerator_type).topology
    except InvalidSliceError:  # a type podctl has no record of; show no topology rather than fail
        return ""


def _location(name: str) -> tuple[str, str]:
    parts = name.split("/")
    return parts[1], parts[3]


def slice_from_node(node: tpu_v2.Node) -> SliceInfo:
    info = node_info(node)
    project, zone = _location(node.name)
    return SliceInfo(
        name=info.name, project=project, zone=zone, kind="node", state=info.state,
        accelerator_type=info.accelerator_type, topology=info.topology, num_slices=1,
        tier="spot" if info.spot else "on-demand", created=info.created, labels=info.labels,
        nodes=(info,), runtime_version=node.runtime_version, observed=time.time(),
    )


def queued_node_ids(qr: tpu_v2.QueuedResource) -> list[str]:
    """The node ids a queued resource asks for, in slice order."""
    ids: list[str] = []
    for spec in qr.tpu.node_spec:
        multi = spec.multislice_params
        if multi.node_count:
            ids.extend(f"{multi.node_id_prefix}-{i}" for i in range(multi.node_count))
        else:
            ids.append(spec.node_id)
    return ids


def slice_from_queued_resource(qr: tpu_v2.QueuedResource, nodes: dict[str, tpu_v2.Node]) -> SliceInfo:
    """A queued resource with whichever of its nodes exist (by short id)."""
    project, zone = _location(qr.name)
    template = qr.tpu.node_spec[0].node
    ids = queued_node_ids(qr)
    infos = tuple(node_info(nodes[i], index) for index, i in enumerate(ids) if i in nodes)
    tier: Tier = "spot" if "spot" in qr else "guaranteed" if "guaranteed" in qr else "on-demand"
    failed = qr.state.failed_data.error.message if "failed_data" in qr.state else None
    policy = qr.queueing_policy
    valid_until = None
    if "valid_until_time" in policy:
        valid_until = _seconds(policy.valid_until_time)
    elif "valid_until_duration" in policy:
        valid_until = _seconds(qr.create_time) + policy.valid_until_duration.total_seconds()
    return SliceInfo(
        name=short(qr.name), project=project, zone=zone, kind="queued-resource",
        state=_enum(qr.state.state) or "UNKNOWN", accelerator_type=template.accelerator_type,
        topology=template.accelerator_config.topology or _topology(template.accelerator_type),
        num_slices=len(ids), tier=tier,
        created=_seconds(qr.create_time), labels=dict(template.labels), nodes=infos,
        error=failed or None, runtime_version=template.runtime_version,
        valid_until=valid_until, observed=time.time(),
    )


def member_index(qr: tpu_v2.QueuedResource) -> int:
    """Which slice of its elastic slice the queued resource NAME-i holds: i."""
    suffix = short(qr.name).rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def slice_from_members(name: str, k: int, qrs: list[tpu_v2.QueuedResource],
                       nodes: dict[str, tpu_v2.Node]) -> SliceInfo:
    """An elastic slice NAME of K slices from the queued resources of it that exist (one
    deleted at the grow-back deadline is missing: fewer nodes than K, not ready)."""
    parts = sorted(((member_index(qr), slice_from_queued_resource(qr, nodes)) for qr in qrs),
                   key=lambda p: p[0])
    first = parts[0][1]
    infos = tuple(replace(n, hosts=tuple(replace(h, slice_index=i) for h in n.hosts))
                  for i, part in parts for n in part.nodes)
    unlike = [part.state for _, part in parts if part.state != first.state]
    limits = [part.valid_until for _, part in parts if part.valid_until is not None]
    return replace(
        first, name=name, num_slices=k, nodes=infos,
        state=unlike[0] if first.state == "ACTIVE" and unlike else first.state,
        created=min(part.created for _, part in parts),
        error=next((part.error for _, part in parts if part.error), None),
        valid_until=min(limits) if limits else None,
        members=tuple(Member(i, short(qr.name), part.state)
                      for (i, part), qr in zip(parts, sorted(qrs, key=member_index))))
