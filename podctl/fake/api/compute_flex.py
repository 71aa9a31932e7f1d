"""Flex-start through Compute Engine, as the fake serves it: a MIG's resize requests
(`instanceGroupManagerResizeRequests`), the only way a MIG of FLEX_START VMs grows.

    POST/GET     projects/P/zones/Z/instanceGroupManagers/M/resizeRequests
    GET/DELETE   projects/P/zones/Z/instanceGroupManagers/M/resizeRequests/R
    POST         projects/P/zones/Z/instanceGroupManagers/M/resizeRequests/R/cancel

A request is ACCEPTED and waits (flex-start's queue) until the zone has the slice's chips;
then CREATING, the MIG's target size grows by `resizeBy` and its VMs are made all at once
(compute_tpu._make_vms); SUCCEEDED once they run. At the end of `requestedRunDuration` the
VMs are deleted (the MIG stays, at 0). Deleting the MIG takes its requests with it.
Sources (docs: "About resize requests in a MIG", "Create resize requests in a MIG", gcloud's
`resize-requests create`) and guesses: fake/README.md's rows.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING, Any

from podctl.base import topology
from podctl.fake.api import compute_tpu as ce
from podctl.fake.api.apierror import rfc3339

if TYPE_CHECKING:
    from podctl.fake.world import World

MIN_RUN, MAX_RUN = 600, 7 * 24 * 3600  # gcloud: --requested-run-duration between 10m and 7d
ACTIVE = ("ACCEPTED", "CREATING")


def _seconds(duration: Any) -> int | None:
    """A Duration's `seconds` (int64: a string in proto JSON, or a number)."""
    value = (duration or {}).get("seconds") if isinstance(duration, dict) else None
    text = str(value) if value is not None else ""
    return int(text) if text.isdigit() else None


def serve(world: World, method: str, project: str, rest: str, body: Any) -> dict[str, Any] | None:
    """One resizeRequests call, or None where REST is not one."""
    found = re.fullmatch(r"zones/([^/]+)/instanceGroupManagers/([^/]+)/resizeRequests(?:/([^/]+)(/cancel)?)?",
                         rest)
    if not found:
        return None
    zone, mig_name, name, cancel = found.groups()
    mig = ce._mig(world, project, zone, mig_name)
    requests: dict[str, dict[str, Any]] = mig.setdefault("_resize_requests", {})
    if name is None:
        if method == "POST":
            return _insert(world, project, zone, mig, body)
        items = [_shown(r) for _, r in sorted(requests.items())]
        return {"kind": "compute#instanceGroupManagerResizeRequestList", **({"items": items} if items else {})}
    request = requests.get(name)
    path = f"projects/{project}/{rest.removesuffix('/cancel')}"
    if request is None:
        raise ce._not_found(path)
    target = f"zones/{zone}/instanceGroupManagers/{mig_name}/resizeRequests/{name}"
    if cancel and method == "POST":
        if request["state"] != "ACCEPTED":
            raise ce.ComputeError(400, f"The resize request '{path}' is {request['state']}: only an ACCEPTED "
                                  "request can be cancelled", "invalid")
        request["state"] = "CANCELLED"
        return ce._operation(world, project, f"zones/{zone}", "cancel", target, target_id=request["id"])
    if method == "DELETE":
        if request["state"] in ACTIVE:
            raise ce.ComputeError(400, f"The resize request '{path}' is {request['state']}: cancel it "
                                  "first (only an inactive request can be deleted)", "invalid")
        del requests[name]
        return ce._operation(world, project, f"zones/{zone}", "delete", target, target_id=request["id"])
    if method == "GET":
        return _shown(request)
    raise ce.ComputeError(405, "Method not allowed by the fake", "methodNotAllowed")


def _shown(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if not k.startswith("_")}


def _insert(world: World, project: str, zone: str, mig: dict[str, Any], body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ce.ComputeError(400, "Invalid JSON payload received.", "parseError")
    name = ce._name(body)
    requests = mig["_resize_requests"]
    link = f"{mig['selfLink']}/resizeRequests/{name}"
    if name in requests:
        raise ce._exists(ce._tail(link))
    sliced = topology.parse_slice(mig["_slice"])
    by = body.get("resizeBy")
    if not isinstance(by, int) or by != sliced.hosts:
        raise ce._invalid("resource.resizeBy", f"'{by}': a MIG of a {sliced.name} slice ({mig['_topology']}) "
                          f"grows by its whole slice, {sliced.hosts} VMs")
    if mig["targetSize"] or any(r["state"] in ACTIVE for r in requests.values()):
        raise ce._invalid("resource.resizeBy", "the MIG already has its VMs, or a resize request in flight")
    template = world.templates[ce._tail(mig["instanceTemplate"]).replace("/global/instanceTemplates/", "/")]
    run = _seconds(body.get("requestedRunDuration"))
    if ce.is_flex(template) and (run is None or not MIN_RUN <= run <= MAX_RUN):
        raise ce._invalid("resource.requestedRunDuration", f"flex-start VMs need a run duration of "
                          f"{MIN_RUN} s (10m) to {MAX_RUN} s (7d), not {body.get('requestedRunDuration')!r}")
    request = {"kind": "compute#instanceGroupManagerResizeRequest", "name": name,
               "id": str(secrets.randbelow(2**62)), "creationTimestamp": rfc3339(world.now()),
               "description": body.get("description", ""), "resizeBy": by, "state": "ACCEPTED",
               "zone": mig["zone"], "selfLink": link}
    if run is not None:
        request["requestedRunDuration"] = {"seconds": str(run)}
    requests[name] = request
    place(world)
    return ce._operation(world, project, f"zones/{zone}", "insert",
                         f"zones/{zone}/instanceGroupManagers/{mig['name']}/resizeRequests/{name}",
                         target_id=request["id"])


def place(world: World) -> bool:
    """Every ACCEPTED request whose zone now has its slice's chips: CREATING, its VMs made
    all at once; every CREATING one whose VMs run: SUCCEEDED. True if any was placed (the
    world's clock calls this on each advance)."""
    placed = False
    for mig in world.migs.values():
        for request in (mig.get("_resize_requests") or {}).values():
            zone = mig["zone"].rsplit("/", 1)[-1]
            project = ce._tail(mig["selfLink"]).split("/", 1)[0]
            node = world.nodes.get(ce.node_name(project, zone, mig["name"]))
            if request["state"] == "CREATING" and node is not None and node["state"] == "READY":
                request["state"] = "SUCCEEDED"
            chips = topology.parse_slice(mig["_slice"]).chips
            if request["state"] != "ACCEPTED" or world.free_chips(zone) < chips:
                continue
            request["state"] = "CREATING"
            mig["targetSize"] = request["resizeBy"]
            ce._make_vms(world, mig, project, zone, request["resizeBy"])
            run = _seconds(request.get("requestedRunDuration"))
            if run is not None:
                world.schedule(run, "flex_run_ended", ce.node_name(project, zone, mig["name"]))
            placed = True
    return placed


def run_ended(world: World, node: str) -> None:
    """Flex-start's run duration is over: Compute Engine deletes the VMs (the MIG stays, at 0)."""
    record = world.nodes.get(node)
    if record is None or record["state"] == "DELETING":
        return
    for mig in world.migs.values():
        if mig["selfLink"] == record.get("_mig"):
            mig["targetSize"] = 0
    record["state"] = "DELETING"
    world.schedule(world.timings.node_delete, "mig_vms_gone", node)


HANDLERS = {"flex_run_ended": run_ended}
