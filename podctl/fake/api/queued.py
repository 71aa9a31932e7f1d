"""Queued resources in the fake world: the way large v5p slices are really obtained.

A queued resource asks for one or more nodes (multislice: `multisliceParams`
with `nodeCount` and `nodeIdPrefix` -> nodes PREFIX-0, PREFIX-1, ...). It waits
in WAITING_FOR_RESOURCES from its create on (Google no longer shows ACCEPTED) until the zone has the chips
for all its nodes and its validity window is open, then provisions them. A
preempted one suspends and gives its chips back; one whose window closes first
fails. These functions take the World as their first argument; world.py calls
them from its request methods and transitions.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from podctl.fake.api import placement_check
from podctl.fake.api.apierror import (
    ApiError,
    invalid,
    not_found,
    page,
    parse_duration,
    parse_timestamp,
    precondition,
    rfc3339,
)

if TYPE_CHECKING:
    from podctl.fake.world import World

_QR_FIELDS = {"tpu", "spot", "guaranteed", "queueingPolicy", "reservationName"}
_QR_OUTPUT_ONLY = {"name", "createTime", "state", "queuedResourceState"}
_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_QR_TYPE = "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"
# DeleteQueuedResourceRequest.force: without it, deleted only "if its nodes have already
# been deleted or the queued resource is in the ACCEPTED, FAILED, or SUSPENDED state".
_DELETABLE_WITHOUT_FORCE = {"ACCEPTED", "FAILED", "SUSPENDED"}
_WAITING = {"ACCEPTED", "WAITING_FOR_RESOURCES"}


def _snapshot(qr: dict[str, Any]) -> dict[str, Any]:
    return {"@type": _QR_TYPE, **qr}


def _window(world: World, policy: dict[str, Any]) -> tuple[float, float | None]:
    """(valid after, valid until) on the world's clock; durations are simulated."""
    now = world.now()
    after, until = now, None
    if "validAfterDuration" in policy:
        after = now + parse_duration(policy["validAfterDuration"]) / world.time_scale
    if "validAfterTime" in policy:
        after = parse_timestamp(policy["validAfterTime"])
    if "validUntilDuration" in policy:
        until = now + parse_duration(policy["validUntilDuration"]) / world.time_scale
    if "validUntilTime" in policy:
        until = parse_timestamp(policy["validUntilTime"])
    if "validInterval" in policy:
        interval = policy["validInterval"]
        if "startTime" in interval:
            after = parse_timestamp(interval["startTime"])
        if "endTime" in interval:
            until = parse_timestamp(interval["endTime"])
    if until is not None and until <= after:
        raise invalid("queueingPolicy: the validity window closes before it opens")
    return after, until


def _planned_nodes(world: World, parent: str, body: dict[str, Any], qr_id: str) -> list[dict[str, Any]]:
    specs = body.get("tpu", {}).get("nodeSpec", [])
    if not specs:
        raise invalid("tpu.node_spec must hold at least one node spec")
    nodes = []
    for spec in specs:
        if spec.get("parent") != parent:
            raise invalid(f"node_spec.parent {spec.get('parent')!r} must be {parent!r}")
        template = spec.get("node")
        if not isinstance(template, dict):
            raise invalid("node_spec.node is required")
        multi = spec.get("multisliceParams")
        if multi and spec.get("nodeId"):
            raise invalid("node_spec takes node_id or multislice_params, not both")
        if multi:
            # without a prefix, the queued resource's id (the proto's MultisliceParams doc)
            count, prefix = int(multi.get("nodeCount", 0)), multi.get("nodeIdPrefix") or qr_id
            if count <= 1:  # one node is a node_id, not a multislice
                raise invalid("multislice_params.node_count must be greater than 1")
            ids = [f"{prefix}-{i}" for i in range(count)]
        else:
            ids = [spec.get("nodeId", "")]
        for node_id in ids:
            node = world.node_from_body(parent, node_id, template)
            node["multisliceNode"] = bool(multi) and len(ids) > 1
            nodes.append(node)
    return nodes


def create(world: World, parent: str, qr_id: str, body: dict[str, Any], request_id: str = "") -> dict[str, Any]:
    project, zone = world.check_parent(parent)
    body = {k: v for k, v in body.items() if k not in _QR_OUTPUT_ONLY}
    unknown = set(body) - _QR_FIELDS
    if unknown:
        raise invalid(f'Invalid JSON payload received. Unknown name "{sorted(unknown)[0]}" at '
                      "'queued_resource': Cannot find field.")
    if not _ID.match(qr_id or ""):
        raise invalid(f"Invalid queued resource id {qr_id!r}: use 1-63 lowercase letters, digits "
                      "and hyphens, starting with a letter and not ending with a hyphen")
    name = f"{parent}/queuedResources/{qr_id}"
    again = world.replayed(name, request_id)
    if again is not None:
        return again  # the same request retried: the same operation, not a 409
    planned = _planned_nodes(world, parent, body, qr_id)  # also validates ids and accelerators
    if name in world.queued:
        raise ApiError(409, "ALREADY_EXISTS", f"Resource '{name}' already exists")
    for node in planned:
        if node["name"] in world.nodes or any(
            node["name"] in q["_node_names"] for q in world.queued.values()
        ):
            raise ApiError(409, "ALREADY_EXISTS", f"Resource '{node['name']}' already exists")
    if "spot" in body and "guaranteed" in body:
        raise invalid("A queued resource takes one tier: spot or guaranteed")
    if body.get("reservationName"):
        placement_check.check_reservation(body["reservationName"], zone)
    world._check_quota(project, zone, sum(n["_chips"] for n in planned))
    valid_after, valid_until = _window(world, body.get("queueingPolicy", {}))
    qr = {k: v for k, v in body.items() if k in _QR_FIELDS}
    qr.update({
        "name": name,
        "createTime": rfc3339(world.now()),
        "_created": world.now(),
        "state": {"state": "WAITING_FOR_RESOURCES", "stateInitiator": "USER"},
        "_zone": zone,
        "_node_names": [n["name"] for n in planned],
        "_chips": sum(n["_chips"] for n in planned),
        "_valid_after": valid_after,
        "_valid_until": valid_until,
    })
    op = world.new_operation(parent, "create", name)
    qr["_create_op"] = op["name"]
    world.queued[name] = qr
    if request_id:
        world.request_ids[f"{name}/{request_id}"] = op["name"]
    world.schedule(world.timings.qr_accept, "qr_accepted", name)
    return op


def get(world: World, name: str) -> dict[str, Any]:
    world.check_parent(name.rpartition("/queuedResources/")[0])
    if name not in world.queued:
        raise not_found(name)
    return world.queued[name]


def list_(world: World, parent: str, page_size: int, page_token: str) -> tuple[list[dict[str, Any]], str]:
    world.check_parent(parent)
    items = [q for n, q in sorted(world.queued.items()) if n.startswith(parent + "/queuedResources/")]
    return page(items, page_size, page_token)


def delete(world: World, name: str, force: bool) -> dict[str, Any]:
    qr = get(world, name)
    state = qr["state"]["state"]
    nodes_left = any(n in world.nodes for n in qr["_node_names"])
    if not force and state not in _DELETABLE_WITHOUT_FORCE and nodes_left:
        raise precondition(
            f"Queued resource {name} is {state} and has nodes; it can be deleted only when its "
            "nodes are gone or it is ACCEPTED, FAILED or SUSPENDED, or with force=true (which "
            "also deletes its nodes)")
    op = world.new_operation(name.rpartition("/queuedResources/")[0], "delete", name)
    qr.setdefault("_delete_ops", []).append(op["name"])
    if state != "DELETING":
        qr["state"] = {"state": "DELETING", "stateInitiator": "USER"}
        nodes = [world.nodes[n] for n in qr["_node_names"] if n in world.nodes]
        for node in nodes:
            node["state"] = "DELETING"
            node.pop("health", None)
        world.schedule(world.timings.node_delete if nodes else 1.0, "qr_deleted", name)
    return op


def reset(world: World, name: str) -> dict[str, Any]:
    qr = get(world, name)
    if qr["state"]["state"] != "SUSPENDED":
        raise precondition(f"Queued resource {name} is {qr['state']['state']}; only SUSPENDED resets")
    qr["state"] = {"state": "WAITING_FOR_RESOURCES", "stateInitiator": "USER"}
    op = world.new_operation(name.rpartition("/queuedResources/")[0], "reset", name)
    world.finish(op["name"], response=_snapshot(qr))
    return op


def place_waiting(world: World) -> bool:
    """Provision waiting queued resources that fit; fail those whose window closed."""
    changed = False
    now = world.now()
    for qr in sorted(world.queued.values(), key=lambda q: q["_created"]):
        state = qr["state"]["state"]
        if state not in _WAITING:
            continue
        if qr["_valid_until"] is not None and now >= qr["_valid_until"]:
            qr["state"] = {"state": "FAILED", "stateInitiator": "SERVICE", "failedData": {"error": {
                "code": 4, "message": "The queued resource's validity window closed before "
                "capacity became available"}}}
            changed = True
        elif now >= qr["_valid_after"] and qr["_chips"] <= world.free_chips(qr["_zone"]):
            _provision(world, qr)
            changed = True
        elif state == "ACCEPTED":  # a world saved by an older fake
            qr["state"] = {"state": "WAITING_FOR_RESOURCES", "stateInitiator": "SERVICE"}
            changed = True
    return changed


def _provision(world: World, qr: dict[str, Any]) -> None:
    parent, _, qr_id = qr["name"].rpartition("/queuedResources/")
    for spec_node in _planned_nodes(world, parent, qr, qr_id):
        spec_node.update({"queuedResource": qr["name"], "_reserved": True})
        world.nodes[spec_node["name"]] = spec_node
    qr["state"] = {"state": "PROVISIONING", "stateInitiator": "SERVICE"}
    world.schedule(world.timings.node_create, "qr_active", qr["name"])


def preempt(world: World, qr: dict[str, Any]) -> None:
    state = qr["state"]["state"]
    if state not in {"ACTIVE", "PROVISIONING"}:
        raise precondition(f"Queued resource {qr['name']} is {state}; cannot preempt it")
    for name in qr["_node_names"]:
        if name in world.nodes:
            world.nodes[name]["state"] = "PREEMPTED"
            world.nodes[name].pop("health", None)
    qr["state"] = {"state": "SUSPENDING", "stateInitiator": "SERVICE"}
    world.schedule(world.timings.qr_suspend, "qr_suspended", qr["name"])


# ---- transitions (called through world._HANDLERS) ------------------------------------


def qr_accepted(world: World, name: str) -> None:
    """The create operation finishes; the resource itself waits (or provisions) on."""
    qr = world.queued.get(name)
    if qr is None:
        return
    world.finish(qr.get("_create_op"), response=_snapshot(qr))


def qr_active(world: World, name: str) -> None:
    qr = world.queued.get(name)
    if qr is None or qr["state"]["state"] != "PROVISIONING":
        return
    for node_name in qr["_node_names"]:
        world.make_ready(world.nodes[node_name])
    qr["state"] = {"state": "ACTIVE", "stateInitiator": "SERVICE"}


def qr_suspended(world: World, name: str) -> None:
    qr = world.queued.get(name)
    if qr is None or qr["state"]["state"] != "SUSPENDING":
        return
    for node_name in qr["_node_names"]:
        world.nodes.pop(node_name, None)
    qr["state"] = {"state": "SUSPENDED", "stateInitiator": "SERVICE"}


def qr_deleted(world: World, name: str) -> None:
    qr = world.queued.pop(name, None)
    if qr is None:
        return
    for node_name in qr["_node_names"]:
        world.nodes.pop(node_name, None)
    world.finish(qr.get("_create_op"), error=(10, f"{name} was deleted before it was accepted"))
    for op in qr.get("_delete_ops", []):
        world.finish(op)
