"""The fake cloud's state: TPU nodes, queued resources and operations in zones with
capacity and quota, moved between states by a clock.

The world is a plain object that the HTTP layer (tpu_api.py, admin_api.py) calls
from one event loop; nothing in it blocks or talks to the network. Time is
`time.time()` plus an offset that tests may advance; every duration in `Timings`
is in simulated seconds and divided by `time_scale`, so a "10-minute" creation
takes 10 s at time_scale 60. Transitions are events in a heap, applied in order by
`advance()`, which the server calls before every request and on a ticker.

Lifecycles (what Cloud TPU does, as far as podctl can see it):
    node:  CREATING -> READY -> (PREEMPTED) -> DELETING -> gone
           CREATING -> gone, operation error 8, when the zone has no capacity
    queued resource: WAITING_FOR_RESOURCES (from the create on) -> PROVISIONING
           -> ACTIVE -> (SUSPENDING -> SUSPENDED on preemption) -> DELETING -> gone;
           FAILED when its validity window closes before capacity frees.
"""

from __future__ import annotations

import dataclasses
import heapq
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from podctl.base import topology
from podctl.base.errors import InvalidSliceError
from podctl.fake.api import (
    compute_flex,
    compute_tpu,
    compute_vm_metadata,
    label_rules,
    node_fields,
    placement_check,
    queued,
    wire,
)
from podctl.fake.api.apierror import ApiError, invalid, not_found, page, precondition, rfc3339
from podctl.fake.api.node_fields import check_metadata
from podctl.fake.vm import maintenance

POD_CHIPS = 8960  # one v5p pod per zone unless a test says otherwise
# What a v5p zone offers (gcloud compute tpus tpu-vm versions list,
# cloud.google.com/tpu/docs/runtimes), and every generation's default (generations.toml).
RUNTIME_VERSIONS = tuple(dict.fromkeys(
    ["tpu-ubuntu2204-base", "tpu-vm-cos-stable", "v2-alpha-tpuv5", "v2-alpha-tpuv5-lite"]
    + [g.default_runtime_version for g in topology.generations().values()]))
# Runtimes made for one generation: each generation's `v2-alpha-*` default
# (cloud.google.com/tpu/docs/runtimes names one per generation). The base images
# (tpu-ubuntu2204-base, tpu-vm-cos-stable) are taken for any generation: the fake's guess.
MADE_FOR = {g.default_runtime_version: g for g in topology.generations().values()
            if g.default_runtime_version.startswith("v2-alpha-")}
_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
# The Node fields a create may set (cloud_tpu.proto); OUTPUT_ONLY ones are ignored, as
# Google's front end ignores them, and any other name is refused as unknown.
_NODE_FIELDS = {
    "description", "acceleratorType", "acceleratorConfig", "runtimeVersion", "networkConfig",
    "networkConfigs", "cidrBlock", "serviceAccount", "schedulingConfig", "labels", "metadata",
    "tags", "dataDisks", "shieldedInstanceConfig", "bootDiskConfig", "reservationName",
}
_NODE_OUTPUT_ONLY = {
    "name", "state", "healthDescription", "health", "networkEndpoints", "id", "createTime",
    "apiVersion", "symptoms", "queuedResource", "multisliceNode", "upcomingMaintenance",
}
# UpdateNodeRequest.update_mask: the fields the proto lets an update change.
_UPDATE_PATHS = {"description", "tags", "labels", "metadata", "networkConfig.enableExternalIps"}
# Recorded: every operation's metadata is google.cloud.common.OperationMetadata.
_META_TYPE = "type.googleapis.com/google.cloud.common.OperationMetadata"
_NODE_TYPE = "type.googleapis.com/google.cloud.tpu.v2.Node"
_EMPTY_TYPE = "type.googleapis.com/google.protobuf.Empty"


@dataclass
class Timings:
    """How long each transition takes, in simulated seconds."""

    node_create: float = 90.0
    node_delete: float = 30.0
    stockout: float = 15.0  # a create that cannot fit fails after this long
    qr_accept: float = 5.0
    qr_suspend: float = 20.0
    node_stop: float = 20.0
    node_start: float = 30.0
    # Wall-clock seconds, not simulated (time_scale does not apply): between a
    # preemption's SIGTERM to every process of the node's hosts and their SIGKILL,
    # since a checkpoint save in that notice takes real time (hosts.py).
    preempt_grace: float = 10.0
    node_update: float = 5.0  # nodes.patch's operation runs this long (the fake's guess)
    # A patched metadata map reaches the hosts' metadata servers (and their sshd) this long
    # after the patch's operation is done (gcloud retries SSH for it; the delay is a guess)
    metadata_propagation: float = 2.0
    # A host runs its startup-script late, the later the larger its node: the mean delay of
    # a node of n hosts is this x sqrt(n) (boot.py; 0: every host at once; a guess, README)
    boot_late: float = 10.0


@dataclass
class World:
    time_scale: float = 1.0
    clock_offset: float = 0.0
    timings: Timings = field(default_factory=Timings)
    zones: tuple[str, ...] = field(default_factory=topology.all_zones)
    default_capacity: int = POD_CHIPS
    capacity: dict[str, int] = field(default_factory=dict)  # zone -> chips
    quota: dict[str, int] = field(default_factory=dict)  # "project/zone" -> chips
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    queued: dict[str, dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[list[Any]] = field(default_factory=list)  # heap of [due, seq, kind, target]
    seq: int = 0
    projects: dict[str, dict[str, Any]] = field(default_factory=dict)  # admin switches (access.py)
    request_ids: dict[str, str] = field(default_factory=dict)  # "call/requestId" -> operation
    networks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "project/network" -> rules added (vpc.py)
    subnets: dict[str, dict[str, Any]] = field(default_factory=dict)  # "project/region/name" -> fields set (vpc.py)
    # project -> its metadata items (Compute Engine's commonInstanceMetadata; oslogin.py)
    project_metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    login_profiles: dict[str, dict[str, Any]] = field(default_factory=dict)  # email -> OS Login keys (oslogin.py)
    iam: dict[str, Any] = field(default_factory=dict)  # the project's IAM on buckets (iam.py); {}: not set up yet
    # TPU VMs through Compute Engine (compute_tpu.py): instance templates ("project/name"),
    # workload policies ("project/region/name"), MIGs ("project/zone/name") and the
    # operations of those calls ("project/zones/Z|regions/R|global/operation-...").
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Compute Engine reservations ("project/zone/name"; compute_reservations.py)
    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)
    migs: dict[str, dict[str, Any]] = field(default_factory=dict)
    compute_ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    # error codes the next MIG inserts' operations end with, in order (the fault
    # `mig-error`; compute_tpu.insert_refusal)
    compute_insert_errors: list[str] = field(default_factory=list)

    # ---- time ---------------------------------------------------------------

    def now(self) -> float:
        return time.time() + self.clock_offset

    def _after(self, simulated_seconds: float) -> float:
        return self.now() + simulated_seconds / self.time_scale

    def schedule(self, simulated_seconds: float, kind: str, target: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, [self._after(simulated_seconds), self.seq, kind, target])

    def advance(self) -> bool:
        """Apply every transition that is due; True if anything changed."""
        changed = False
        while self.events and self.events[0][0] <= self.now():
            _, _, kind, target = heapq.heappop(self.events)
            _HANDLERS[kind](self, target)
            changed = True
        placed = compute_flex.place(self)  # flex-start resize requests waiting for capacity
        return self._place_queued() or placed or changed

    # ---- capacity and quota ------------------------------------------------

    def zone_capacity(self, zone: str) -> int:
        return self.capacity.get(zone, self.default_capacity)

    def used_chips(self, zone: str) -> int:
        return sum(n["_chips"] for n in self.nodes.values() if n["_zone"] == zone and n["_reserved"])

    def free_chips(self, zone: str) -> int:
        return self.zone_capacity(zone) - self.used_chips(zone)

    def _check_quota(self, project: str, zone: str, chips: int) -> None:
        limit = self.quota.get(f"{project}/{zone}")
        if limit is None:
            return
        prefix = f"projects/{project}/locations/{zone}/"
        used = sum(n["_chips"] for n in self.nodes.values() if n["name"].startswith(prefix))
        # a queued resource that still waits holds quota for the nodes it asks for
        used += sum(q["_chips"] for q in self.queued.values() if q["name"].startswith(prefix)
                    and not any(name in self.nodes for name in q["_node_names"]))
        if used + chips > limit:
            # Worded as Google's; the limit is kept per zone here, Google's per region.
            region = zone.rsplit("-", 1)[0]
            message = (f"Quota limit 'TPUV5PPerProjectPerRegionForTPUAPI' has been exceeded. "
                       f"Limit: {limit} in region {region}.")
            raise ApiError(429, "RESOURCE_EXHAUSTED", message, [{
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"subject": f"projects/{project}", "description": message}],
            }])

    # ---- locations and catalog ---------------------------------------------

    def check_parent(self, parent: str) -> tuple[str, str]:
        match = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)", parent)
        if not match:
            raise invalid(f"Invalid parent {parent!r}")
        project, zone = match.groups()
        if zone not in self.zones:
            raise ApiError(404, "NOT_FOUND", f"Location {parent} is not found or access is unauthorized.")
        return project, zone

    def accelerator_type(self, name: str) -> dict[str, Any]:
        parent, _, type_id = name.rpartition("/acceleratorTypes/")
        self.check_parent(parent)
        try:
            st = topology.parse_slice(type_id)
        except InvalidSliceError as e:
            raise not_found(name) from e
        if parent.rsplit("/", 1)[-1] not in st.generation.zones or not st.generation.on_cloud_tpu:
            raise not_found(name)  # a zone lists only the generations it offers (TPU7x: none)
        return {"name": name, "type": st.name,
                "acceleratorConfigs": [{"type": st.generation.api_type, "topology": st.topology}]}

    def accelerator_types(self, parent: str) -> list[dict[str, Any]]:
        _, zone = self.check_parent(parent)
        return [self.accelerator_type(f"{parent}/acceleratorTypes/{g.type_name(topology.parse_topology(t))}")
                for g in topology.generations().values() if zone in g.zones and g.on_cloud_tpu
                for t in g.documented]

    def runtime_versions(self, parent: str) -> list[dict[str, Any]]:
        self.check_parent(parent)
        return [{"name": f"{parent}/runtimeVersions/{v}", "version": v} for v in RUNTIME_VERSIONS]

    def runtime_version(self, name: str) -> dict[str, Any]:
        parent, _, version = name.rpartition("/runtimeVersions/")
        match = [v for v in self.runtime_versions(parent) if v["version"] == version]
        if not match:
            raise not_found(name)
        return match[0]

    # ---- operations ----------------------------------------------------------

    def new_operation(self, parent: str, verb: str, target: str) -> dict[str, Any]:
        name = f"{parent}/operations/operation-{int(self.now() * 1000)}-{secrets.token_hex(6)}"
        # `done: false` stays off the wire (wire.render_operation), as in the recording.
        op = {"name": name, "done": False, "metadata": {
            "@type": _META_TYPE, "apiVersion": "v2", "createTime": rfc3339(self.now()),
            "target": target, "verb": verb,
        }}
        self.operations[name] = op
        return op

    def finish(self, op_name: str | None, *, response: dict[str, Any] | None = None,
                error: tuple[int, str] | None = None) -> None:
        op = self.operations.get(op_name or "")
        if op is None or op["done"]:
            return
        op["done"] = True
        op["metadata"]["endTime"] = rfc3339(self.now())
        if error:
            op["error"] = {"code": error[0], "message": error[1]}
        else:
            op["response"] = response or {"@type": _EMPTY_TYPE}

    def get_operation(self, name: str) -> dict[str, Any]:
        if name not in self.operations:
            raise not_found(name)
        return self.operations[name]

    def list_operations(self, parent: str) -> list[dict[str, Any]]:
        self.check_parent(parent)
        return [op for name, op in sorted(self.operations.items()) if name.startswith(parent + "/")]

    def delete_operation(self, name: str) -> None:
        self.get_operation(name)
        del self.operations[name]

    def cancel_operation(self, name: str) -> None:
        # Best effort, as Google documents it: the request is noted, the work goes on.
        self.get_operation(name)["metadata"]["cancelRequested"] = True

    # ---- nodes ----------------------------------------------------------------

    def list_nodes(self, parent: str, page_size: int, page_token: str) -> tuple[list[dict[str, Any]], str]:
        self.check_parent(parent)
        nodes = [n for name, n in sorted(self.nodes.items()) if name.startswith(parent + "/nodes/")
                 and n.get("_api") != "compute"]  # a MIG's VMs are Compute Engine's, not nodes
        return page(nodes, page_size, page_token)

    def get_node(self, name: str) -> dict[str, Any]:
        self.check_parent(name.rpartition("/nodes/")[0])
        if name not in self.nodes or self.nodes[name].get("_api") == "compute":
            raise not_found(name)
        return self.nodes[name]

    def node_from_body(self, parent: str, node_id: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in body.items() if k not in _NODE_OUTPUT_ONLY}
        unknown = set(body) - _NODE_FIELDS
        if unknown:
            raise invalid(f'Invalid JSON payload received. Unknown name "{sorted(unknown)[0]}" at '
                          "'node': Cannot find field.")
        if not _ID.match(node_id or ""):
            raise invalid(
                f"Invalid node id {node_id!r}: use 1-63 lowercase letters, digits and hyphens, "
                "starting with a letter and not ending with a hyphen")
        slice_type = self._slice_type(body)
        if not slice_type.generation.on_cloud_tpu:  # TPU7x: Compute Engine's only
            raise invalid(f"Accelerator type {slice_type.name} is not supported by the Cloud TPU API")
        project, zone = self.check_parent(parent)
        placement_check.check_node(body, project, zone)  # network, account, tags, scheduling
        runtime = body.get("runtimeVersion", "")
        if runtime not in RUNTIME_VERSIONS:
            raise invalid(f"Runtime version {runtime!r} is not available; see runtimeVersions")
        made_for = MADE_FOR.get(runtime)
        if made_for is not None and made_for is not slice_type.generation:
            raise invalid(f"Runtime version {runtime!r} is for {made_for.name}, not accelerator type "
                          f"{slice_type.name}; use {slice_type.generation.default_runtime_version!r}")
        if zone not in slice_type.generation.zones:
            raise invalid(f"Accelerator type {slice_type.name} is not available in zone {zone}")
        label_rules.check(body.get("labels", {}))
        check_metadata(body.get("metadata"))
        node = {k: v for k, v in body.items() if k in _NODE_FIELDS}
        node.update(node_fields.server_filled(project, zone, node))
        node.update({
            "name": f"{parent}/nodes/{node_id}",
            "acceleratorType": slice_type.name,
            "acceleratorConfig": {"type": slice_type.generation.api_type,
                                  "topology": slice_type.topology},
            "state": "CREATING",
            "createTime": rfc3339(self.now()),
            "id": str(secrets.randbelow(2**62)),
            "apiVersion": "V2",
            "_zone": zone,
            "_chips": slice_type.chips,
            "_hosts": slice_type.hosts,
            "_reserved": False,
        })
        return node

    @staticmethod
    def _slice_type(body: dict[str, Any]) -> topology.SliceType:
        config = body.get("acceleratorConfig")
        try:
            if config:
                gen = topology.generation_by_api_type(
                    wire.enum_name(wire.ACCELERATOR_TYPE, config.get("type")) or "")
                if gen is None:
                    raise invalid(f"Accelerator {config.get('type')!r} is not offered here")
                return gen.slice_type(config.get("topology", ""))
            return topology.parse_slice(body.get("acceleratorType", ""))
        except (InvalidSliceError, ValueError) as e:
            raise invalid(f"Invalid accelerator: {e}") from e

    def replayed(self, call: str, request_id: str) -> dict[str, Any] | None:
        """The operation a retried request with REQUEST_ID already started (AIP-155; of the
        v2 calls only queuedResources.create and .delete take a requestId)."""
        name = self.request_ids.get(f"{call}/{request_id}") if request_id else None
        return self.operations.get(name) if name else None

    def create_node(self, parent: str, node_id: str, body: dict[str, Any]) -> dict[str, Any]:
        project, zone = self.check_parent(parent)
        node = self.node_from_body(parent, node_id, body)
        if node["name"] in self.nodes or any(
                node["name"] in qr["_node_names"] for qr in self.queued.values()):
            raise ApiError(409, "ALREADY_EXISTS", f"Resource '{node['name']}' already exists")
        self._check_quota(project, zone, node["_chips"])
        op = self.new_operation(parent, "create", node["name"])
        node["_create_op"] = op["name"]
        if node["_chips"] <= self.free_chips(zone):
            node["_reserved"] = True
            self.schedule(self.timings.node_create, "node_ready", node["name"])
        else:
            self.schedule(self.timings.stockout, "node_stockout", node["name"])
        self.nodes[node["name"]] = node
        return op

    @staticmethod
    def _endpoints(hosts: int) -> list[dict[str, Any]]:
        # Every fake host lives on loopback; the server's host manager (hosts.py)
        # writes each one's SSH port here before any client sees the node READY.
        return [{"ipAddress": "127.0.0.1", "port": 0} for _ in range(hosts)]

    def guest_attributes(self, name: str, query_path: str = "",
                         worker_ids: list[str] | None = None) -> dict[str, Any]:
        """nodes.getGuestAttributes: what each host PUT to its metadata server's
        instance/guest-attributes/ (kept on the node by the fake's hosts, or published
        through the admin API), one entry per worker asked for that has something under
        QUERY_PATH. GuestAttributes (cloud_tpu.proto) has no worker field: entries come
        in worker order."""
        from podctl.fake.vm.metadata import guest_items

        node = self.get_node(name)
        stored = node.get("_guest") or {}
        workers = [str(w) for w in worker_ids] if worker_ids else [
            str(i) for i in range(int(node.get("_hosts", 0)))]
        answers = [guest_items(stored.get(w, {}), query_path) for w in workers]
        return {"guestAttributes": [{"queryPath": query_path, "queryValue": {"items": items}}
                                    for items in answers if items]}

    def make_ready(self, node: dict[str, Any]) -> None:
        node["state"], node["health"] = "READY", "HEALTHY"
        node["networkEndpoints"] = self._endpoints(node["_hosts"])
        if (node.get("networkConfig") or {}).get("enableExternalIps"):
            for endpoint in node["networkEndpoints"]:  # recorded shape; loopback stands in
                endpoint["accessConfig"] = {"externalIp": endpoint["ipAddress"]}

    def delete_node(self, name: str) -> dict[str, Any]:
        node = self.get_node(name)
        if node.get("queuedResource"):
            raise precondition(
                f"Node {name} belongs to queued resource {node['queuedResource']}; delete that instead")
        return self.start_node_deletion(node)

    def start_node_deletion(self, node: dict[str, Any]) -> dict[str, Any]:
        parent = node["name"].rpartition("/nodes/")[0]
        op = self.new_operation(parent, "delete", node["name"])
        node.setdefault("_delete_ops", []).append(op["name"])
        if node["state"] != "DELETING":
            node["state"] = "DELETING"
            node.pop("health", None)
            self.schedule(self.timings.node_delete, "node_deleted", node["name"])
        return op

    def update_node(self, name: str, body: dict[str, Any], update_mask: str) -> dict[str, Any]:
        """nodes.patch: a long-running operation that changes the node when it is done,
        `timings.node_update` simulated seconds later (refused while another update of
        the node runs, or when the node is not READY). FieldMask semantics: each masked
        field takes the body's value, and a masked field the body leaves out is cleared."""
        node = self.get_node(name)
        paths = [node_fields.camel(p.strip()) for p in update_mask.split(",") if p.strip()]
        if not paths or set(paths) - _UPDATE_PATHS:
            raise invalid(f"update_mask must name some of {sorted(_UPDATE_PATHS)}, got {update_mask!r}")
        if "labels" in paths:
            label_rules.check(body.get("labels") or {})
        if "metadata" in paths:
            check_metadata(body.get("metadata"))
        if node["state"] != "READY":
            raise precondition(f"Node {name} is {node['state']}, not READY; it cannot be updated now")
        running = self.operations.get((node.get("_update") or {}).get("op", ""))
        if running is not None and not running["done"]:
            raise ApiError(409, "ABORTED", (
                f"The node {name} is being updated by operation {running['name']}; "
                "try again when it is done"))
        changes: dict[str, Any] = {}
        for path in paths:
            if path == "networkConfig.enableExternalIps":
                changes[path] = bool((body.get("networkConfig") or {}).get("enableExternalIps"))
            elif body.get(path) not in (None, "", [], {}):
                changes[path] = body[path]
            else:
                changes[path] = None  # cleared
        op = self.new_operation(name.rpartition("/nodes/")[0], "update", name)
        node["_update"] = {"op": op["name"], "changes": changes}
        self.schedule(self.timings.node_update, "node_updated", f"{name}#{op['name']}")
        return op

    def stop_node(self, name: str) -> dict[str, Any]:
        node = self.get_node(name)
        if node["_hosts"] != 1:
            raise precondition(f"Node {name} has {node['_hosts']} hosts; only single-host nodes stop")
        if node["state"] != "READY":
            raise precondition(f"Node {name} is {node['state']}, not READY")
        node["state"] = "STOPPING"
        return self._transition_op(node, "stop", self.timings.node_stop, "node_stopped")

    def start_node(self, name: str) -> dict[str, Any]:
        node = self.get_node(name)
        if node["state"] != "STOPPED":
            raise precondition(f"Node {name} is {node['state']}, not STOPPED")
        node["state"] = "STARTING"
        return self._transition_op(node, "start", self.timings.node_start, "node_started")

    def _transition_op(self, node: dict[str, Any], verb: str, seconds: float, event: str) -> dict[str, Any]:
        op = self.new_operation(node["name"].rpartition("/nodes/")[0], verb, node["name"])
        node["_transition_op"] = op["name"]
        self.schedule(seconds, event, node["name"])
        return op

    # ---- admin: faults and capacity ---------------------------------------------

    def find(self, name: str) -> tuple[str, dict[str, Any]]:
        """A node or queued resource by full name or bare id -> ("node"|"queued", resource)."""
        for kind, table in (("queued", self.queued), ("node", self.nodes)):
            for full, resource in table.items():
                if name in (full, full.rsplit("/", 1)[-1]):
                    return kind, resource
        raise not_found(name)

    def preempt(self, name: str, after: float = 0.0, grace: float | None = None) -> None:
        """Preempt a node or queued resource now, or `after` simulated seconds; GRACE
        (wall-clock seconds) overrides timings.preempt_grace for this one."""
        kind, resource = self.find(name)
        if grace is not None:
            resource["_preempt_grace"] = float(grace)  # kept with it: `after` may come later
        if after > 0:
            self.schedule(after, "preempt", resource["name"])
            return
        if kind == "queued" or resource.get("queuedResource"):
            queued.preempt(self, self.queued[resource.get("queuedResource", resource["name"])])
        elif resource["state"] in {"READY", "CREATING", "STOPPED", "STARTING", "STOPPING"}:
            if resource["state"] == "CREATING":
                self.finish(resource.get("_create_op"), error=(10, (
                    f"The node {resource['name']} was preempted while it was being created")))
            resource["state"] = "PREEMPTED"
            resource.pop("health", None)
        else:
            raise precondition(f"Node {resource['name']} is {resource['state']}; cannot preempt it")

    def preempt_grace(self, node: dict[str, Any]) -> float:
        """The notice a preempted NODE's processes get: its own, its queued resource's, or the default."""
        qr = self.queued.get(node.get("queuedResource") or "", {})
        return float(node.get("_preempt_grace", qr.get("_preempt_grace", self.timings.preempt_grace)))

    def resources(self) -> dict[str, list[str]]:
        """Everything that exists and may bill: what tests assert is empty at the end."""
        return {"nodes": sorted(self.nodes), "queued_resources": sorted(self.queued),
                "migs": sorted(self.migs), "instance_templates": sorted(self.templates),
                "resource_policies": sorted(self.policies), "reservations": sorted(self.reservations)}

    def _place_queued(self) -> bool:
        return queued.place_waiting(self)

    # ---- persistence --------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["zones"] = list(self.zones)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> World:
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in known}  # e.g. an older world's next_ip
        data["timings"] = Timings(**data.get("timings", {}))
        data["zones"] = tuple(data.get("zones", topology.all_zones()))
        return cls(**data)


# ---- transitions ----------------------------------------------------------------


def _node_ready(world: World, name: str) -> None:
    node = world.nodes.get(name)
    if node is None or node["state"] != "CREATING":
        return
    world.make_ready(node)
    # Recorded: the finished create's Node has no `health` yet; a GET has it.
    response = {k: v for k, v in node.items() if k != "health"}
    world.finish(node.get("_create_op"), response={"@type": _NODE_TYPE, **response})


def _node_stockout(world: World, name: str) -> None:
    node = world.nodes.pop(name, None)
    if node is None:
        return
    world.finish(node.get("_create_op"), error=(8, (
        f'There is no more capacity in the zone "{node["_zone"]}"; you can try in another zone '
        "where Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions)")))
    for op in node.get("_delete_ops", []):
        world.finish(op)


def _node_deleted(world: World, name: str) -> None:
    node = world.nodes.pop(name, None)
    if node is None:
        return
    world.finish(node.get("_create_op"), error=(10, f"Node {name} was deleted while it was created"))
    world.finish((node.get("_update") or {}).get("op"), error=(10, f"Node {name} was deleted while it was updated"))
    for op in node.get("_delete_ops", []):
        world.finish(op)


def _node_updated(world: World, target: str) -> None:
    """A patch's operation is done: its fields change now; a metadata change reaches
    the hosts `timings.metadata_propagation` later (until then they see the old map:
    node_fields.host_metadata)."""
    name, _, op_name = target.partition("#")
    node = world.nodes.get(name)
    if node is None or (node.get("_update") or {}).get("op") != op_name:
        return  # deleted since
    update = node.pop("_update")
    before = dict(node.get("metadata") or {})
    for path, value in update["changes"].items():
        if path == "networkConfig.enableExternalIps":
            network = node.setdefault("networkConfig", {})
            if value:
                network["enableExternalIps"] = True
            else:
                network.pop("enableExternalIps", None)
        elif value is None:
            node.pop(path, None)
        else:
            node[path] = value
    after = dict(node.get("metadata") or {})
    if after != before:
        node.setdefault("_host_metadata", before)
        node.setdefault("_metadata_queue", []).append(after)
        world.schedule(world.timings.metadata_propagation, "metadata_propagated", name)
    world.finish(update["op"], response={"@type": _NODE_TYPE, **node})


def _metadata_propagated(world: World, name: str) -> None:
    """The oldest patched map not yet on the hosts reaches them."""
    node = world.nodes.get(name)
    queue = (node or {}).get("_metadata_queue")
    if node is None or not queue:
        return
    node["_host_metadata"] = queue.pop(0)
    if not queue:
        node.pop("_metadata_queue", None)
        node.pop("_host_metadata", None)  # the hosts see node["metadata"] again
    node["_metadata_seq"] = int(node.get("_metadata_seq", 0)) + 1  # hosts.py wakes the waits


def _node_stopped(world: World, name: str) -> None:
    node = world.nodes.get(name)
    if node and node["state"] == "STOPPING":
        node["state"] = "STOPPED"
        world.finish(node.pop("_transition_op", None), response={"@type": _NODE_TYPE, **node})


def _node_started(world: World, name: str) -> None:
    node = world.nodes.get(name)
    if node and node["state"] == "STARTING":
        node["state"] = "READY"
        world.finish(node.pop("_transition_op", None), response={"@type": _NODE_TYPE, **node})


def _preempt_event(world: World, name: str) -> None:
    try:
        world.preempt(name)
    except ApiError:
        pass  # deleted or already gone before the preemption came due


def _queued_event(kind: str) -> Callable[[World, str], None]:
    def handler(world: World, name: str) -> None:
        getattr(queued, kind)(world, name)

    return handler


_HANDLERS: dict[str, Callable[[World, str], None]] = {
    "node_ready": _node_ready,
    "node_stockout": _node_stockout,
    "node_deleted": _node_deleted,
    "node_stopped": _node_stopped,
    "node_updated": _node_updated,
    "metadata_propagated": _metadata_propagated,
    "node_started": _node_started,
    "preempt": _preempt_event,
    **{kind: _queued_event(kind) for kind in ("qr_accepted", "qr_active", "qr_suspended", "qr_deleted")},
    **maintenance.HANDLERS,  # maintenance windows' start and end
    **compute_tpu.HANDLERS,  # MIGs' VMs made and removed, their operations done
    **compute_vm_metadata.HANDLERS,  # a VM's own metadata reaching its metadata server
    **compute_flex.HANDLERS,  # flex-start VMs deleted at the end of their run duration
}
