"""Host maintenance and host health in the fake: what a TPU VM announces before
maintenance, what the maintenance does, and a node's health and symptoms.

Sources (podctl/fake/README.md's table):
  - v2alpha1 UpcomingMaintenance {type SCHEDULED|UNSCHEDULED, canReschedule,
    windowStartTime, windowEndTime, latestWindowStartTime, maintenanceStatus
    PENDING|ONGOING} on Node.upcomingMaintenance (google-cloud-tpu's tpu_v2alpha1 types;
    the v2 Node has no such field, so /v2/ never shows it).
  - v2alpha1 nodes.simulateMaintenanceEvent: POST .../nodes/N:simulateMaintenanceEvent
    {workerIds: [string]}, a long-running operation; "if empty, worker 0 is selected ...
    a maintenance event will only be fired on the first specified worker ID"
    (SimulateMaintenanceEventRequest's doc in the generated clients).
  - the metadata server: instance/maintenance-event is NONE until 60 s before a
    maintenance (GCE's live-migration notice page), then TERMINATE_ON_HOST_MAINTENANCE
    (TPU VMs do not live-migrate); instance/upcoming-maintenance is 404 when none is
    planned, else JSON with window_start_time, window_end_time, latest_window_start_time,
    type, maintenance_status, can_reschedule (GCE's "monitor and plan for a host
    maintenance event" page: snake_case there, unlike the REST type).
  - Node.health (HEALTHY, TIMEOUT, UNHEALTHY_TENSORFLOW, UNHEALTHY_MAINTENANCE) and
    Node.symptoms [{createTime, symptomType, details, workerId}] (cloud_tpu.proto v2).

Approximate: while a maintenance is ONGOING every host of the node is down (no SSH, no
metadata server, its processes killed), not just the workers it names, since one lost
host ends a multi-host JAX job anyway; the node stays READY with health
UNHEALTHY_MAINTENANCE, and comes back HEALTHY with its hosts (same homes) at the
window's end.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from podctl.fake.api.apierror import ApiError, invalid, precondition, rfc3339

if TYPE_CHECKING:
    from podctl.fake.world import World

NOTICE_SECONDS = 60.0  # maintenance-event changes this long (simulated) before the window
DEFAULT_WINDOW = 600.0  # simulated seconds a maintenance keeps the hosts down
HEALTHS = ("HEALTHY", "TIMEOUT", "UNHEALTHY_TENSORFLOW", "UNHEALTHY_MAINTENANCE")
SYMPTOMS = {"LOW_MEMORY": 1, "OUT_OF_MEMORY": 2, "EXECUTE_TIMED_OUT": 3, "MESH_BUILD_FAIL": 4,
            "HBM_OUT_OF_MEMORY": 5, "PROJECT_ABUSE": 6}
_EVENT = "TERMINATE_ON_HOST_MAINTENANCE"


def announce(world: World, node: dict[str, Any], after: float, workers: list[int] | None,
             window: float = DEFAULT_WINDOW, kind: str = "SCHEDULED") -> dict[str, Any]:
    """Plan a maintenance of NODE's WORKERS (all: None) AFTER simulated seconds, lasting
    WINDOW simulated seconds. Returns it (times as wall-clock epoch seconds)."""
    if node.get("state") != "READY":
        raise precondition(f"Node {node['name']} is {node.get('state')}; only a READY node "
                           "has maintenance")
    hosts = int(node.get("_hosts", 1))
    bad = [w for w in workers or [] if not 0 <= w < hosts]
    if bad:
        raise invalid(f"{node['name']} has workers 0 to {hosts - 1}, not {bad[0]}")
    start = world.now() + after / world.time_scale
    plan = {"id": secrets.token_hex(4), "start": start, "end": start + window / world.time_scale,
            "workers": sorted(workers) if workers else list(range(hosts)), "type": kind,
            "status": "PENDING"}
    node["_maintenance"] = plan
    target = f"{node['name']}#{plan['id']}"
    world.schedule(after, "maintenance_start", target)
    world.schedule(after + window, "maintenance_end", target)
    return plan


def simulate(world: World, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """v2alpha1 nodes.simulateMaintenanceEvent: a maintenance on the first of WORKERIDS
    (worker 0 if none) after the 60-s notice; an operation, done when it has started."""
    node = world.get_node(name)
    ids = body.get("workerIds") or ["0"]
    if not isinstance(ids, list) or not all(isinstance(i, str) and i.isdigit() for i in ids):
        raise invalid("workerIds must be a list of worker ids (\"0\", \"1\", ...)")
    plan = announce(world, node, NOTICE_SECONDS, [int(ids[0])], kind="UNSCHEDULED")
    op = world.new_operation(name.rpartition("/nodes/")[0], "simulateMaintenanceEvent", name)
    plan["op"] = op["name"]
    return op


def _plan(world: World, target: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    name, _, plan_id = target.partition("#")
    node = world.nodes.get(name)
    plan = (node or {}).get("_maintenance")
    if node is None or plan is None or plan.get("id") != plan_id:
        return None, None  # deleted, or planned again since
    return node, plan


def started(world: World, target: str) -> None:
    node, plan = _plan(world, target)
    if node is None or plan is None:
        return
    plan["status"] = "ONGOING"
    if node.get("state") == "READY":
        node["health"] = "UNHEALTHY_MAINTENANCE"
        node["_hosts_down"] = True  # hosts.py: no hosts while this is set
    world.finish(plan.pop("op", None))


def ended(world: World, target: str) -> None:
    node, plan = _plan(world, target)
    if node is None or plan is None:
        return
    node.pop("_maintenance", None)
    node.pop("_hosts_down", None)
    if node.get("state") == "READY":
        node["health"] = "HEALTHY"


HANDLERS = {"maintenance_start": started, "maintenance_end": ended}


# ---- what the API and the metadata server show ------------------------------------------


def upcoming(node: dict[str, Any]) -> dict[str, Any] | None:
    """v2alpha1 Node.upcomingMaintenance, or None."""
    plan = node.get("_maintenance")
    if not plan:
        return None
    return {"type": plan["type"], "canReschedule": False,
            "windowStartTime": rfc3339(plan["start"]), "windowEndTime": rfc3339(plan["end"]),
            "latestWindowStartTime": rfc3339(plan["start"]), "maintenanceStatus": plan["status"]}


def metadata_upcoming(node: dict[str, Any], worker: int) -> dict[str, Any] | None:
    """instance/upcoming-maintenance for WORKER, as GCE's metadata server writes it."""
    plan = node.get("_maintenance")
    if not plan or worker not in plan["workers"]:
        return None
    return {"can_reschedule": False, "latest_window_start_time": rfc3339(plan["start"]),
            "maintenance_status": plan["status"], "type": plan["type"],
            "window_end_time": rfc3339(plan["end"]), "window_start_time": rfc3339(plan["start"])}


def metadata_event(node: dict[str, Any], worker: int, now: float, time_scale: float) -> str:
    """instance/maintenance-event for WORKER at NOW."""
    plan = node.get("_maintenance")
    if not plan or worker not in plan["workers"]:
        return "NONE"
    return _EVENT if now >= plan["start"] - NOTICE_SECONDS / time_scale else "NONE"


# ---- health and symptoms ------------------------------------------------------------------


def set_health(world: World, node: dict[str, Any], health: str, symptom: str | None, worker: int | None,
               details: str = "") -> dict[str, Any]:
    """NODE's health (and a symptom on WORKER), as Cloud TPU reports a sick host."""
    if node.get("state") != "READY":
        raise precondition(f"Node {node['name']} is {node.get('state')}; health is a READY node's")
    node["health"] = health
    if health == "HEALTHY":
        node.pop("symptoms", None)
        node.pop("healthDescription", None)
    if symptom:
        entry: dict[str, Any] = {"createTime": rfc3339(world.now()), "symptomType": symptom,
                                 "details": details or f"{symptom} on worker {worker or 0}"}
        if worker is not None:
            entry["workerId"] = str(worker)
        node.setdefault("symptoms", []).append(entry)
        node["healthDescription"] = entry["details"]
    return {"health": node["health"], "symptoms": node.get("symptoms", [])}


# ---- the two v2alpha1 calls served (/v2alpha1/...) ----------------------------------------

_NODE = re.compile(r"^(projects/[^/:]+/locations/[^/:]+/nodes/[^/:]+)(:simulateMaintenanceEvent)?$")


def v2alpha1(world: World, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """GET nodes/N (the v2 node plus upcomingMaintenance) and POST
    nodes/N:simulateMaintenanceEvent; any other v2alpha1 call is 404 here."""
    from podctl.fake.api import wire

    found = _NODE.match(path)
    if found and method == "GET" and not found.group(2):
        node = world.get_node(found.group(1))
        extra = {"upcomingMaintenance": upcoming(node)} if node.get("_maintenance") else {}
        return {**wire.render_node(node, False), "apiVersion": "V2_ALPHA1", **extra}
    if found and method == "POST" and found.group(2):
        return wire.render_operation(simulate(world, found.group(1), body), False)
    raise ApiError(404, "NOT_FOUND", f"No such method in the fake's v2alpha1: {method} /v2alpha1/{path}")
