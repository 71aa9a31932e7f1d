"""A local server that answers as the real Compute Engine v1 service was recorded answering,
for what podctl's Compute Engine provider calls (issue 38, item 5).

Not the fake: no capacity, no hosts, nothing of podctl's own invention where a recording
exists. Operations, instance templates, resource policies and managed instance groups
answer with the recorded bodies (tests/fixtures/compute_mig_crud_recorded.json, from
GoogleCloudPlatform/k8s-config-connector's recorded `_http.log` files, see its `source`),
their placeholders filled in: every insert's and delete's first answer RUNNING with
`progress` 0 and `targetId`, DONE at the next read; a template's `operationType`
`compute.instanceTemplates.insert`; a template read back with what the server fills in
(the boot disk's `deviceName`, `index` and `kind`, `metadata.fingerprint` and `kind`, the
interface's `name` and `kind`, `scheduling` defaults); a MIG with `fingerprint`,
`instanceGroup` and `status {isStable, versionTarget}` and no `currentActions`; the 404
body with `errors[].reason` `notFound`.

What no public recording holds is made in the same shape and marked SYNTHESIZED here:
list answers, the workload policy's own field (the recorded policy is a snapshot
schedule: its envelope and operations are what is replayed), `listManagedInstances`,
`instances.get` and `status.appliedAcceleratorTopologies` (field names from
google-cloud-compute's types, which follow the discovery document).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.replay_http import JsonHandler, ReplayServer

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "compute_mig_crud_recorded.json").read_text())
EX = {k: v["body"] for k, v in RECORDED["exchanges"].items()}
TOKEN = "ya29.replay-compute-token"
BASE = "https://www.googleapis.com/compute/v1"
RECORDED_ZONE, RECORDED_REGION = "us-central1-a", "us-central1"


def _fill(value: Any, subs: dict[str, str]) -> Any:
    text = json.dumps(value)
    for key, sub in subs.items():
        text = text.replace("${" + key + "}", sub)
    return json.loads(text)


def not_found(path: str) -> tuple[int, dict[str, Any]]:
    """The recorded 404, naming PATH."""
    recorded = "projects/${projectId}/zones/us-central1-a/instanceGroupManagers/${instanceGroupManagerID}"
    return 404, json.loads(json.dumps(EX["mig_get_404"]).replace(recorded, path))


def _template_as_read(asked: dict[str, Any]) -> dict[str, Any]:
    """A template's properties as the server gives them back: what was asked, and what the
    recorded GET shows the server adds (names and kinds, defaults)."""
    recorded = EX["template_get"]["properties"]
    props = copy.deepcopy(asked)
    for i, disk in enumerate(props.get("disks") or []):
        disk.setdefault("deviceName", "boot" if disk.get("boot") else f"persistent-disk-{i}")
        disk.update(index=0, kind=recorded["disks"][0]["kind"])
        disk.setdefault("mode", "READ_WRITE")
        disk.setdefault("type", "PERSISTENT")
        disk.setdefault("interface", "SCSI")
    metadata = props.setdefault("metadata", {})
    metadata.update(kind=recorded["metadata"]["kind"], fingerprint=recorded["metadata"]["fingerprint"])
    for nic in props.get("networkInterfaces") or []:
        nic.update(kind=recorded["networkInterfaces"][0]["kind"], name=recorded["networkInterfaces"][0]["name"])
    scheduling = props.setdefault("scheduling", {})
    for key, value in recorded["scheduling"].items():
        scheduling.setdefault(key, value)
    return props


class ComputeReplay(ReplayServer):
    def __init__(self, project: str = "replay-project", zone: str = "us-central1-c", token: str = TOKEN):
        self.project, self.zone, self.token = project, zone, token
        self.region = zone.rsplit("-", 1)[0]
        self.templates: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.migs: dict[str, dict[str, Any]] = {}
        self.reads: dict[str, int] = {}  # MIG name -> listManagedInstances calls (VMs run from the second)
        self.operations: dict[str, dict[str, Any]] = {}  # selfLink path -> its DONE answer
        self.errors: list[tuple[str, str, int, dict[str, Any]]] = []  # (method, path regex, status, body)
        self.requests: list[str] = []
        self.lock = threading.Lock()
        self._seq = 0
        self.serve(self._handler())

    @property
    def billable(self) -> list[str]:
        return [*self.templates, *self.policies, *self.migs]

    # ---- recorded answers -----------------------------------------------------------------

    def _recorded(self, body: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
        text = json.dumps(body).replace(f"zones/{RECORDED_ZONE}", f"zones/{self.zone}")
        text = text.replace(f"regions/{RECORDED_REGION}", f"regions/{self.region}")
        return _fill(json.loads(text), {"projectId": self.project, **ids})

    def _operation(self, first: str, done: str, ids: dict[str, str]) -> dict[str, Any]:
        self._seq += 1
        ids = {**ids, "operationID": f"operation-{self._seq}-replay"}
        reply, finished = self._recorded(EX[first], ids), self._recorded(EX[done], ids)
        # Config Connector's normalizer wrote the target's name into targetId; it is a number
        reply["targetId"] = finished["targetId"] = str(7000 + self._seq)
        self.operations[reply["selfLink"].removeprefix(BASE + "/")] = finished
        return reply

    def answer(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> tuple[int, dict]:
        for m, pattern, status, error in self.errors:
            if m == method and re.fullmatch(pattern, path):
                return status, error
        prefix = f"compute/v1/projects/{self.project}/"
        if not path.startswith(prefix):
            return not_found(path)
        rest = path.removeprefix(prefix)
        if re.fullmatch(r"(global|regions/[^/]+|zones/[^/]+)/operations/[^/]+", rest):
            done = self.operations.get(f"projects/{self.project}/{rest}")
            return (200, done) if done else not_found(f"projects/{self.project}/{rest}")
        for serve in (self._templates, self._policies, self._migs, self._instances):
            served = serve(method, rest, body)
            if served is not None:
                return served
        return not_found(f"projects/{self.project}/{rest}")

    def _templates(self, method: str, rest: str, body: dict[str, Any]) -> tuple[int, dict] | None:
        if rest == "global/instanceTemplates":
            if method == "POST":
                name = body["name"]
                got = self._recorded(EX["template_get"], {"instanceTemplateID": name})
                got["properties"] = _template_as_read(body["properties"])
                if body.get("description"):
                    got["description"] = body["description"]
                self.templates[name] = got
                return 200, self._operation("template_insert", "template_insert_done", {"instanceTemplateID": name})
            items = list(self.templates.values())  # SYNTHESIZED list shape
            return 200, {"kind": "compute#instanceTemplateList", "id": f"projects/{self.project}/global/"
                         "instanceTemplates", **({"items": items} if items else {}),
                         "selfLink": f"{BASE}/projects/{self.project}/global/instanceTemplates"}
        found = re.fullmatch(r"global/instanceTemplates/([^/]+)", rest)
        if not found:
            return None
        name = found.group(1)
        if name not in self.templates:
            return not_found(f"projects/{self.project}/{rest}")
        if method == "DELETE":
            del self.templates[name]
            # SYNTHESIZED: no template delete is recorded; its insert's operation, verb changed
            reply = self._operation("template_insert", "template_insert_done", {"instanceTemplateID": name})
            for op in (reply, self.operations[reply["selfLink"].removeprefix(BASE + "/")]):
                op["operationType"] = "compute.instanceTemplates.delete"
            return 200, reply
        return 200, self.templates[name]

    def _policies(self, method: str, rest: str, body: dict[str, Any]) -> tuple[int, dict] | None:
        found = re.fullmatch(r"regions/([^/]+)/resourcePolicies(?:/([^/]+))?", rest)
        if not found:
            return None
        name = found.group(2)
        if name is None and method == "POST":
            name = body["name"]
            policy = self._recorded(EX["policy_get"], {"resourcePolicyID": name})
            policy.pop("snapshotSchedulePolicy")
            policy["workloadPolicy"] = body["workloadPolicy"]  # SYNTHESIZED: the asked field kept
            if body.get("description"):
                policy["description"] = body["description"]
            self.policies[name] = policy
            return 200, self._operation("policy_insert", "policy_insert_done", {"resourcePolicyID": name})
        if name not in self.policies:
            return not_found(f"projects/{self.project}/{rest}")
        if method == "DELETE":
            del self.policies[name]
            return 200, self._operation("policy_delete", "policy_delete_done", {"resourcePolicyID": name})
        return 200, self.policies[name]

    def _vm_names(self, mig: dict[str, Any]) -> list[str]:
        return [f"{mig['baseInstanceName']}-{i:04x}" for i in range(mig["targetSize"])]

    def _migs(self, method: str, rest: str, body: dict[str, Any]) -> tuple[int, dict] | None:
        zone = f"zones/{self.zone}/instanceGroupManagers"
        if rest == zone and method == "POST":
            name = body["name"]
            mig = self._recorded(EX["mig_get"], {"instanceGroupManagerID": name})
            for key in ("autoHealingPolicies", "statefulPolicy", "updatePolicy"):
                mig.pop(key)  # what the recorded MIG was asked for; podctl asks for none of them
            mig.update(baseInstanceName=body["baseInstanceName"], targetSize=body["targetSize"],
                       instanceTemplate=body["instanceTemplate"], description=body.get("description", ""))
            if body.get("resourcePolicies"):
                mig["resourcePolicies"] = body["resourcePolicies"]
                shape = self.policies[body["resourcePolicies"]["workloadPolicy"].rsplit("/", 1)[-1]]
                mig["status"]["appliedAcceleratorTopologies"] = [  # SYNTHESIZED (field names: the library's)
                    {"acceleratorTopology": shape["workloadPolicy"]["acceleratorTopology"], "state": "ACTIVE"}]
            self.migs[name] = mig
            return 200, self._operation("mig_insert", "mig_insert_done", {"instanceGroupManagerID": name})
        if rest == zone:
            items = list(self.migs.values())  # SYNTHESIZED list shape
            return 200, {"kind": "compute#instanceGroupManagerList", **({"items": items} if items else {}),
                         "id": f"projects/{self.project}/{zone}", "selfLink": f"{BASE}/projects/{self.project}/{zone}"}
        found = re.fullmatch(rf"{zone}/([^/]+)(/listManagedInstances)?", rest)
        if not found:
            return None
        name, listing = found.groups()
        if name not in self.migs:
            return not_found(f"projects/{self.project}/{rest}")
        mig = self.migs[name]
        if listing:  # SYNTHESIZED: ManagedInstance fields; PROVISIONING at the first look, RUNNING after
            self.reads[name] = seen = self.reads.get(name, 0) + 1
            return 200, {"managedInstances": [{
                "instance": f"{BASE}/projects/{self.project}/zones/{self.zone}/instances/{vm}",
                "id": str(1000 + i), "instanceStatus": "RUNNING" if seen > 1 else "PROVISIONING",
                "currentAction": "NONE" if seen > 1 else "CREATING", "name": vm,
                "version": {"instanceTemplate": mig["instanceTemplate"]}}
                for i, vm in enumerate(self._vm_names(mig))]}
        if method == "DELETE":
            del self.migs[name]
            return 200, self._operation("mig_delete", "mig_delete_done", {"instanceGroupManagerID": name})
        return 200, mig

    def _instances(self, method: str, rest: str, body: dict[str, Any]) -> tuple[int, dict] | None:
        found = re.fullmatch(rf"zones/{self.zone}/instances/([^/]+)", rest)
        if not found:
            return None
        vm = found.group(1)
        for mig in self.migs.values():
            if vm in self._vm_names(mig):
                worker = self._vm_names(mig).index(vm)
                template = self.templates[mig["instanceTemplate"].rsplit("/", 1)[-1]]["properties"]
                return 200, {  # SYNTHESIZED: Instance fields
                    "kind": "compute#instance", "id": str(2000 + worker), "name": vm, "status": "RUNNING",
                    "creationTimestamp": mig["creationTimestamp"],
                    "zone": f"{BASE}/projects/{self.project}/zones/{self.zone}",
                    "machineType": f"{BASE}/projects/{self.project}/zones/{self.zone}/machineTypes/"
                                   f"{template['machineType']}",
                    "labels": template.get("labels", {}), "metadata": template["metadata"],
                    "scheduling": template["scheduling"],
                    "networkInterfaces": [{"kind": "compute#networkInterface", "name": "nic0",
                                           "network": f"{BASE}/projects/{self.project}/global/networks/default",
                                           "networkIP": f"10.0.0.{10 + worker}",
                                           "accessConfigs": [{"kind": "compute#accessConfig", "name": "External NAT",
                                                              "type": "ONE_TO_ONE_NAT",
                                                              "natIP": f"34.0.0.{10 + worker}"}]}],
                    "selfLink": f"{BASE}/projects/{self.project}/zones/{self.zone}/instances/{vm}"}
        return not_found(f"projects/{self.project}/{rest}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(JsonHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with replay.lock:
                    replay.requests.append(f"{self.command} {parts.path}")
                    if self.headers.get("Authorization", "") != f"Bearer {replay.token}":
                        return self._send(401, {"error": {"code": 401, "message": "Request had invalid "
                                                          "authentication credentials.", "errors": [{
                                                              "message": "Invalid Credentials",
                                                              "domain": "global", "reason": "authError"}]}})
                    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                    status, answer = replay.answer(self.command, parts.path.lstrip("/"), query,
                                                   json.loads(raw) if raw else {})
                self._send(status, answer)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve

        return Handler
