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
    POST /admin/reset                       forget everything
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from aiohttp import web

from podctl.fake import tpu_api, wire
from podctl.fake.apierror import ApiError, invalid
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
    cloud.world.advance()
    return {"now": cloud.world.now()}


def _reset(cloud: FakeCloud, body: dict) -> dict:
    cloud.world = World()
    cloud.faults.clear()
    cloud.calls.clear()
    cloud.latency = 0.0
    return {}


def _reset_stats(cloud: FakeCloud, body: dict) -> dict:
    cloud.calls.clear()
    return {}


_GET: dict[str, Action] = {
    "status": lambda cloud, body: cloud.describe(),
    "resources": lambda cloud, body: cloud.world.resources(),
    "stats": lambda cloud, body: {"calls": sum(cloud.calls.values()), "by_call": dict(cloud.calls)},
}
_POST: dict[str, Action] = {
    "fail": _fail, "latency": _latency, "preempt": _preempt, "capacity": _capacity, "quota": _quota,
    "timings": _timings, "advance": _advance, "reset": _reset, "stats/reset": _reset_stats,
}


def add_routes(app: web.Application, cloud: FakeCloud) -> None:
    def handler(action: Action, mutates: bool) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = await request.json() if request.can_read_body else {}
                cloud.world.advance()
                result = action(cloud, body if isinstance(body, dict) else {})
                if mutates:
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
