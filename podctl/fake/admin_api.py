"""The fake cloud's admin API (under /admin/, never /v2/): the switches tests and
`podctl fake` use to look inside the world and to move it.

    GET  /admin/status                      who and where this fake cloud is
    GET  /admin/resources                   every node and queued resource that exists
    GET  /admin/stats                       Cloud TPU API calls served, by call
    POST /admin/stats/reset
    POST /admin/fail      {count, code, call?}   the next COUNT /v2/ calls (of CALL) fail: 403, 429, 503,
                                            "drop" (reset, not done), "lose" (done, answer lost)
    POST /admin/latency   {seconds}         added to every /v2/ call
    POST /admin/preempt   {name, after?}    preempt a node / queued resource now or later
    POST /admin/capacity  {zone, chips}     chips free to TPUs in a zone (null: a whole pod)
    POST /admin/quota     {project, zone, chips}   the project's chip quota (null: none)
    POST /admin/timings   {time_scale?, node_create?, ...}   how fast the world moves
    POST /admin/advance   {seconds}         move the clock forward (simulated seconds)
    POST /admin/host_latency {seconds}      delay before each SSH connection to a fake host is
                                            accepted (a simulated round trip; default 0)
    POST /admin/drop_host {name, worker}    one host of a READY node vanishes (node stays READY)
    GET  /admin/hosts                       live fake hosts: {node: {ports, alive, connections, sessions}}
    POST /admin/reset                       forget everything (world, switches, GCS objects)
"""

from __future__ import annotations

import dataclasses
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


def _preempt(cloud: FakeCloud, body: dict) -> dict:
    cloud.world.preempt(str(body.get("name", "")), float(body.get("after", 0) or 0))
    return cloud.world.resources()


def _capacity(cloud: FakeCloud, body: dict) -> dict:
    zone, chips = body.get("zone", cloud.zone), body.get("chips")
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


def _timings(cloud: FakeCloud, body: dict) -> dict:
    world = cloud.world
    known = {f.name for f in dataclasses.fields(Timings)} | {"time_scale"}
    if set(body) - known:
        raise invalid(f"unknown timings {sorted(set(body) - known)}; known: {sorted(known)}")
    if "time_scale" in body:
        if float(body["time_scale"]) <= 0:
            raise invalid("time_scale must be positive")
        world.time_scale = float(body.pop("time_scale"))
    world.timings = dataclasses.replace(world.timings, **{k: float(v) for k, v in body.items()})
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
        cloud.gcs.wipe()
    return {}


def _host_latency(cloud: FakeCloud, body: dict) -> dict:
    seconds = float(body.get("seconds", 0))
    if seconds < 0:
        raise invalid("host latency must be >= 0")
    if cloud.hosts:
        cloud.hosts.latency = seconds
    return {"host_latency": seconds}


def _drop_host(cloud: FakeCloud, body: dict) -> dict:
    _, node = cloud.world.find(str(body.get("name", "")))
    try:
        assert cloud.hosts is not None
        cloud.hosts.drop_host(node["name"], int(body.get("worker", 0)))
    except (KeyError, AssertionError) as e:
        raise precondition(f"cannot drop that host: {e}") from e
    return _hosts(cloud, body)


def _hosts(cloud: FakeCloud, body: dict) -> dict:
    return {"nodes": cloud.hosts.describe() if cloud.hosts else {},
            "host_latency": cloud.hosts.latency if cloud.hosts else 0.0}


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
    "timings": _timings, "advance": _advance, "reset": _reset, "stats/reset": _reset_stats,
    "host_latency": _host_latency, "drop_host": _drop_host,
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
