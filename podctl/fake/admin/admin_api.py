"""The fake cloud's admin API (under /admin/, never /v2/): the switches tests and
`podctl fake` use to look inside the world and to move it.

    GET  /admin/status                      who and where this fake cloud is
    GET  /admin/resources                   every node and queued resource that exists
    GET  /admin/stats                       Cloud TPU API calls served, by call
    POST /admin/stats/reset
    POST /admin/quota     {project, zone, chips}   the project's chip quota (null: none)
    POST /admin/project   {project, exists?, api_enabled?, denied?}   a project's switches: known
                                            or not, Cloud TPU API enabled or not, permissions
                                            its caller lacks (e.g. ["tpu.nodes.create"])
    POST /admin/iam       {secure?, bucket?, member?, role?, remove?}   the project's IAM on
                                            buckets (iam.py): secure-by-default or as older
                                            organisations' (the default compute account an
                                            editor), and one binding added (or removed)
    POST /admin/network   {project?, network, firewalls}   a VPC network and its firewall rules
                                            (Compute Engine's shape; compute.py)
    POST /admin/guest_attributes {name, worker, namespace, key, value}   what host WORKER of node
                                            NAME publishes (as a TPU VM's agent does); nodes.
                                            getGuestAttributes returns it
    POST /admin/timings   {time_scale?, node_create?, ..., preempt_grace?}   how fast the world
                                            moves (preempt_grace in wall-clock seconds)
    POST /admin/advance   {seconds}         move the clock forward (simulated seconds)
    POST /admin/FAULT {args}             every fault of faults.FAULTS (preempt, kill-host,
                                            cut-ssh, drop-host, gcs-outage, fail-calls, ...):
                                            the table names each one's arguments
    GET  /admin/faults                      that table, as JSON
    GET  /admin/hosts                       live fake hosts: {node: {ports, alive, connections, sessions,
                                            no_ssh, workers: [{worker, alive, boots, ssh_total,
                                            sessions_total}]}}, and the preempted nodes still in
                                            their grace
    POST /admin/reset                       forget everything (world, switches, GCS objects)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from podctl.fake.admin import faults
from podctl.fake.api import compute, wire
from podctl.fake.api.apierror import ApiError, invalid
from podctl.fake.storage import iam
from podctl.fake.world import Timings, World

if TYPE_CHECKING:
    from podctl.fake.api.server import FakeCloud

Action = Callable[["FakeCloud", dict[str, Any]], Any]


def _seconds(body: dict[str, Any], key: str, default: float | None = 0.0) -> float | None:
    """A non-negative, finite number of seconds from BODY (DEFAULT when absent)."""
    value = body.get(key)
    if value is None:
        return default
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise invalid(f"{key} must be a number of seconds >= 0, not {value!r}")
    return seconds


def _quota(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    key = f"{body.get('project', cloud.project)}/{body.get('zone', cloud.zone)}"
    if body.get("chips") is None:
        cloud.world.quota.pop(key, None)
    else:
        cloud.world.quota[key] = int(body["chips"])
    return {"quota": cloud.world.quota}


def _project(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    project = body.get("project")
    if not isinstance(project, str) or not project:
        raise invalid("project takes {project, exists?, api_enabled?, denied?}")
    switches = cloud.world.projects.setdefault(project, {})
    for key in ("exists", "api_enabled"):
        if key in body:
            switches[key] = bool(body[key])
    if "denied" in body:
        switches["denied"] = [str(p) for p in body["denied"] or []]
    return {"projects": cloud.world.projects}


def _guest_attributes(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    node = faults.find_node(cloud, str(body.get("name", "")))
    worker = int(body.get("worker", 0))
    if not 0 <= worker < node["_hosts"]:
        raise invalid(f"{node['name']} has workers 0-{node['_hosts'] - 1}")
    entry = {k: str(body.get(k, "")) for k in ("namespace", "key", "value")}
    if not entry["namespace"] or not entry["key"]:
        raise invalid("guest_attributes takes {name, worker, namespace, key, value}")
    # the store the hosts' metadata servers write (podctl/fake/vm/metadata.py)
    keys = node.setdefault("_guest", {}).setdefault(str(worker), {}).setdefault(entry["namespace"], {})
    keys[entry["key"]] = entry["value"]
    return {"published": sum(len(k) for k in node["_guest"][str(worker)].values())}


def _timings(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    world = cloud.world
    known = {f.name for f in dataclasses.fields(Timings)} | {"time_scale"}
    if set(body) - known:
        raise invalid(f"unknown timings {sorted(set(body) - known)}; known: {sorted(known)}")
    if "time_scale" in body:
        if float(body["time_scale"]) <= 0:
            raise invalid("time_scale must be positive")
        world.time_scale = float(body.pop("time_scale"))
    values = {k: _seconds(body, k) or 0.0 for k in body}  # null: 0 s, as an absent key
    world.timings = dataclasses.replace(world.timings, **values)
    return {"time_scale": world.time_scale, **dataclasses.asdict(world.timings)}


def _advance(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    seconds = float(body.get("seconds", 0))
    if seconds < 0:
        raise invalid("the clock only moves forward")
    cloud.world.clock_offset += seconds / cloud.world.time_scale
    cloud.advance()
    return {"now": cloud.world.now()}


def _iam(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    policy = cloud.world.iam
    if "secure" in body:
        policy["secure"] = bool(body["secure"])
    if body.get("role") or body.get("member"):
        iam.bind(policy, str(body.get("bucket") or cloud.bucket), str(body.get("member", "")),
                 str(body.get("role", "")), remove=bool(body.get("remove")))
    return {"iam": policy}


def _reset(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    cloud.world = World(iam=iam.initial(bool(cloud.secure)))
    cloud.faults.clear()
    cloud.calls.clear()
    cloud.latency = 0.0
    if cloud.hosts:
        cloud.hosts.latency = 0.0
    if cloud.gcs:
        cloud.gcs.outage(0)
        cloud.gcs.wipe()
    return {}


def _hosts(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": cloud.hosts.describe() if cloud.hosts else {},
            "host_latency": cloud.hosts.latency if cloud.hosts else 0.0,
            "in_grace": sorted(cloud.hosts.dying) if cloud.hosts else []}  # preempted, not yet SIGKILLed


def _reset_stats(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    cloud.calls.clear()
    return {}


def _network(cloud: FakeCloud, body: dict[str, Any]) -> dict[str, Any]:
    return compute.add_network(cloud.world, body, cloud.project)


_GET: dict[str, Action] = {
    "status": lambda cloud, body: cloud.describe(),
    "resources": lambda cloud, body: cloud.world.resources(),
    "stats": lambda cloud, body: {"calls": sum(cloud.calls.values()), "by_call": dict(cloud.calls)},
    "hosts": _hosts,
    "faults": lambda cloud, body: {"faults": faults.listing()},
}
_POST: dict[str, Action] = {
    "quota": _quota, "project": _project, "iam": _iam, "guest_attributes": _guest_attributes, "network": _network,
    "timings": _timings, "advance": _advance, "reset": _reset, "stats/reset": _reset_stats,
    # every fault, from the one table (its arguments checked there)
    **{f.name: (lambda f: lambda cloud, body: f.act(cloud, f.check(body)))(f) for f in faults.FAULTS},  # noqa: B023 (bound by the outer lambda)
}


def add_routes(app: web.Application, cloud: FakeCloud) -> None:
    def handler(action: Action, mutates: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = await request.json() if request.can_read_body else {}
                changed = cloud.advance()
                result = action(cloud, body if isinstance(body, dict) else {})
                if mutates:
                    cloud.sync_hosts()  # e.g. a preempted node's hosts vanish before we answer
                if mutates or changed:
                    cloud.save()
                return web.json_response(result)
            except ApiError as e:
                return web.json_response(wire.error_body(e.http_status, e.status, e.message),
                                         status=e.http_status)
            except (ValueError, TypeError) as e:
                return web.json_response(wire.error_body(400, "INVALID_ARGUMENT", str(e)), status=400)

        return handle

    for path, action in _GET.items():
        app.router.add_get(f"/admin/{path}", handler(action, mutates=False))
    for path, action in _POST.items():
        app.router.add_post(f"/admin/{path}", handler(action, mutates=True))
