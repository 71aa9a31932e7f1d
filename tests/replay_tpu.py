"""A local server that answers as the real Cloud TPU v2 service was recorded answering.

Not the fake: no lifecycle, no capacity, nothing of podctl's own invention. Every
node answer is the recorded body (tests/fixtures/tpu_node_crud_recorded.json, from
k8s-config-connector's mockgcp/mocktpu/testdata/node/crud/_http.log) with its
placeholders filled in, and every operation is the recorded one: metadata typed
`google.cloud.common.OperationMetadata`, the first reply without `done`, a finished
create's Node without `health`, a delete's response `google.protobuf.Empty`.

What the recording does not hold is made in the same shape and marked SYNTHESIZED
here: the accelerator type (discovery document's AcceleratorType), list answers,
the 404 body, and queued resources (no queued-resource recording is public; their
operations use the recorded operation shape, their node the recorded node).

It also serves an OAuth token endpoint (`/token`) for a service-account key whose
`token_uri` points here, and checks the bearer on every API call: a token it
issued, or a self-signed JWT (what google-cloud-tpu's client sends with a
service-account key, `always_use_jwt_access`) whose signature verifies against a
key in `public_keys`, so the gcp backend's Application Default Credentials run
for real. `errors` makes a call
answer with a given status and body (item 4's real-only errors).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.replay_http import JsonHandler, ReplayServer

RECORDED = json.loads((Path(__file__).parent / "fixtures" / "tpu_node_crud_recorded.json").read_text())
TOKEN = "ya29.replay-token"
PROJECT_NUMBER = "123456789012"
_EX = RECORDED["exchanges"]
CREATE_REPLY, CREATE_DONE, NODE_GET, DELETE_REPLY, DELETE_DONE = (e["body"] for e in _EX)


def _fill(value: Any, subs: dict[str, str]) -> Any:
    text = json.dumps(value)
    for key, sub in subs.items():
        text = text.replace("${" + key + "}", sub)
    return json.loads(text)


def not_found(name: str) -> tuple[int, dict]:
    # SYNTHESIZED in google.rpc.Status shape, as Google's front end words a missing resource.
    return 404, {"error": {"code": 404, "message": f"Resource '{name}' was not found",
                           "status": "NOT_FOUND", "details": [{
                               "@type": "type.googleapis.com/google.rpc.ResourceInfo",
                               "resourceName": name}]}}


class Replay(ReplayServer):
    def __init__(self, project: str = "replay-project", metadata_type: str | None = None,
                 token: str = TOKEN):
        self.project = project
        self.token = token  # what /token hands out (and the bearer it accepts)
        self.metadata_type = metadata_type  # replaces the recorded one when given
        self.nodes: dict[str, dict] = {}  # full name -> node
        self.queued: dict[str, dict] = {}
        self.operations: dict[str, dict] = {}  # name -> finished answer
        self.errors: list[tuple[str, str, int, dict]] = []  # (method, path regex, status, body)
        self.requests: list[str] = []
        self.tokens_issued = 0
        self.public_keys: list[str] = []  # PEM, of the service accounts it trusts
        self.jwts_verified = 0
        self.lock = threading.Lock()
        self._seq = 0
        self.serve(self._handler())

    # ---- answers -------------------------------------------------------------------

    def _subs(self, node_name: str, op: str) -> dict[str, str]:
        return {"projectId": self.project, "projectNumber": PROJECT_NUMBER, "operationID": op,
                "uniqueId": "UNUSED"}

    def _recorded(self, body: dict, node_name: str, op: str) -> dict:
        recorded_name = "projects/${projectId}/locations/us-central1-a/nodes/test-${uniqueId}"
        text = json.dumps(body).replace(recorded_name, node_name)
        zone = node_name.split("/")[3]
        out = _fill(json.loads(text.replace("us-central1-a", zone)), self._subs(node_name, op))
        if self.metadata_type and "metadata" in out:
            out["metadata"]["@type"] = self.metadata_type
        return out

    def _operation(self, reply: dict, done: dict, target: str, response: dict | None = None) -> dict:
        self._seq += 1
        op = f"operation-{self._seq}-replay"
        first = self._recorded(reply, target, op)
        finished = self._recorded(done, target, op)
        if response is not None:
            finished["response"] = response
        self.operations[first["name"]] = finished
        return first

    def _node(self, name: str, body: dict, health: bool = True) -> dict:
        node = self._recorded(NODE_GET, name, "")
        if not health:
            node.pop("health", None)
        for key in ("labels", "description", "metadata"):  # the server keeps what was asked
            if body.get(key):
                node[key] = body[key]
        if body.get("acceleratorType"):
            node["acceleratorType"] = body["acceleratorType"]
        if body.get("runtimeVersion"):
            node["runtimeVersion"] = body["runtimeVersion"]
        return node

    def answer(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
        for m, pattern, status, error in self.errors:
            if m == method and re.fullmatch(pattern, path):
                return status, error
        found = re.fullmatch(r"v2/(projects/[^/]+/locations/[^/]+)(?:/([a-zA-Z]+)(?:/([^/:]+))?)?", path)
        if not found:
            return 404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}}
        parent, collection, rid = found.groups()
        name = f"{parent}/{collection}/{rid}"
        if collection == "acceleratorTypes" and method == "GET" and rid:
            # SYNTHESIZED (discovery document AcceleratorType)
            return 200, {"name": name, "type": rid,
                         "acceleratorConfigs": [{"type": "V5P", "topology": "2x2x1"}]}
        if collection == "operations" and method == "GET":
            return (200, self.operations[name]) if name in self.operations else not_found(name)
        if collection == "nodes":
            if method == "GET" and rid is None:
                nodes = list(self.nodes.values())
                return 200, ({"nodes": nodes} if nodes else {})  # empty lists are left out
            if method == "POST" and rid is None:
                node_name = f"{parent}/nodes/{query['nodeId']}"
                self.nodes[node_name] = node = self._node(node_name, body)
                response = {"@type": "type.googleapis.com/google.cloud.tpu.v2.Node",
                            **{k: v for k, v in node.items() if k != "health"}}
                return 200, self._operation(CREATE_REPLY, CREATE_DONE, node_name, response)
            if method == "GET":
                return (200, self.nodes[name]) if name in self.nodes else not_found(name)
            if method == "DELETE":
                if name not in self.nodes:
                    return not_found(name)
                del self.nodes[name]
                return 200, self._operation(DELETE_REPLY, DELETE_DONE, name)
        if collection == "queuedResources":  # SYNTHESIZED from the recorded shapes
            if method == "GET" and rid is None:
                qrs = list(self.queued.values())
                return 200, ({"queuedResources": qrs} if qrs else {})
            if method == "POST" and rid is None:
                qr_name = f"{parent}/queuedResources/{query['queuedResourceId']}"
                spec = body["tpu"]["nodeSpec"][0]
                self.queued[qr_name] = {**body, "name": qr_name,
                                        "createTime": "2024-04-01T12:34:56.123456Z",
                                        "state": {"state": "WAITING_FOR_RESOURCES"}}
                self.queued[qr_name]["_node"] = (f"{spec['parent']}/nodes/{spec['nodeId']}", spec["node"])
                return 200, self._operation(CREATE_REPLY, CREATE_DONE, qr_name,
                                            {"@type": "type.googleapis.com/google.cloud.tpu.v2.QueuedResource"})
            if method == "GET":
                qr = self.queued.get(name)
                if qr is None:
                    return not_found(name)
                if qr["state"]["state"] == "WAITING_FOR_RESOURCES":  # the next look finds it ACTIVE
                    node_name, node_body = qr["_node"]
                    qr["state"] = {"state": "ACTIVE"}
                    node = self._node(node_name, node_body)
                    node["queuedResource"] = name
                    self.nodes[node_name] = node
                    return 200, {**{k: v for k, v in qr.items() if k != "_node"},
                                 "state": {"state": "WAITING_FOR_RESOURCES"}}
                return 200, {k: v for k, v in qr.items() if k != "_node"}
            if method == "DELETE":
                qr = self.queued.pop(name, None)
                if qr is None:
                    return not_found(name)
                self.nodes.pop(qr["_node"][0], None)
                return 200, self._operation(DELETE_REPLY, DELETE_DONE, name)
        return 404, {"error": {"code": 404, "message": f"no route {method} {path}", "status": "NOT_FOUND"}}

    def authorized(self, header: str) -> bool:
        bearer = header.removeprefix("Bearer ")
        if bearer == self.token:
            return True
        from google.auth import jwt

        for key in self.public_keys:
            try:
                jwt.decode(bearer, certs=key, verify=True)
            except (ValueError, Exception):  # noqa: BLE001 - any failure is "not this key"
                continue
            self.jwts_verified += 1
            return True
        return False

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replay = self

        class Handler(JsonHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with replay.lock:
                    replay.requests.append(f"{self.command} {parts.path}")
                    if parts.path == "/token":
                        replay.tokens_issued += 1
                        return self._send(200, {"access_token": replay.token, "expires_in": 3600,
                                                "token_type": "Bearer"})
                    if not replay.authorized(self.headers.get("Authorization", "")):
                        return self._send(401, {"error": {
                            "code": 401, "status": "UNAUTHENTICATED",
                            "message": "Request had invalid authentication credentials."}})
                    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                    body = json.loads(raw) if raw else {}
                    status, answer = replay.answer(self.command, parts.path.lstrip("/"), query, body)
                self._send(status, answer)

            do_GET = do_POST = do_DELETE = do_PATCH = _serve

        return Handler
