"""A fake host's metadata server, as every TPU VM has one at metadata.google.internal.

One aiohttp application serves every fake host, each on its own address (see
addresses.py); a request is answered for the host whose socket it came in on. Hosts
find it through `GCE_METADATA_HOST` (as google-auth and podctl's agent do), since
169.254.169.254 is not ours to bind. Shaped as GCE's: every request must carry
`Metadata-Flavor: Google` (else 403), one carrying `X-Forwarded-For` is refused,
answers carry `Metadata-Flavor: Google`, a directory answers with its keys (one a
line, directories with a trailing `/`) or, with `?recursive=true`, as JSON.

Served: project/project-id and numeric-project-id; instance/ id, name, hostname, zone
(a Compute Engine VM's its instance's: compute_tpu.py's name and id),
preempted (`TRUE` once the node is preempted, during its notice), maintenance-event
(`NONE`, or `TERMINATE_ON_HOST_MAINTENANCE` from 60 s before a maintenance) and
upcoming-maintenance (JSON, 404 when none is planned; see maintenance.py),
`?wait_for_change=true` on any of them, leaves and directories (a hanging GET until the
value changes, `last_etag`, `timeout_sec`; every answer carries an `ETag`, crc32 of the
answer's body), service-accounts/default/ (email, scopes, token), attributes/ (the node's
metadata, the TPU VM attributes agent-worker-number, accelerator-type,
worker-network-endpoints, tpu-env; a Compute Engine VM's also created-by and
instance-template, and no Cloud TPU node's NODE_ID or SERVICE_NAME in tpu-env; a patched map shows here only
`timings.metadata_propagation` after its patch is done), and guest-attributes/NAMESPACE/KEY, which the
host may PUT and the TPU API's getGuestAttributes then returns (World.guest_attributes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import zlib
from typing import TYPE_CHECKING, Any

from aiohttp import web

from podctl.base import topology
from podctl.fake.api import compute_vm_metadata
from podctl.fake.vm import maintenance

if TYPE_CHECKING:
    from podctl.fake.vm.hosts import Host, HostManager

PREFIX = "/computeMetadata/v1/"
_FLAVOR = {"Metadata-Flavor": "Google"}
TOKEN_SECONDS = 3599
LEAF_POLL = 0.2  # s between looks of a hanging GET on a leaf (one that moves with the clock)
DIRECTORY_POLL = 1.0  # s between looks of one on a directory, beside the node's wake-ups


def hostname(node: dict[str, Any], worker: int) -> str:
    """A Cloud TPU node's VM's hostname: t1v-n-<8 hex of the node>-w-<worker>; a Compute
    Engine VM's is its instance name (a MIG's BASE-xxxx), as every Compute Engine VM's."""
    vm_names = node.get("_vm_names") or []
    if node.get("_api") == "compute" and worker < len(vm_names):
        return str(vm_names[worker])
    return f"t1v-n-{zlib.crc32(str(node.get('id', node['name'])).encode()):08x}-w-{worker}"


def instance_id(node: dict[str, Any], worker: int) -> str:
    """instance/id: a Compute Engine VM's is the id instances.get gives (compute_tpu.py: a
    crc32 of its name); a Cloud TPU node's VMs' the fake's own number."""
    if node.get("_api") == "compute":
        return str(zlib.crc32(hostname(node, worker).encode()))
    return str(zlib.crc32(f"{node.get('id')}/{worker}".encode()))


def compute_attributes(node: dict[str, Any], project: str, zone: str) -> dict[str, str]:
    """What Compute Engine adds to a MIG's VM's attributes: `created-by` (the MIG) and
    `instance-template`, with the project's number as Google writes them; none on a
    Cloud TPU node's VMs."""
    if node.get("_api") != "compute":
        return {}
    number = numeric_project(project)
    mig = str(node["name"]).rsplit("/", 1)[-1]
    template = str(node.get("_template") or "").rsplit("/", 1)[-1]
    return {"created-by": f"projects/{number}/zones/{zone}/instanceGroupManagers/{mig}",
            "instance-template": f"projects/{number}/global/instanceTemplates/{template}"}


def numeric_project(project: str) -> str:
    return str(100000000000 + zlib.crc32(project.encode()) % 900000000000)


def _text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, headers=_FLAVOR, content_type="application/text")


def _not_found() -> web.Response:
    return web.Response(status=404, headers=_FLAVOR, content_type="text/html",
                        text="<!DOCTYPE html>\n<title>Error 404 (Not Found)!!1</title>\n")


def tree(host: Host) -> dict[str, Any]:
    """What this host's metadata server holds, as nested dicts (leaves are strings)."""
    nh = host.node
    node = nh.node
    _, project, _, zone, _, node_id = node["name"].split("/")
    endpoints = node.get("networkEndpoints", [])
    names = [hostname(node, i) for i in range(len(nh.hosts))]
    workers = ",".join(f"{names[i]}:{i}:{ep.get('ipAddress', '')}" for i, ep in enumerate(endpoints))
    # a patch reaches the hosts after its propagation delay; a Compute Engine VM's map is its own
    metadata = compute_vm_metadata.host_view(node, host.index)
    attributes = {str(k): str(v) for k, v in metadata.items()}
    attributes.update(compute_attributes(node, project, zone))
    attributes.update({
        "agent-worker-number": str(host.index),
        "accelerator-type": str(node.get("acceleratorType", "")),
        "worker-network-endpoints": workers,
        "tpu-env": "".join(f"{k}: '{v}'\n" for k, v in sorted(tpu_env(host, project).items())),
        "ssh-keys": str(metadata.get("ssh-keys", "")),
    })
    email, scopes = identity(node)
    account = {"email": email, "aliases": "default", "scopes": "\n".join(scopes)}
    guest = nh.manager.guest(node["name"], host.index)
    world = nh.manager.world
    now, scale = (world.now(), world.time_scale) if world is not None else (time.time(), 1.0)
    upcoming = maintenance.metadata_upcoming(node, host.index)
    return {
        "project": {"project-id": project, "numeric-project-id": numeric_project(project)},
        "instance": {
            "id": instance_id(node, host.index),
            "name": names[host.index], "hostname": f"{names[host.index]}.{zone}.c.{project}.internal",
            "zone": f"projects/{numeric_project(project)}/zones/{zone}",
            "preempted": "TRUE" if host.preempted else "FALSE",
            "maintenance-event": maintenance.metadata_event(node, host.index, now, scale),
            **({"upcoming-maintenance": json.dumps(upcoming)} if upcoming else {}),
            "attributes": attributes,
            "service-accounts": {"default": account, email: account},
            "guest-attributes": {ns: dict(keys) for ns, keys in guest.items()},
        },
    }


def identity(node: dict[str, Any]) -> tuple[str, list[str]]:
    """The node's service account and scopes, as its create set them (the server fills
    the default compute account and gcloud's scopes in: node_fields.server_filled)."""
    _, project, *_ = node["name"].split("/")
    account = node.get("serviceAccount") or {}
    email = str(account.get("email") or f"{numeric_project(project)}-compute@developer.gserviceaccount.com")
    return email, [str(s) for s in account.get("scope") or []]


def tpu_env(host: Host, project: str) -> dict[str, str]:
    """The `tpu-env` attribute's keys, as a real TPU VM's (a v4-256's, dumped in public:
    bounds, TOPOLOGY, WRAP, CONSUMER_PROJECT_*, no PROJECT_ID or HOSTNAMES), and for a
    node of a multislice the MEGASCALE_* keys JAX's cloud_tpu_cluster reads. The real
    one's agent image URLs and flags are left out."""
    node = host.node.node
    _, _, _, zone, _, node_id = node["name"].split("/")
    kind = topology.parse_slice(str(node.get("acceleratorType", "")))
    scheduling = node.get("schedulingConfig") or {}
    env = {"ACCELERATOR_TYPE": kind.name, "ALT": "false",
           "CHIPS_PER_HOST_BOUNDS": kind.chips_per_host_bounds,
           "CONSUMER_PROJECT_ID": project, "CONSUMER_PROJECT_NUMBER": numeric_project(project),
           "HOST_BOUNDS": kind.process_bounds, "NODE_ID": node_id,
           "PREEMPTIBLE": "true" if scheduling.get("spot") or scheduling.get("preemptible") else "false",
           "RUNTIME_VERSION": str(node.get("runtimeVersion", "")),
           "SERVICE_NAME": "tpu.googleapis.com", "TOPOLOGY": kind.topology,
           "TPU_CHIPS_PER_PROCESS_BOUNDS": kind.chips_per_host_bounds,
           "TPU_PROCESS_BOUNDS": kind.process_bounds, "TPU_TOPOLOGY_ALT": "false",
           "TPU_TOPOLOGY_WRAP": kind.wrap, "TYPE": kind.generation.api_type,
           "UID": str(node.get("id", "")), "WORKER_ID": str(host.index), "WRAP": kind.wrap,
           "ZONE": zone}
    env.update(_megascale(host.node.manager.world, node))
    if node.get("_api") == "compute":  # no Cloud TPU node: nothing names the VM as one's worker
        del env["NODE_ID"], env["SERVICE_NAME"]
    return env


def _megascale(world: Any, node: dict[str, Any]) -> dict[str, str]:
    """A multislice node's MEGASCALE_* keys: its slice among its queued resource's nodes,
    and the first slice's worker 0 (its internal address) as the coordinator."""
    qr = (world.queued.get(str(node.get("queuedResource", ""))) if world is not None else None) or {}
    names = list(qr.get("_node_names") or [])
    if not node.get("multisliceNode") or node["name"] not in names:
        return {}
    first = world.nodes.get(names[0]) or {}
    endpoints = first.get("networkEndpoints") or [{}]
    return {"MEGASCALE_COORDINATOR_ADDRESS": str(endpoints[0].get("ipAddress", "")),
            "MEGASCALE_NUM_SLICES": str(len(names)),
            "MEGASCALE_SLICE_ID": str(names.index(node["name"]))}


def _lookup(root: dict[str, Any], parts: list[str]) -> Any:
    node: Any = root
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


class MetadataServer:
    """The metadata servers of every host of one HostManager (one app, a site per host)."""

    def __init__(self, manager: HostManager):
        self.manager = manager
        self.by_socket: dict[tuple[str, int], Host] = {}
        self.tokens: dict[str, str] = {}  # host token -> its access token (never logged)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        self._ready = False

    async def serve(self, host: Host) -> web.SockSite | None:
        if not self._ready:
            await self.runner.setup()
            self._ready = True
        sock = host.meta_sock
        self.by_socket[host.meta_where] = host
        site = web.SockSite(self.runner, sock)
        await site.start()
        return site

    def forget(self, host: Host) -> None:
        if self.by_socket.get(host.meta_where) is host:
            del self.by_socket[host.meta_where]

    async def close(self) -> None:
        if self._ready:
            await self.runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        host = self.by_socket.get(tuple(request.transport.get_extra_info("sockname")[:2]))
        if host is None:
            return _not_found()
        if request.headers.get("Metadata-Flavor") != "Google" or "X-Forwarded-For" in request.headers:
            return web.Response(status=403, headers=_FLAVOR, content_type="text/html", text=(
                "Your client does not have permission to get URL "
                f"<code>{request.path}</code> from this server. Missing Metadata-Flavor:Google header."))
        if request.path == "/" and request.method == "GET":
            # GCE answers its root (google-auth's "am I on GCE?" ping, before it asks a token)
            return _text("computeMetadata/\n")
        if not request.path.startswith(PREFIX):
            return _not_found()
        path = request.path[len(PREFIX):]
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["instance", "guest-attributes"] and request.method == "PUT":
            if len(parts) != 4:
                return _text("a guest attribute is instance/guest-attributes/NAMESPACE/KEY\n", 400)
            self.manager.set_guest(host, parts[2], parts[3], (await request.read()).decode())
            return _text("")
        if request.method != "GET":
            return web.Response(status=405, headers=_FLAVOR)
        if parts[:4] == ["instance", "service-accounts", "default", "token"] or (
                len(parts) == 4 and parts[:2] == ["instance", "service-accounts"] and parts[3] == "token"):
            token = self.tokens.get(host.token)
            if token is None:  # the node's account and scopes ride with it (iam.Tokens)
                token = self.tokens[host.token] = self.manager.tokens.mint(*identity(host.node.node))
            return web.json_response({"access_token": token, "expires_in": TOKEN_SECONDS,
                                      "token_type": "Bearer"}, headers=_FLAVOR)
        if request.query.get("wait_for_change") == "true":
            return await self._wait_for_change(request, host, parts)
        value = _lookup(tree(host), parts)
        if value is None:
            return _not_found()
        if isinstance(value, dict) and request.query.get("recursive") != "true" and not path.endswith("/"):
            raise web.HTTPMovedPermanently(request.path + "/", headers=_FLAVOR)  # as GCE does
        return _answer(request, value, parts)


    async def _wait_for_change(self, request: web.Request, host: Host, parts: list[str]) -> web.Response:
        """GCE's hanging GET, on a leaf or a directory (`recursive=true&alt=json`, as
        Google's guest agent watches `instance/attributes/`): answer when the value's ETag
        differs from `last_etag` (at once if it differs already, as for `NONE`; without
        one, from the value now), or after `timeout_sec` with the value as it is and its
        ETag. A node's hosts are woken when the metadata they see changes
        (NodeHosts.notify); leaves that move with the clock (maintenance-event) are
        looked at again every LEAF_POLL s, directories every DIRECTORY_POLL s."""
        recursive = request.query.get("recursive") == "true"

        def look() -> Any:
            return _lookup(tree(host), parts) if host.alive else None

        value = look()
        tag = etag(value, recursive, parts)
        last = request.query.get("last_etag") or tag
        try:
            timeout = min(float(request.query.get("timeout_sec", "300")), 3600.0)
        except ValueError:
            return _text("timeout_sec must be a number of seconds\n", 400)
        poll = DIRECTORY_POLL if isinstance(value, dict) else LEAF_POLL
        deadline = time.monotonic() + timeout
        while value is not None and tag == last and host.alive:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(host.node.changed.wait(), min(poll, left))
            value = look()
            tag = etag(value, recursive, parts)
        if value is None:
            return _not_found()
        return _answer(request, value, parts)


def etag(value: Any, recursive: bool, parts: list[str]) -> str:
    """The fake's ETag of the metadata value at PARTS: crc32 (8 hex digits) of what a GET
    answers (a leaf's text; a directory's recursive JSON, keys sorted, or its listing)."""
    return f"{zlib.crc32(_body(value, recursive, parts).encode()):08x}"


def _verbatim(parts: list[str]) -> int:
    """How many levels below PARTS keep their keys verbatim under `recursive=true`
    (instance/attributes/ itself: its keys are the user's)."""
    level = 0
    for part in parts:
        level = level - 1 if level else _VERBATIM.get(part, 0)
    return level


def _body(value: Any, recursive: bool, parts: list[str]) -> str:
    if value is None:  # the key went while a wait_for_change watched it (a preempted VM's): its 404 follows
        return ""
    if isinstance(value, str):
        return value
    if recursive:
        return json.dumps(_recursive(value, _verbatim(parts)), sort_keys=True, separators=(",", ":"))
    return "".join(f"{k}/\n" if isinstance(v, dict) else f"{k}\n" for k, v in (value or {}).items())


def _answer(request: web.Request, value: Any, parts: list[str]) -> web.Response:
    """VALUE (at PARTS) as a GET answers it (JSON with `recursive=true` or `alt=json`,
    else text), with its ETag header."""
    recursive = request.query.get("recursive") == "true"
    if isinstance(value, dict) and recursive:
        response = web.json_response(_recursive(value, _verbatim(parts)), headers=_FLAVOR)
    elif isinstance(value, str) and request.query.get("alt") == "json":
        response = web.json_response(value, headers=_FLAVOR)
    else:
        response = _text(_body(value, False, parts))
    response.headers["ETag"] = etag(value, recursive, parts)
    return response


# Directories whose keys are the user's (attributes, guest attributes) or names (service
# accounts by email): `?recursive=true` gives them verbatim, GCE's own keys in camelCase.
# The number: how many levels below stay verbatim.
_VERBATIM = {"attributes": 2, "guest-attributes": 2, "service-accounts": 1}


def _recursive(value: dict[str, Any], verbatim: int = 0) -> dict[str, Any]:
    """`?recursive=true`: GCE's own keys in camelCase (maintenance-event ->
    maintenanceEvent, scopes as a list), the user's keys as they are (see _VERBATIM)."""
    out: dict[str, Any] = {}
    for key, item in value.items():
        camel = key if verbatim else key.split("-")[0] + "".join(w.title() for w in key.split("-")[1:])
        if isinstance(item, dict):
            out[camel] = _recursive(item, verbatim - 1 if verbatim else _VERBATIM.get(key, 0))
        elif key in ("scopes", "aliases") and not verbatim:
            out[camel] = item.split("\n")
        else:
            out[camel] = item
    return out


def guest_items(stored: dict[str, dict[str, str]], query_path: str = "") -> list[dict[str, str]]:
    """Guest attributes as getGuestAttributes' queryValue.items, filtered by QUERY_PATH
    ("", "NAMESPACE/" or "NAMESPACE/KEY")."""
    namespace, _, key = query_path.partition("/")
    return [{"namespace": ns, "key": k, "value": v}
            for ns, keys in sorted(stored.items()) if not namespace or ns == namespace
            for k, v in sorted(keys.items()) if not key or k == key]

