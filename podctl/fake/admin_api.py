"""The fake cloud's admin API (under /admin/, never /v2/): the switches tests and
`podctl fake` use to look inside the world and to move it.

    GET  /admin/status                      who and where this fake cloud is
    GET  /admin/resources                   every node and queued resource that exists
    GET  /admin/stats                       Cloud TPU API calls served, by call
    POST /admin/stats/reset
    POST /admin/fail      {count, code, call?}   the next COUNT /v2/ calls (of CALL) fail: 403, 429, 503,
                                            "drop" (reset, not done), "lose" (done, answer lost)
    POST /admin/latency   {seconds}         added to every /v2/ call
    POST /admin/preempt   {name, after?, grace?}   preempt a node / queued resource now or AFTER
                                            simulated seconds; its hosts' processes get SIGTERM,
                                            then SIGKILL after GRACE wall-clock seconds
                                            (default: timings.preempt_grace)
    POST /admin/capacity  {zone, chips}     chips free to TPUs in a zone (null: a whole pod)
    POST /admin/quota     {project, zone, chips}   the project's chip quota (null: none)
    POST /admin/project   {project, exists?, api_enabled?, denied?}   a project's switches: known
                                            or not, Cloud TPU API enabled or not, permissions
                                            its caller lacks (e.g. ["tpu.nodes.create"])
    POST /admin/guest_attributes {name, worker, namespace, key, value}   what host WORKER of node
                                            NAME publishes (as a TPU VM's agent does); nodes.
                                            getGuestAttributes returns it
    POST /admin/timings   {time_scale?, node_create?, ..., preempt_grace?}   how fast the world
                                            moves (preempt_grace in wall-clock seconds)
    POST /admin/advance   {seconds}         move the clock forward (simulated seconds)
    POST /admin/host_latency {seconds}      delay before each SSH connection to a fake host is
                                            accepted (a simulated round trip; default 0)
    POST /admin/drop_host {name, worker}    one host of a READY node vanishes (node stays READY)
    POST /admin/kill_processes {name, worker, signal?}   every process one host started gets
                                            signal TERM or KILL (default); the host stays up
    POST /admin/cut_ssh   {name, worker}    abort one host's SSH connections; new ones work
    POST /admin/gcs_outage {seconds}        GCS answers 503 to everything for SECONDS (wall clock;
                                            0 ends an outage)
    GET  /admin/hosts                       live fake hosts: {node: {ports, alive, connections, sessions}},
                                            and the preempted nodes still in their grace
    POST /admin/reset                       forget everything (world, switches, GCS objects)
"""

from __future__ import annotations

import dataclasses
import math
import signal
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from aiohttp import web

from podctl.fake import tpu_api, wire
from podctl.fake.apierror import ApiError, invalid, precondition
from podctl.fake.world import Timings, World

if TYPE_CHECKING:
    from podctl.fake.server import FakeCloud

Action = Callable[["FakeCloud", dict], Any]


def _fail(cloud: FakeCloud, body: dict) -> dict:
    code, count = str(body.get("code", "503")), int(body.get("count", 1))
    if code not in {"403", "429", "503", "drop", "lose"} or count < 0:
        raise invalid("fail takes count >= 0 and code 403, 429, 503, drop or lose")
    call = body.get("call")
    if call is not None and not any(route.call == call for route in tpu_api.ROUTES):
        raise invalid(f"no call named {call!r}; e.g. nodes.create, operations.get")
    cloud.faults = [(code, call)] * count
    return {"pending_faults": len(cloud.faults)}


def _latency(cloud: FakeCloud, body: dict) -> dict:
    seconds = float(body.get("seconds", 0))
    if seconds < 0:
        raise invalid("latency must be >= 0")
    cloud.latency = seconds
    return {"latency": seconds}


def _seconds(body: dict, key: str, default: float | None = 0.0) -> float | None:
    """A non-negative, finite number of seconds from BODY (DEFAULT when absent)."""
    value = body.get(key)
    if value is None:
        return default
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise invalid(f"{key} must be a number of seconds >= 0, not {value!r}")
    return seconds


def _find(cloud: FakeCloud, body: dict) -> tuple[str, dict]:
    name = str(body.get("name", ""))
    try:
        return cloud.world.find(name)
    except ApiError as e:
        raise ApiError(404, "NOT_FOUND", f"no node or queued resource named {name!r} in the "
                       "fake cloud (see `podctl ls`)") from e


def _preempt(cloud: FakeCloud, body: dict) -> dict:
    _find(cloud, body)
    cloud.world.preempt(str(body["name"]), _seconds(body, "after") or 0.0,
                        _seconds(body, "grace", None))
    return cloud.world.resources()


def _capacity(cloud: FakeCloud, body: dict) -> dict:
    zone, chips = body.get("zone") or cloud.zone, body.get("chips")
    if zone not in cloud.world.zones:
        raise invalid(f"the fake cloud has no zone {zone!r}; its zones: {', '.join(cloud.world.zones)}")
    if chips is not None and int(chips) < 0:
        raise invalid("capacity must be >= 0 chips (or null: a whole pod)")
    if chips is None:
        cloud.world.capacity.pop(zone, None)
    else:
        cloud.world.capacity[zone] = int(chips)
    return {"zone": zone, "capacity": cloud.world.zone_capacity(zone),
            "free": cloud.world.free_chips(zone)}


def _quota(cloud: FakeCloud, body: dict) -> dict:
    key = f"{body.get('project', cloud.project)}/{body.get('zone', cloud.zone)}"
    if body.get("chips") is None:
        cloud.world.quota.pop(key, None)
    else:
        cloud.world.quota[key] = int(body["chips"])
    return {"quota": cloud.world.quota}


def _project(cloud: FakeCloud, body: dict) -> dict:
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


def _guest_attributes(cloud: FakeCloud, body: dict) -> dict:
    kind, node = _find(cloud, body)
    if kind != "node":
        raise invalid("guest attributes are published by a node's hosts; name a node")
    worker = int(body.get("worker", 0))
    if not 0 <= worker < node["_hosts"]:
        raise invalid(f"{node['name']} has workers 0-{node['_hosts'] - 1}")
    entry = {k: str(body.get(k, "")) for k in ("namespace", "key", "value")}
    if not entry["namespace"] or not entry["key"]:
        raise invalid("guest_attributes takes {name, worker, namespace, key, value}")
    # the store the hosts' metadata servers write (podctl/fake/metadata.py)
    keys = node.setdefault("_guest", {}).setdefault(str(worker), {}).setdefault(entry["namespace"], {})
    keys[entry["key"]] = entry["value"]
    return {"published": sum(len(k) for k in node["_guest"][str(worker)].values())}


def _timings(cloud: FakeCloud, body: dict) -> dict:
    world = cloud.world
    known = {f.name for f in dataclasses.fields(Timings)} | {"time_scale"}
    if set(body) - known:
        raise invalid(f"unknown timings {sorted(set(body) - known)}; known: {sorted(known)}")
    if "time_scale" in body:
        if float(body["time_scale"]) <= 0:
            raise invalid("time_scale must be positive")
        world.time_scale = float(body.pop("time_scale"))
    values = {k: _seconds(body, k) for k in body}
    world.timings = dataclasses.replace(world.timings, **values)
    return {"time_scale": world.time_scale, **dataclasses.asdict(world.timings)}


def _advance(cloud: FakeCloud, body: dict) -> dict:
    seconds = float(body.get("seconds", 0))
    if seconds < 0:
        raise invalid("the clock only moves forward")
    cloud.world.clock_offset += seconds / cloud.world.time_scale
    cloud.advance()
    return {"now": cloud.world.now()}


def _reset(cloud: FakeCloud, body: dict) -> dict:
    cloud.world = World()
    cloud.faults.clear()
    cloud.calls.clear()
    cloud.latency = 0.0
    if cloud.hosts:
        cloud.hosts.latency = 0.0
    if cloud.gcs:
        cloud.gcs.outage(0)
        cloud.gcs.wipe()
    return {}


def _host_latency(cloud: FakeCloud, body: dict) -> dict:
    seconds = float(body.get("seconds", 0))
    if seconds < 0:
        raise invalid("host latency must be >= 0")
    if cloud.hosts:
        cloud.hosts.latency = seconds
    return {"host_latency": seconds}


def _on_host(cloud: FakeCloud, body: dict, act: Callable[[str, int], Any]) -> Any:
    """ACT(node name, worker) on a live host named by BODY's name and worker."""
    kind, resource = _find(cloud, body)
    if kind != "node":
        raise invalid(f"{resource['name']} is a queued resource; name one of its nodes")
    worker = body.get("worker")
    if isinstance(worker, bool) or not isinstance(worker, int):
        raise invalid(f"worker must be a host index (0, 1, ...), not {worker!r}")
    if cloud.hosts is None:
        raise precondition("the fake cloud's hosts are not running")
    try:
        return act(resource["name"], worker)
    except LookupError as e:
        raise precondition(str(e.args[0])) from e


def _drop_host(cloud: FakeCloud, body: dict) -> dict:
    _on_host(cloud, body, lambda name, worker: cloud.hosts.drop_host(name, worker))  # type: ignore[union-attr]
    return _hosts(cloud, body)


_SIGNALS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}


def _kill_processes(cloud: FakeCloud, body: dict) -> dict:
    name = str(body.get("signal", "KILL")).upper().removeprefix("SIG")
    if name not in _SIGNALS:
        raise invalid(f"signal must be TERM or KILL, not {body.get('signal')!r}")
    killed = _on_host(cloud, body, lambda node, worker: cloud.hosts.kill_processes(  # type: ignore[union-attr]
        node, worker, _SIGNALS[name]))
    return {"signalled": killed, "signal": name}


def _cut_ssh(cloud: FakeCloud, body: dict) -> dict:
    cut = _on_host(cloud, body, lambda node, worker: cloud.hosts.cut_ssh(node, worker))  # type: ignore[union-attr]
    return {"connections_cut": cut}


def _gcs_outage(cloud: FakeCloud, body: dict) -> dict:
    seconds = _seconds(body, "seconds")
    if cloud.gcs is None:
        raise precondition("the fake cloud's GCS is not running")
    cloud.gcs.outage(seconds or 0.0)
    return {"gcs_outage_seconds": seconds}


def _hosts(cloud: FakeCloud, body: dict) -> dict:
    return {"nodes": cloud.hosts.describe() if cloud.hosts else {},
            "host_latency": cloud.hosts.latency if cloud.hosts else 0.0,
            "in_grace": sorted(cloud.hosts.dying) if cloud.hosts else []}  # preempted, not yet SIGKILLed


def _reset_stats(cloud: FakeCloud, body: dict) -> dict:
    cloud.calls.clear()
    return {}


_GET: dict[str, Action] = {
    "status": lambda cloud, body: cloud.describe(),
    "resources": lambda cloud, body: cloud.world.resources(),
    "stats": lambda cloud, body: {"calls": sum(cloud.calls.values()), "by_call": dict(cloud.calls)},
    "hosts": _hosts,
}
_POST: dict[str, Action] = {
    "fail": _fail, "latency": _latency, "preempt": _preempt, "capacity": _capacity, "quota": _quota,
    "project": _project, "guest_attributes": _guest_attributes,
    "timings": _timings, "advance": _advance, "reset": _reset, "stats/reset": _reset_stats,
    "host_latency": _host_latency, "drop_host": _drop_host, "kill_processes": _kill_processes,
    "cut_ssh": _cut_ssh, "gcs_outage": _gcs_outage,
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
