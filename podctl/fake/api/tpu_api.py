"""The fake Cloud TPU v2 REST API: the paths google-cloud-tpu's REST transport calls.

Each route is (HTTP method, path pattern, call name, handler). A handler takes the
World, the path's named groups, the query and the JSON body, and returns the JSON
to answer with (enums still by name; `wire` encodes them as the client asked).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from podctl.fake.api import filters, queued, wire
from podctl.fake.api.apierror import ApiError, invalid, page
from podctl.fake.world import World

_P = r"(?P<parent>projects/[^/:]+/locations/[^/:]+)"
Handler = Callable[[World, dict[str, Any], dict[str, Any], dict[str, Any]], Any]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    call: str  # e.g. "nodes.get": what the stats count
    handler: Handler
    mutates: bool
    params: frozenset[str]  # the query parameters the call takes (tpu.v2.json)


# Google's system parameters, taken by every call (tpu.v2.json's top-level `parameters`;
# `$alt` and `$.xgafv` as google-cloud-tpu's REST transport spells them).
SYSTEM_PARAMS = frozenset({
    "$.xgafv", "$alt", "access_token", "alt", "callback", "fields", "key", "oauth_token",
    "prettyPrint", "quotaUser", "uploadType", "upload_protocol"})


def check_query(route: Route, query: Mapping[str, Any]) -> None:
    """Google's front end refuses a query parameter the call does not take (400)."""
    for name in query:
        if name not in route.params and name not in SYSTEM_PARAMS:
            raise invalid(f'Invalid JSON payload received. Unknown name "{name}": Cannot bind query '
                          f"parameter. Field '{name}' could not be found in request message.")


def _int(query: dict[str, Any], key: str) -> int:
    try:
        return int(query.get(key, 0) or 0)
    except ValueError as e:
        raise invalid(f"{key} must be a number") from e


def _list(kind: str, items_and_token: tuple[list[dict[str, Any]], str]) -> dict[str, Any]:
    items, token = items_and_token
    out: dict[str, Any] = {kind: items}
    if token:
        out["nextPageToken"] = token
    return out


def _then_empty(action: Callable[[str], None], name: str) -> dict[str, Any]:
    """Do ACTION on NAME and answer Google's empty message ({}), as delete and cancel do."""
    action(name)
    return {}


def _full(g: dict[str, Any], collection: str) -> str:
    return f"{g['parent']}/{collection}/{g['id']}"


def _locations(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    items = [{"name": f"projects/{g['project']}/locations/{z}", "locationId": z} for z in w.zones]
    return _list("locations", page(items, _int(q, "pageSize"), q.get("pageToken", "")))


def _location(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    w.check_parent(g["parent"])
    return {"name": g["parent"], "locationId": g["parent"].rsplit("/", 1)[-1]}


def _list_nodes(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return _list("nodes", w.list_nodes(g["parent"], _int(q, "pageSize"), q.get("pageToken", "")))


def _create_node(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return w.create_node(g["parent"], q.get("nodeId", ""), b)


def _update_node(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return w.update_node(_full(g, "nodes"), b, q.get("updateMask", ""))


def _list_qrs(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return _list("queuedResources",
                 queued.list_(w, g["parent"], _int(q, "pageSize"), q.get("pageToken", "")))


def _delete_qr(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return queued.delete(w, _full(g, "queuedResources"), q.get("force", "").lower() == "true")


def _paged(kind: str, source: Callable[[World, str], list[dict[str, Any]]], fields: set[str] | None = None) -> Handler:
    """A list call; with FIELDS, one that documents `filter` and `orderBy` over them."""
    def handler(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        items = source(w, g["parent"])
        if fields is not None:
            items = filters.apply_filter(items, q.get("filter", ""), fields)
            items = filters.apply_order(items, q.get("orderBy", ""), fields)
        return _list(kind, page(items, _int(q, "pageSize"), q.get("pageToken", "")))

    return handler


def _guest_attributes(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    workers = b.get("workerIds") or []
    if not isinstance(workers, list):
        raise invalid("workerIds must be a list of worker ids")
    return w.guest_attributes(_full(g, "nodes"), str(b.get("queryPath", "") or ""),
                              [str(x) for x in workers])


def _service_identity(w: World, g: dict[str, Any], q: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    project = g["parent"].split("/")[1]
    w.check_parent(g["parent"])
    return {"identity": {"email": f"service-{project}@cloud-tpu.iam.gserviceaccount.com"}}


_LIST = ("pageSize", "pageToken")


def _route(method: str, path: str, call: str, handler: Handler, params: tuple[str, ...] = ()) -> Route:
    pattern = re.compile("^" + path.replace("{P}", _P).replace("{ID}", r"(?P<id>[^/:]+)") + "$")
    return Route(method, pattern, call, handler, mutates=method != "GET", params=frozenset(params))


ROUTES: list[Route] = [
    _route("GET", r"projects/(?P<project>[^/:]+)/locations", "locations.list", _locations,
           ("extraLocationTypes", "filter", *_LIST)),
    _route("GET", r"{P}", "locations.get", _location),
    _route("POST", r"{P}:generateServiceIdentity", "generateServiceIdentity", _service_identity),
    _route("GET", r"{P}/nodes", "nodes.list", _list_nodes, _LIST),
    _route("POST", r"{P}/nodes", "nodes.create", _create_node, ("nodeId",)),
    _route("GET", r"{P}/nodes/{ID}", "nodes.get", lambda w, g, q, b: w.get_node(_full(g, "nodes"))),
    _route("DELETE", r"{P}/nodes/{ID}", "nodes.delete",
           lambda w, g, q, b: w.delete_node(_full(g, "nodes"))),
    _route("PATCH", r"{P}/nodes/{ID}", "nodes.patch", _update_node, ("updateMask",)),
    _route("POST", r"{P}/nodes/{ID}:start", "nodes.start",
           lambda w, g, q, b: w.start_node(_full(g, "nodes"))),
    _route("POST", r"{P}/nodes/{ID}:stop", "nodes.stop",
           lambda w, g, q, b: w.stop_node(_full(g, "nodes"))),
    _route("POST", r"{P}/nodes/{ID}:getGuestAttributes", "nodes.getGuestAttributes", _guest_attributes),
    _route("GET", r"{P}/queuedResources", "queuedResources.list", _list_qrs, _LIST),
    _route("POST", r"{P}/queuedResources", "queuedResources.create",
           lambda w, g, q, b: queued.create(w, g["parent"], q.get("queuedResourceId", ""), b,
                                            q.get("requestId", "")),
           ("queuedResourceId", "requestId")),
    _route("GET", r"{P}/queuedResources/{ID}", "queuedResources.get",
           lambda w, g, q, b: queued.get(w, _full(g, "queuedResources"))),
    _route("DELETE", r"{P}/queuedResources/{ID}", "queuedResources.delete", _delete_qr, ("force", "requestId")),
    _route("POST", r"{P}/queuedResources/{ID}:reset", "queuedResources.reset",
           lambda w, g, q, b: queued.reset(w, _full(g, "queuedResources"))),
    _route("GET", r"{P}/acceleratorTypes", "acceleratorTypes.list",
           _paged("acceleratorTypes", World.accelerator_types, {"name", "type", "acceleratorConfigs"}),
           ("filter", "orderBy", *_LIST)),
    _route("GET", r"{P}/acceleratorTypes/{ID}", "acceleratorTypes.get",
           lambda w, g, q, b: w.accelerator_type(_full(g, "acceleratorTypes"))),
    _route("GET", r"{P}/runtimeVersions", "runtimeVersions.list",
           _paged("runtimeVersions", World.runtime_versions, {"name", "version"}),
           ("filter", "orderBy", *_LIST)),
    _route("GET", r"{P}/runtimeVersions/{ID}", "runtimeVersions.get",
           lambda w, g, q, b: w.runtime_version(_full(g, "runtimeVersions"))),
    _route("GET", r"{P}/operations", "operations.list",
           _paged("operations", World.list_operations),
           ("filter", "returnPartialSuccess", *_LIST)),
    _route("GET", r"{P}/operations/{ID}", "operations.get",
           lambda w, g, q, b: w.get_operation(_full(g, "operations"))),
    _route("DELETE", r"{P}/operations/{ID}", "operations.delete",
           lambda w, g, q, b: _then_empty(w.delete_operation, _full(g, "operations"))),
    _route("POST", r"{P}/operations/{ID}:cancel", "operations.cancel",
           lambda w, g, q, b: _then_empty(w.cancel_operation, _full(g, "operations"))),
]


def match(method: str, path: str) -> tuple[Route, dict[str, Any]]:
    """The route for METHOD /v2/PATH and its named groups; ApiError 404 if none."""
    for route in ROUTES:
        found = route.pattern.match(path)
        if found and route.method == method:
            return route, found.groupdict()
    raise ApiError(404, "NOT_FOUND", f"No such method: {method} /v2/{path}")


def render(result: Any, ints: bool) -> Any:
    """Encode a handler's answer for the wire, resource by resource."""
    if isinstance(result, dict):
        if "tpu" in result and "state" in result:
            return wire.render_queued_resource(result, ints)
        if "acceleratorType" in result and "state" in result:
            return wire.render_node(result, ints)
        if "acceleratorConfigs" in result:
            return wire.render_accelerator_type(result, ints)
        if "done" in result and "metadata" in result:
            return wire.render_operation(result, ints)
        return {k: render(v, ints) for k, v in result.items()}
    if isinstance(result, list):
        return [render(item, ints) for item in result]
    return result
