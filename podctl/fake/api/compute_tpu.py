"""TPU VMs through Compute Engine, as the fake serves them (compute v1 JSON, the paths
google-cloud-compute's REST transport calls): instance templates with a TPU machine type,
workload policies (a resource policy's `workloadPolicy.acceleratorTopology`), managed
instance groups (MIGs) of TPU VMs with resize and listManagedInstances, their instances
(with guest attributes) and the zone, region and global operations that follow each change.

    POST/GET/DELETE  projects/P/global/instanceTemplates[/T]
    POST/GET/DELETE  projects/P/regions/R/resourcePolicies[/N]
    POST/GET/DELETE  projects/P/zones/Z/instanceGroupManagers[/M]
    POST             projects/P/zones/Z/instanceGroupManagers/M/resize?size=N
    POST             projects/P/zones/Z/instanceGroupManagers/M/listManagedInstances
    POST             projects/P/zones/Z/instances/I/setMetadata (compute_vm_metadata.py)
    GET              projects/P/zones/Z/instances[/I]   instances/I/getGuestAttributes?queryPath=
    GET              projects/P/{zones/Z,regions/R,global}/operations/O

A MIG's VMs are one backing record in `world.nodes` (named like a Cloud TPU node, marked
`_api: compute`, which the Cloud TPU API does not show): the fake's hosts (hosts.py) start
for it as for a node, so its VMs are real hosts (SSH, metadata server, startup-script,
guest attributes). Its instances are named BASE-xxxx and their worker numbers follow
their names in sorted order (the fake's guess; podctl orders them the same way).
Every behaviour here has a row in fake/README.md with its source or "guess".
"""

from __future__ import annotations

import copy
import re
import secrets
import string
import zlib
from typing import TYPE_CHECKING, Any

from podctl.base import topology
from podctl.fake.api import compute_vm_metadata, label_rules
from podctl.fake.api.apierror import ApiError, rfc3339
from podctl.fake.api.node_fields import check_metadata, server_filled
from podctl.fake.vm import maintenance

if TYPE_CHECKING:  # world.py imports this module for its event handlers
    from podctl.fake.world import World

BASE = "https://www.googleapis.com/compute/v1"
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
MIG_SETTLE = 2.0  # simulated seconds an instanceGroupManagers.insert's operation runs (guess)
# What a template's properties may hold here; anything else is refused rather than ignored.
_PROPERTY_FIELDS = {"machineType", "labels", "metadata", "scheduling", "networkInterfaces",
                    "serviceAccounts", "tags", "disks", "reservationAffinity", "description"}
_WORKLOAD_TYPES = {"HIGH_THROUGHPUT", "HIGH_AVAILABILITY"}
STOCKOUT = "ZONE_RESOURCE_POOL_EXHAUSTED"  # a managed instance's lastAttempt error code
RESERVATION_KEY = "compute.googleapis.com/reservation-name"


class ComputeError(Exception):
    """An answer in Compute Engine's error shape (code, message, errors[].reason)."""

    def __init__(self, code: int, message: str, reason: str):
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "errors": [
            {"message": self.message, "domain": "global", "reason": self.reason}]}}


def _invalid(field: str, why: str) -> ComputeError:
    return ComputeError(400, f"Invalid value for field '{field}': {why}", "invalid")


def _not_found(path: str) -> ComputeError:
    return ComputeError(404, f"The resource '{path}' was not found", "notFound")


def _exists(path: str) -> ComputeError:
    return ComputeError(409, f"The resource '{path}' already exists", "alreadyExists")


def _in_use(path: str, user: str) -> ComputeError:
    return ComputeError(400, f"The {path.split('/')[-2][:-1]} resource '{path}' is already being used "
                        f"by '{user}'", "resourceInUseByAnotherResource")


def _name(body: dict[str, Any], field: str = "resource.name") -> str:
    name = str(body.get("name") or "")
    if not _NAME.fullmatch(name):
        raise _invalid(field, f"'{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'")
    return name


def _tail(link: str) -> str:
    """A resource's URL or partial path -> the path after projects/ ('P/zones/Z/...')."""
    return link.split("/projects/", 1)[-1].removeprefix("projects/")


def _machine_types() -> dict[str, tuple[topology.Generation, int]]:
    """Every TPU machine type Compute Engine serves: name -> (generation, chips per VM)."""
    return {name: (g, chips) for g in topology.generations().values() if g.on_compute
            for chips, name in g.machine_types}


# ---- operations ----------------------------------------------------------------------------


def _operation(world: World, project: str, where: str, kind: str, target: str, *,
               done: bool = True, target_id: str = "") -> dict[str, Any]:
    """A change's operation. As recorded, the first answer is always RUNNING (progress 0, no
    endTime): DONE=True means it is DONE from the next read on, as the recorded template,
    policy and MIG inserts and deletes were."""
    stamp = rfc3339(world.now())
    op_id = str(zlib.crc32(f"{target}{secrets.token_hex(4)}".encode()))
    name = f"operation-{int(world.now() * 1000)}-{secrets.token_hex(6)}"
    op: dict[str, Any] = {
        "kind": "compute#operation", "id": op_id, "name": name, "operationType": kind,
        "targetLink": f"{BASE}/projects/{project}/{target}", "targetId": target_id or op_id,
        "status": "DONE" if done else "RUNNING", "progress": 100 if done else 0, "insertTime": stamp,
        "startTime": stamp, "user": "fake-user@example.com",
        "selfLink": f"{BASE}/projects/{project}/{where}/operations/{name}"}
    if where.startswith("zones/"):
        op["zone"] = f"{BASE}/projects/{project}/{where}"
    elif where.startswith("regions/"):
        op["region"] = f"{BASE}/projects/{project}/{where}"
    if done:
        op["endTime"] = stamp
    world.compute_ops[f"{project}/{where}/{name}"] = op
    first = {k: v for k, v in op.items() if k != "endTime"}
    first.update(status="RUNNING", progress=0)
    return first


def finish_operation(world: World, key: str, error: tuple[str, str] | None = None) -> None:
    op = world.compute_ops.get(key)
    if op is None or op["status"] == "DONE":
        return
    op.update(status="DONE", progress=100, endTime=rfc3339(world.now()))
    if error:
        op["error"] = {"errors": [{"code": error[0], "message": error[1]}]}
        # a stockout is 503 (as Compute Engine's operations report it), anything else 400
        status = (503, "SERVICE UNAVAILABLE") if error[0].startswith(STOCKOUT) else (400, "BAD REQUEST")
        op["httpErrorStatusCode"], op["httpErrorMessage"] = status


# ---- instance templates (global) -----------------------------------------------------------


def _insert_template(world: World, project: str, body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ComputeError(400, "Invalid JSON payload received.", "parseError")
    name = _name(body)
    key = f"{project}/{name}"
    if key in world.templates:
        raise _exists(f"projects/{project}/global/instanceTemplates/{name}")
    props = body.get("properties")
    if not isinstance(props, dict):
        raise _invalid("resource.properties", "an instance template needs properties")
    unknown = set(props) - _PROPERTY_FIELDS
    if unknown:
        raise _invalid("resource.properties", f"the fake does not model {', '.join(sorted(unknown))}")
    machine = str(props.get("machineType") or "")
    if machine not in _machine_types():
        raise _invalid("resource.properties.machineType", f"'{machine}' is not a TPU machine type the fake "
                       f"serves ({', '.join(sorted(_machine_types()))})")
    label_rules.check(props.get("labels") or {})
    items = (props.get("metadata") or {}).get("items") or []
    check_metadata({str(i.get("key")): i.get("value") for i in items})
    scheduling = props.get("scheduling") or {}
    model = scheduling.get("provisioningModel", "STANDARD")
    if model not in ("STANDARD", "SPOT", "FLEX_START"):
        raise _invalid("resource.properties.scheduling.provisioningModel", f"'{model}'")
    if model in ("SPOT", "FLEX_START") and scheduling.get("instanceTerminationAction") not in (None, "DELETE", "STOP"):
        raise _invalid("resource.properties.scheduling.instanceTerminationAction",
                       f"'{scheduling.get('instanceTerminationAction')}'")
    if model == "FLEX_START":
        if scheduling.get("instanceTerminationAction") != "DELETE":
            raise _invalid("resource.properties.scheduling.instanceTerminationAction", "FLEX_START VMs "
                           "need instanceTerminationAction DELETE")
        affinity = (props.get("reservationAffinity") or {}).get("consumeReservationType", "NO_RESERVATION")
        if affinity != "NO_RESERVATION":
            raise _invalid("resource.properties.reservationAffinity", f"FLEX_START VMs consume no "
                           f"reservation, not {affinity}")
    template = {"kind": "compute#instanceTemplate", "name": name, "id": str(secrets.randbelow(2**62)),
                "creationTimestamp": rfc3339(world.now()), "description": body.get("description", ""),
                "properties": _filled_in(props),
                "selfLink": f"{BASE}/projects/{project}/global/instanceTemplates/{name}"}
    world.templates[key] = template
    return _operation(world, project, "global", "compute.instanceTemplates.insert",
                      f"global/instanceTemplates/{name}", target_id=template["id"])


def _filled_in(asked: dict[str, Any]) -> dict[str, Any]:
    """A template's properties as Compute Engine keeps them: what was asked and what the
    server adds (the recorded instanceTemplates.get: disks' deviceName, index, kind, mode,
    type, interface; metadata's kind and fingerprint; an interface's name and kind;
    scheduling's automaticRestart, onHostMaintenance and preemptible)."""
    props = copy.deepcopy(asked)
    for i, disk in enumerate(props.get("disks") or []):
        disk.setdefault("deviceName", "boot" if disk.get("boot") else f"persistent-disk-{i}")
        for key, value in (("index", i), ("kind", "compute#attachedDisk"), ("mode", "READ_WRITE"),
                           ("type", "PERSISTENT"), ("interface", "SCSI")):
            disk.setdefault(key, value)
    metadata = props.setdefault("metadata", {})
    metadata.update(kind="compute#metadata", fingerprint=str(zlib.crc32(repr(metadata.get("items")).encode())))
    for i, nic in enumerate(props.get("networkInterfaces") or []):
        nic.setdefault("name", f"nic{i}")
        nic["kind"] = "compute#networkInterface"
    scheduling = props.setdefault("scheduling", {})
    model = scheduling.get("provisioningModel", "STANDARD")
    scheduling.setdefault("automaticRestart", model == "STANDARD")
    scheduling.setdefault("onHostMaintenance", "TERMINATE")  # TPU VMs cannot live-migrate
    scheduling.setdefault("preemptible", False)
    return props


def _delete_template(world: World, project: str, name: str) -> dict[str, Any]:
    key = f"{project}/{name}"
    path = f"projects/{project}/global/instanceTemplates/{name}"
    if key not in world.templates:
        raise _not_found(path)
    user = next((m["selfLink"] for m in world.migs.values() if _tail(m["instanceTemplate"]) == _tail(path)),
                None)
    if user:
        raise _in_use(path, _tail(user))
    gone = world.templates.pop(key)
    return _operation(world, project, "global", "compute.instanceTemplates.delete",
                      f"global/instanceTemplates/{name}", target_id=gone["id"])


# ---- resource policies (regional): the workload policy ---------------------------------------


def _region_of(world: World, region: str) -> None:
    if not any(z.rsplit("-", 1)[0] == region for z in world.zones):
        raise _not_found(f"regions/{region}")


def _insert_policy(world: World, project: str, region: str, body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ComputeError(400, "Invalid JSON payload received.", "parseError")
    _region_of(world, region)
    name = _name(body)
    key = f"{project}/{region}/{name}"
    if key in world.policies:
        raise _exists(f"projects/{project}/regions/{region}/resourcePolicies/{name}")
    workload = body.get("workloadPolicy")
    if not isinstance(workload, dict):
        raise _invalid("resource.workloadPolicy", "the fake serves workload policies only")
    if workload.get("type") not in _WORKLOAD_TYPES:
        raise _invalid("resource.workloadPolicy.type", f"'{workload.get('type')}' (HIGH_THROUGHPUT or "
                       "HIGH_AVAILABILITY)")
    shape = str(workload.get("acceleratorTopology") or "")
    if shape and not re.fullmatch(r"\d+x\d+(x\d+)?", shape):
        raise _invalid("resource.workloadPolicy.acceleratorTopology", f"'{shape}' is not a topology (AxBxC)")
    policy = {"kind": "compute#resourcePolicy", "name": name, "id": str(secrets.randbelow(2**62)),
              "creationTimestamp": rfc3339(world.now()), "description": body.get("description", ""),
              "region": f"{BASE}/projects/{project}/regions/{region}", "status": "READY",
              "workloadPolicy": workload,
              "selfLink": f"{BASE}/projects/{project}/regions/{region}/resourcePolicies/{name}"}
    world.policies[key] = policy
    return _operation(world, project, f"regions/{region}", "insert", f"regions/{region}/resourcePolicies/{name}",
                      target_id=policy["id"])


def _delete_policy(world: World, project: str, region: str, name: str) -> dict[str, Any]:
    key = f"{project}/{region}/{name}"
    path = f"projects/{project}/regions/{region}/resourcePolicies/{name}"
    if key not in world.policies:
        raise _not_found(path)
    user = next((m["selfLink"] for m in world.migs.values()
                 if _tail((m.get("resourcePolicies") or {}).get("workloadPolicy", "")) == _tail(path)), None)
    if user:
        raise _in_use(path, _tail(user))
    gone = world.policies.pop(key)
    return _operation(world, project, f"regions/{region}", "delete", f"regions/{region}/resourcePolicies/{name}",
                      target_id=gone["id"])


# ---- managed instance groups ------------------------------------------------------------------


def node_name(project: str, zone: str, mig: str) -> str:
    """The backing record of MIG's VMs in world.nodes (hosts.py starts its hosts)."""
    return f"projects/{project}/locations/{zone}/nodes/{mig}"


def _mig(world: World, project: str, zone: str, name: str) -> dict[str, Any]:
    found = world.migs.get(f"{project}/{zone}/{name}")
    if found is None:
        raise _not_found(f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
    return found


def _slice_of(world: World, project: str, zone: str, template: dict[str, Any], size: int,
              policy: dict[str, Any] | None) -> topology.SliceType:
    """The slice a MIG of SIZE VMs of TEMPLATE's machine type forms under POLICY, or a 400."""
    machine = template["properties"]["machineType"]
    gen, chips = _machine_types()[machine]
    if zone not in gen.zones:
        raise _not_found(f"projects/{project}/zones/{zone}/machineTypes/{machine}")
    shape = str(((policy or {}).get("workloadPolicy") or {}).get("acceleratorTopology") or "")
    if size > 1 and chips == gen.chips_per_host and gen.single_host_max_chips <= chips and not shape:
        raise _invalid("resource.resourcePolicies.workloadPolicy", f"a MIG of {size} {machine} VMs forms "
                       "a multi-host slice only under a workload policy with an acceleratorTopology")
    if not shape:
        return gen.slice_type(gen.shape_for_chips(chips) or "")
    try:
        sliced = gen.slice_type(shape)
    except Exception as e:  # InvalidSliceError: not this generation's shape
        raise _invalid("resource.resourcePolicies.workloadPolicy", f"accelerator topology '{shape}' is "
                       f"not a {gen.name} topology") from e
    if sliced.hosts != size and size != 0:
        raise _invalid("resource.targetSize", f"accelerator topology {shape} takes {sliced.hosts} VMs of "
                       f"{machine}, not {size}")
    return sliced


def _insert_mig(world: World, project: str, zone: str, body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ComputeError(400, "Invalid JSON payload received.", "parseError")
    if zone not in world.zones:
        raise _not_found(f"projects/{project}/zones/{zone}")
    name = _name(body)
    key = f"{project}/{zone}/{name}"
    if key in world.migs or node_name(project, zone, name) in world.nodes:
        raise _exists(f"projects/{project}/zones/{zone}/instanceGroupManagers/{name}")
    link = str(body.get("instanceTemplate") or "")
    template = world.templates.get(_tail(link).replace("/global/instanceTemplates/", "/"))
    if template is None:
        raise _not_found(_tail(link) or "resource.instanceTemplate")
    size = body.get("targetSize", 0)
    if not isinstance(size, int) or size < 0:
        raise _invalid("resource.targetSize", f"'{size}'")
    policy_link = str((body.get("resourcePolicies") or {}).get("workloadPolicy") or "")
    policy = None
    if policy_link:
        match = re.fullmatch(r"([^/]+)/regions/([^/]+)/resourcePolicies/([^/]+)", _tail(policy_link))
        policy = world.policies.get("/".join(match.groups())) if match else None
        if policy is None:
            raise _not_found(_tail(policy_link))
        if match and match.group(2) != zone.rsplit("-", 1)[0]:
            raise _invalid("resource.resourcePolicies.workloadPolicy", "the policy is in another region")
    sliced = _slice_of(world, project, zone, template, size, policy)
    _no_flex_vms_but_by_request(template, size)
    if world.compute_insert_errors:  # the insert's operation fails: no MIG is made
        code = world.compute_insert_errors.pop(0)
        op = _operation(world, project, f"zones/{zone}", "insert", f"zones/{zone}/instanceGroupManagers/{name}",
                        done=False)
        finish_operation(world, f"{project}/zones/{zone}/{op['name']}",
                         insert_refusal(world, code, project, zone, template, policy_link))
        return op
    base = str(body.get("baseInstanceName") or name)
    mig = {"kind": "compute#instanceGroupManager", "name": name, "id": str(secrets.randbelow(2**62)),
           "creationTimestamp": rfc3339(world.now()), "baseInstanceName": base,
           "instanceTemplate": template["selfLink"], "targetSize": size,
           "zone": f"{BASE}/projects/{project}/zones/{zone}", "description": body.get("description", ""),
           "selfLink": f"{BASE}/projects/{project}/zones/{zone}/instanceGroupManagers/{name}",
           "instanceGroup": f"{BASE}/projects/{project}/zones/{zone}/instanceGroups/{name}",
           "fingerprint": secrets.token_urlsafe(8),
           "_slice": sliced.name, "_topology": sliced.topology, "_instances": []}
    if policy_link:
        mig["resourcePolicies"] = {"workloadPolicy": policy["selfLink"] if policy else policy_link}
    world.migs[key] = mig
    op = _operation(world, project, f"zones/{zone}", "insert",
                    f"zones/{zone}/instanceGroupManagers/{name}", done=False, target_id=mig["id"])
    world.schedule(MIG_SETTLE, "compute_op_done", f"{project}/zones/{zone}/{op['name']}")
    if size:
        _make_vms(world, mig, project, zone, size)
    return op


def is_flex(template: dict[str, Any]) -> bool:
    return (template["properties"].get("scheduling") or {}).get("provisioningModel") == "FLEX_START"


def _no_flex_vms_but_by_request(template: dict[str, Any], size: int) -> None:
    """A MIG of FLEX_START VMs is made (or resized) at 0; its VMs come by resize request
    (compute_flex.py)."""
    if size and is_flex(template):
        raise _invalid("resource.targetSize", f"'{size}': the instance template's VMs are FLEX_START, "
                       "which a MIG makes only through a resize request (targetSize 0, then "
                       "instanceGroupManagerResizeRequests.insert)")


def reservation_refusal(world: World, project: str, zone: str, template: dict[str, Any]) -> dict[str, str] | None:
    """Why TEMPLATE's VMs cannot be made in ZONE for its reservation affinity (an error of
    a managed instance's lastAttempt), or None: a SPECIFIC_RESERVATION whose reservation
    does not exist in the zone (compute_reservations.py keeps them), or one that may not
    be targeted by name (its specificReservationRequired is not set)."""
    affinity = template["properties"].get("reservationAffinity") or {}
    if affinity.get("consumeReservationType") != "SPECIFIC_RESERVATION":
        return None
    named = str((affinity.get("values") or [""])[0])
    owner = re.match(r"projects/([^/]+)/", named)
    owner_project, short = (owner.group(1) if owner else project), named.rsplit("/", 1)[-1]
    path = f"projects/{owner_project}/zones/{zone}/reservations/{short}"
    said = (f"Invalid value for field 'resource.reservationAffinity': '{{  \"consumeReservationType\": "
            f"\"SPECIFIC_ALLOCATION\",  \"key\": \"{RESERVATION_KEY}\",  \"values\": [\"{named}\"]}}'. ")
    found = world.reservations.get(f"{owner_project}/{zone}/{short}")
    if found is None:
        return {"code": "INVALID_FIELD_VALUE", "message": f"{said}Specified reservations [{path}] do not exist."}
    if not found["specificReservationRequired"]:
        return {"code": "INVALID_FIELD_VALUE", "message": f"{said}Specified reservations [{path}] can not be "
                "targeted as specificReservationRequired is not set"}
    return None


def quota_metric(sliced: topology.SliceType) -> str:
    """The name a quota refusal gives a generation's chips (the fake's guess: Compute
    Engine's own TPU quota names were not found; its CPU ones read 'N2_CPUS')."""
    return f"{sliced.generation.key.upper()}_CHIPS"


def quota_refusal(world: World, project: str, zone: str, sliced: topology.SliceType) -> dict[str, str] | None:
    """QUOTA_EXCEEDED (a managed instance's lastAttempt error) where the project's chip
    quota (`POST /admin/quota`: the same as the Cloud TPU API's, kept per zone) cannot hold
    SLICED beside what the project's slices in the zone already hold; else None."""
    limit = world.quota.get(f"{project}/{zone}")
    if limit is None:
        return None
    prefix = f"projects/{project}/locations/{zone}/"
    used = sum(n["_chips"] for n in world.nodes.values() if n["name"].startswith(prefix)
               and not n.get("_refused") and not n.get("_stockout"))
    if used + sliced.chips <= limit:
        return None
    # Compute Engine's words ("Quota 'N2_CPUS' exceeded.  Limit: 8.0 in region R.")
    return {"code": "QUOTA_EXCEEDED", "message": f"Quota '{quota_metric(sliced)}' exceeded.  Limit: "
            f"{float(limit)} in region {zone.rsplit('-', 1)[0]}."}


def insert_refusal(world: World, code: str, project: str, zone: str, template: dict[str, Any],
                   policy_link: str) -> tuple[str, str]:
    """The error a failed MIG insert's operation carries for CODE, in Compute Engine's words."""
    if code == "QUOTA_EXCEEDED":
        machine = template["properties"]["machineType"]
        gen, _ = _machine_types()[machine]
        limit = world.quota.get(f"{project}/{zone}", 0)
        return code, (f"Quota '{gen.key.upper()}_CHIPS' exceeded.  Limit: {float(limit)} in region "
                      f"{zone.rsplit('-', 1)[0]}.")
    if code == STOCKOUT:
        return code, (f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available "
                      "to fulfill the request.  Try a different zone, or try again later.")
    affinity = template["properties"].get("reservationAffinity") or {}
    missing = (str((affinity.get("values") or [""])[0]) or _tail(policy_link)
               or f"projects/{project}/zones/{zone}/reservations/unnamed")
    return code, f"The resource '{missing}' was not found"


def _make_vms(world: World, mig: dict[str, Any], project: str, zone: str, size: int) -> None:
    """SIZE VMs of the MIG's slice, all at once (a TPU slice is made whole or not at all):
    RUNNING `timings.node_create` later where the zone has the chips, else left CREATING with
    the stockout error on each instance's lastAttempt, as long as the MIG is asked for them."""
    sliced = topology.parse_slice(mig["_slice"])
    template = world.templates[_tail(mig["instanceTemplate"]).replace("/global/instanceTemplates/", "/")]
    props = template["properties"]
    letters = string.ascii_lowercase + string.digits
    names = sorted({f"{mig['baseInstanceName']}-{''.join(secrets.choice(letters) for _ in range(4))}"
                    for _ in range(size * 2)})[:size]
    mig["_instances"] = names
    metadata = {str(i["key"]): str(i.get("value", "")) for i in (props.get("metadata") or {}).get("items") or []}
    node = {
        "name": node_name(project, zone, mig["name"]), "state": "CREATING", "id": mig["id"],
        "acceleratorType": sliced.name, "createTime": rfc3339(world.now()),
        "acceleratorConfig": {"type": sliced.generation.api_type, "topology": sliced.topology},
        "labels": dict(props.get("labels") or {}), "metadata": metadata,
        "runtimeVersion": sliced.generation.default_runtime_version, "_api": "compute", "_zone": zone,
        "_chips": sliced.chips, "_hosts": sliced.hosts, "_reserved": False, "_mig": mig["selfLink"],
        "_vm_names": names, "_template": template["selfLink"],  # what each VM's metadata server says
    }
    refused = reservation_refusal(world, project, zone, template) or quota_refusal(world, project, zone, sliced)
    if refused is not None:
        node["_refused"] = refused  # its VMs are never made; each instance's lastAttempt says why
    elif sliced.chips <= world.free_chips(zone):
        node["_reserved"] = True
        world.schedule(world.timings.node_create, "mig_vms_ready", node["name"])
    else:
        node["_stockout"] = True
    node.update(server_filled(project, zone, _as_node(props)))
    world.nodes[node["name"]] = node


def _as_node(props: dict[str, Any]) -> dict[str, Any]:
    """A template's network, account and tags in a Cloud TPU node's words, for the hosts
    (hosts.py reads those): an access config on the interface is an external IP."""
    nic = (props.get("networkInterfaces") or [{}])[0]
    network: dict[str, Any] = {"network": str(nic.get("network") or "default").rsplit("/", 1)[-1]}
    if nic.get("subnetwork"):
        network["subnetwork"] = nic["subnetwork"]
    if nic.get("accessConfigs"):
        network["enableExternalIps"] = True
    node: dict[str, Any] = {"networkConfig": network}
    accounts = props.get("serviceAccounts") or []
    if accounts:
        account = {"scope": list(accounts[0].get("scopes") or [])}
        if accounts[0].get("email") not in (None, "", "default"):
            account["email"] = accounts[0]["email"]
        node["serviceAccount"] = account
    if (props.get("tags") or {}).get("items"):
        node["tags"] = list(props["tags"]["items"])
    return node


def _delete_mig(world: World, project: str, zone: str, name: str) -> dict[str, Any]:
    mig = _mig(world, project, zone, name)
    op = _operation(world, project, f"zones/{zone}", "delete",
                    f"zones/{zone}/instanceGroupManagers/{name}", done=False, target_id=mig["id"])
    mig.setdefault("_delete_ops", []).append(f"{project}/zones/{zone}/{op['name']}")
    if not mig.get("_deleting"):
        mig["_deleting"] = True
        node = world.nodes.get(node_name(project, zone, name))
        if node is not None:
            node["state"] = "DELETING"
            node.pop("health", None)
        world.schedule(world.timings.node_delete, "mig_deleted", f"{project}/{zone}/{name}")
    return op


def _resize(world: World, project: str, zone: str, name: str, size_text: str) -> dict[str, Any]:
    """resize: a TPU slice's MIG takes 0 or its whole slice (its VMs are made and removed
    together: the fake's reading of "multi-host TPU slice" MIGs)."""
    mig = _mig(world, project, zone, name)
    if not size_text.isdigit():
        raise ComputeError(400, "Required parameter 'size' is missing or invalid", "required")
    size = int(size_text)
    sliced = topology.parse_slice(mig["_slice"])
    if size not in (0, sliced.hosts):
        raise _invalid("size", f"a MIG of a {sliced.name} slice ({mig['_topology']}) takes 0 or "
                       f"{sliced.hosts} VMs, not {size}")
    template = world.templates[_tail(mig["instanceTemplate"]).replace("/global/instanceTemplates/", "/")]
    _no_flex_vms_but_by_request(template, size)
    key = node_name(project, zone, name)
    if size and key not in world.nodes:
        _make_vms(world, mig, project, zone, size)
    elif not size and key in world.nodes:
        world.nodes[key]["state"] = "DELETING"
        world.schedule(world.timings.node_delete, "mig_vms_gone", key)
    mig["targetSize"] = size
    return _operation(world, project, f"zones/{zone}", "resize", f"zones/{zone}/instanceGroupManagers/{name}",
                      target_id=mig["id"])


def _status(world: World, mig: dict[str, Any], project: str, zone: str) -> dict[str, Any]:
    node = world.nodes.get(node_name(project, zone, mig["name"]))
    running = node is not None and node["state"] == "READY"
    recreating = bool(node is not None and node.get("_recreating"))
    stable = ((running and not recreating) or mig["targetSize"] == 0) and not mig.get("_deleting")
    status: dict[str, Any] = {"isStable": stable, "versionTarget": {"isReached": stable}}
    if "resourcePolicies" in mig:
        state = "ACTIVE" if running else "ACTIVATING"
        if mig.get("_topology_failed"):
            state = "FAILED"
        entry: dict[str, Any] = {"acceleratorTopology": mig["_topology"], "state": state}
        if state == "FAILED":
            entry["stateDetails"] = {"error": {"errors": [{"code": "ACCELERATOR_TOPOLOGY_FAILED",
                                                           "message": mig["_topology_failed"]}]},
                                     "timestamp": rfc3339(world.now())}
        status["appliedAcceleratorTopologies"] = [entry]
    return status


def _render_mig(world: World, mig: dict[str, Any], project: str, zone: str) -> dict[str, Any]:
    shown = {k: v for k, v in mig.items() if not k.startswith("_")}
    node = world.nodes.get(node_name(project, zone, mig["name"]))
    action = "NONE"
    if mig.get("_deleting") or (node is not None and node["state"] == "DELETING"):
        action = "deleting"
    elif node is not None and node["state"] != "READY":
        action = "creating"
    counts = {k: 0 for k in ("none", "creating", "deleting", "recreating")}
    for _ in mig["_instances"] if node is not None else ():
        counts[action.lower() if action != "NONE" else "none"] += 1
    shown["currentActions"] = counts
    shown["status"] = _status(world, mig, project, zone)
    return shown


def _managed(world: World, mig: dict[str, Any], project: str, zone: str) -> list[dict[str, Any]]:
    node = world.nodes.get(node_name(project, zone, mig["name"]))
    if node is None:
        return []
    out = []
    for worker, name in enumerate(mig["_instances"]):
        state = node["state"]
        recreating = worker in (node.get("_recreating") or [])
        entry: dict[str, Any] = {
            "instance": f"{BASE}/projects/{project}/zones/{zone}/instances/{name}", "name": name,
            "id": str(zlib.crc32(name.encode())),
            "currentAction": ("RECREATING" if recreating else "NONE" if state == "READY"
                              else "DELETING" if state == "DELETING" else "CREATING"),
            "instanceStatus": ("RUNNING" if state == "READY" and not recreating
                               else "STOPPING" if state == "DELETING" else "PROVISIONING"),
        }
        if node.get("_refused"):
            del entry["instanceStatus"], entry["id"]
            entry["lastAttempt"] = {"errors": {"errors": [node["_refused"]]}}
        if node.get("_stockout"):
            # the VM was never made: no instanceStatus ("empty when the instance does not
            # exist", ManagedInstance.instanceStatus) and no id, only the MIG's attempt
            del entry["instanceStatus"], entry["id"]
            entry["lastAttempt"] = {"errors": {"errors": [{"code": STOCKOUT, "message": (
                f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available "
                "to fulfill the request. Try a different zone, or try again later.")}]}}
        out.append(entry)
    return out


def _instance(world: World, project: str, zone: str, name: str) -> tuple[dict[str, Any], int]:
    for mig in world.migs.values():
        if name in mig["_instances"] and mig["zone"].endswith(f"/projects/{project}/zones/{zone}"):
            node = world.nodes.get(node_name(project, zone, mig["name"]))
            if node is not None and not node.get("_stockout") and not node.get("_refused"):  # never made
                return node, mig["_instances"].index(name)
    raise _not_found(f"projects/{project}/zones/{zone}/instances/{name}")


def _render_instance(world: World, project: str, zone: str, name: str) -> dict[str, Any]:
    node, worker = _instance(world, project, zone, name)
    mig = next(m for m in world.migs.values() if m["selfLink"] == node["_mig"])
    template = world.templates[_tail(mig["instanceTemplate"]).replace("/global/instanceTemplates/", "/")]
    props = template["properties"]
    endpoints = node.get("networkEndpoints") or []
    recreating = worker in (node.get("_recreating") or [])
    status = {"READY": "RUNNING", "DELETING": "STOPPING", "CREATING": "PROVISIONING"}.get(node["state"], "TERMINATED")
    if recreating:
        status = "PROVISIONING"
    interface: dict[str, Any] = {"network": f"{BASE}/projects/{project}/global/networks/default",
                                 "name": "nic0"}
    if worker < len(endpoints) and node["state"] == "READY":
        interface["networkIP"] = endpoints[worker].get("ipAddress", "")
        external = (endpoints[worker].get("accessConfig") or {}).get("externalIp")
        if external:
            interface["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "natIP": external}]
    # compute v1 Instance.resourceStatus.upcomingMaintenance, on the VMs a maintenance
    # names (the `maintenance` fault's --workers): the fields of v2alpha1's, same names
    plan = maintenance.upcoming(node) if worker in (node.get("_maintenance") or {}).get("workers", []) else None
    return {**({"resourceStatus": {"upcomingMaintenance": plan}} if plan else {}),
            "kind": "compute#instance", "name": name, "id": str(zlib.crc32(name.encode())),
            "zone": f"{BASE}/projects/{project}/zones/{zone}", "status": status,
            "machineType": f"{BASE}/projects/{project}/zones/{zone}/machineTypes/{props['machineType']}",
            "creationTimestamp": node["createTime"], "labels": dict(props.get("labels") or {}),
            "metadata": compute_vm_metadata.rendered(node, worker),
            "scheduling": props.get("scheduling") or {}, "networkInterfaces": [interface],
            "selfLink": f"{BASE}/projects/{project}/zones/{zone}/instances/{name}"}


def _guest(world: World, project: str, zone: str, name: str, query_path: str) -> dict[str, Any]:
    from podctl.fake.vm.metadata import guest_items

    node, worker = _instance(world, project, zone, name)
    items = guest_items((node.get("_guest") or {}).get(str(worker), {}), query_path)
    return {"kind": "compute#guestAttributes", "queryPath": query_path,
            "selfLink": f"{BASE}/projects/{project}/zones/{zone}/instances/{name}/getGuestAttributes",
            "queryValue": {"items": items}}


# ---- dispatch -----------------------------------------------------------------------------------


def answer(world: World, method: str, project: str, rest: str, query: Any,
           body: Any) -> dict[str, Any] | None:
    """One TPU-VM call at projects/PROJECT/REST; None where the path is not one of these
    (compute.py answers it, or refuses it). Raises ComputeError for Google's errors."""
    for serve in (_templates, _policies, _migs, _instances_and_operations):
        served = serve(world, method, project, rest, dict(query or {}), body)
        if served is not None:
            return served
    return None


def _templates(world: World, method: str, project: str, rest: str, q: dict[str, Any],
               body: Any) -> dict[str, Any] | None:
    if rest == "global/instanceTemplates":
        if method == "POST":
            return _insert_template(world, project, body)
        return _listing("compute#instanceTemplateList",
                        [t for k, t in sorted(world.templates.items()) if k.startswith(project + "/")])
    if found := re.fullmatch(r"global/instanceTemplates/([^/]+)", rest):
        if method == "DELETE":
            return _delete_template(world, project, found.group(1))
        template = world.templates.get(f"{project}/{found.group(1)}")
        if template is None:
            raise _not_found(f"projects/{project}/{rest}")
        return template
    return None


def _policies(world: World, method: str, project: str, rest: str, q: dict[str, Any],
              body: Any) -> dict[str, Any] | None:
    if found := re.fullmatch(r"regions/([^/]+)/resourcePolicies", rest):
        region = found.group(1)
        if method == "POST":
            return _insert_policy(world, project, region, body)
        _region_of(world, region)
        return _listing("compute#resourcePolicyList", [p for k, p in sorted(world.policies.items())
                                                        if k.startswith(f"{project}/{region}/")])
    if found := re.fullmatch(r"regions/([^/]+)/resourcePolicies/([^/]+)", rest):
        region, name = found.groups()
        if method == "DELETE":
            return _delete_policy(world, project, region, name)
        policy = world.policies.get(f"{project}/{region}/{name}")
        if policy is None:
            raise _not_found(f"projects/{project}/{rest}")
        return policy
    return None


def _migs(world: World, method: str, project: str, rest: str, q: dict[str, Any],
          body: Any) -> dict[str, Any] | None:
    if found := re.fullmatch(r"zones/([^/]+)/instanceGroupManagers", rest):
        zone = found.group(1)
        if method == "POST":
            return _insert_mig(world, project, zone, body)
        return _listing("compute#instanceGroupManagerList",
                        [_render_mig(world, m, project, zone) for k, m in sorted(world.migs.items())
                         if k.startswith(f"{project}/{zone}/")])
    found = re.fullmatch(r"zones/([^/]+)/instanceGroupManagers/([^/]+)(/[a-zA-Z]+)?", rest)
    if not found:
        return None
    zone, name, verb = found.group(1), found.group(2), found.group(3) or ""
    if verb == "/resize" and method == "POST":
        return _resize(world, project, zone, name, str(q.get("size", "")))
    if verb == "/listManagedInstances" and method == "POST":
        mig = _mig(world, project, zone, name)
        return {"managedInstances": _managed(world, mig, project, zone)}
    if verb == "" and method == "DELETE":
        return _delete_mig(world, project, zone, name)
    if verb == "" and method == "GET":
        return _render_mig(world, _mig(world, project, zone, name), project, zone)
    raise ComputeError(405, "Method not allowed by the fake", "methodNotAllowed")


def _instances_and_operations(world: World, method: str, project: str, rest: str, q: dict[str, Any],
                              body: Any) -> dict[str, Any] | None:
    if (found := re.fullmatch(r"zones/([^/]+)/instances/([^/]+)/setMetadata", rest)) and method == "POST":
        return _set_metadata(world, project, found.group(1), found.group(2), body)
    if found := re.fullmatch(r"zones/([^/]+)/instances/([^/]+)(/getGuestAttributes)?", rest):
        zone, name, guest = found.groups()
        if method != "GET":
            raise ComputeError(405, "Method not allowed by the fake", "methodNotAllowed")
        if guest:
            return _guest(world, project, zone, name, str(q.get("queryPath", "")))
        return _render_instance(world, project, zone, name)
    if found := re.fullmatch(r"(zones/[^/]+|regions/[^/]+|global)/operations/([^/]+)", rest):
        op = world.compute_ops.get(f"{project}/{found.group(1)}/{found.group(2)}")
        if op is None:
            raise _not_found(f"projects/{project}/{rest}")
        return op
    return None


def _set_metadata(world: World, project: str, zone: str, name: str, body: Any) -> dict[str, Any]:
    """instances.setMetadata (compute_vm_metadata.py): the VM's own map, by its fingerprint."""
    node, worker = _instance(world, project, zone, name)
    if worker in (node.get("_recreating") or []) or node["state"] != "READY":
        # Google answers a VM being made again with its new record; the fake's guess is
        # that a write to it while it is not RUNNING is refused, as a stopping VM's is
        raise ComputeError(400, f"The resource 'projects/{project}/zones/{zone}/instances/{name}' is not "
                           "ready", "resourceNotReady")
    try:
        compute_vm_metadata.set_metadata(world, node, worker, body)
    except compute_vm_metadata.StaleFingerprint as e:
        raise ComputeError(412, str(e), "conditionNotMet") from e
    except compute_vm_metadata.BadBody as e:
        raise ComputeError(400, str(e), "parseError") from e
    return _operation(world, project, f"zones/{zone}", "setMetadata", f"zones/{zone}/instances/{name}",
                      target_id=str(zlib.crc32(name.encode())))


def _listing(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "items": items} if items else {"kind": kind}


# ---- transitions (world.py's event handlers) ---------------------------------------------------


def vms_ready(world: World, name: str) -> None:
    node = world.nodes.get(name)
    if node is None or node["state"] != "CREATING" or node.get("_topology_failed"):
        return
    world.make_ready(node)


def vms_gone(world: World, name: str) -> None:
    world.nodes.pop(name, None)


def mig_deleted(world: World, key: str) -> None:
    mig = world.migs.pop(key, None)
    if mig is None:
        return
    project, zone, name = key.split("/")
    world.nodes.pop(node_name(project, zone, name), None)
    for op in mig.get("_delete_ops", []):
        finish_operation(world, op)


def recreate(world: World, name: str, worker: int) -> None:
    """The MIG recreates WORKER's VM of node NAME (the preempt-vm fault): RECREATING
    for `timings.node_create`, then RUNNING again."""
    node = world.nodes[name]
    node["_recreating"] = sorted({*node.get("_recreating", []), worker})
    compute_vm_metadata.remade(node, worker)  # the template's map again: the run's pointer is gone
    world.schedule(world.timings.node_create, "mig_vm_recreated", f"{name}#{worker}")


def vm_recreated(world: World, target: str) -> None:
    name, _, worker = target.rpartition("#")
    node = world.nodes.get(name)
    if node is not None:
        node["_recreating"] = [w for w in node.get("_recreating", []) if w != int(worker)]


def op_done(world: World, key: str) -> None:
    finish_operation(world, key)


def fail_topology(world: World, mig_name: str, why: str) -> None:
    """The fault: MIG_NAME's accelerator topology cannot form (its VMs never come up)."""
    for mig in world.migs.values():
        if mig["name"] == mig_name:
            mig["_topology_failed"] = why
            zone = mig["zone"].rsplit("/", 1)[-1]
            project = _tail(mig["selfLink"]).split("/", 1)[0]
            node = world.nodes.get(node_name(project, zone, mig_name))
            if node is not None and node["state"] == "CREATING":
                node["_topology_failed"] = True  # its VMs never come up (vms_ready)
            return
    raise ApiError(404, "NOT_FOUND", f"no MIG named {mig_name}")


HANDLERS = {"mig_vms_ready": vms_ready, "mig_vms_gone": vms_gone, "mig_deleted": mig_deleted,
            "compute_op_done": op_done, "mig_vm_recreated": vm_recreated}
