"""The part of the Compute Engine API podctl asks about VPC networks (podctl/cloud/firewall.py),
and what `podctl fake` changes there as gcloud would. The networks themselves, their
rules and subnets, are vpc.py's. Served (Compute Engine v1 JSON, errors in its shape):

    GET  /compute/v1/projects/P/global/networks/N
    GET  /compute/v1/projects/P/regions/R/subnetworks/S   (network S's subnet in R: ipCidrRange,
                                                           privateIpGoogleAccess)
    POST /compute/v1/projects/P/regions/R/subnetworks/S/setPrivateIpGoogleAccess
                                                          {privateIpGoogleAccess: bool}
    GET  /compute/v1/projects/P/global/firewalls?maxResults=&pageToken=
    POST /compute/v1/projects/P/global/firewalls          (firewalls.insert: INGRESS allow rules)
    GET  /compute/v1/projects/P                           (commonInstanceMetadata: the
                                                           `enable-oslogin` switch, oslogin.py)

A POST answers a `compute#operation` already DONE (Google's runs for seconds; gcloud
polls it). The hosts follow the change at once (hosts.py rewrites what they read).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import time
import zlib
from typing import Any

from aiohttp import web

from podctl.fake.api import compute_flex, compute_reservations, compute_tpu, vpc
from podctl.fake.world import World

_BASE = "https://www.googleapis.com/compute/v1"
_PAGE = 500  # Compute Engine's default and largest maxResults
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
# what firewalls.insert takes here; anything else is refused rather than ignored
_RULE_FIELDS = {"name", "description", "network", "direction", "priority", "allowed", "sourceRanges",
                "sourceTags", "targetTags", "disabled", "kind"}
add_network = vpc.add_network  # the admin API's (admin_api.py)


def _error(code: int, message: str, reason: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "errors": [
        {"message": message, "domain": "global", "reason": reason}]}}, status=code)


def _not_found(what: str) -> web.Response:
    return _error(404, f"The resource '{what}' was not found", "notFound")


def _rule(project: str, network: str, rule: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "compute#firewall", "direction": "INGRESS", "priority": 1000, "disabled": False,
            **rule, "network": f"{_BASE}/projects/{project}/global/networks/{network}",
            "selfLink": f"{_BASE}/projects/{project}/global/firewalls/{rule['name']}"}


def _project(world: World, project: str) -> dict[str, Any]:
    """`projects.get`: what podctl reads of it is commonInstanceMetadata (enable-oslogin)."""
    items = world.project_metadata.get(project, {})
    text = "".join(f"{k}={v};" for k, v in sorted(items.items()))
    return {"kind": "compute#project", "name": project, "id": str(zlib.crc32(project.encode())),
            "selfLink": f"{_BASE}/projects/{project}",
            "commonInstanceMetadata": {
                "kind": "compute#metadata",
                "fingerprint": base64.b64encode(hashlib.sha256(text.encode()).digest()[:8]).decode(),
                **({"items": [{"key": k, "value": v} for k, v in sorted(items.items())]} if items else {})}}


def _operation(project: str, kind: str, target: str, region: str | None = None) -> dict[str, Any]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())
    op_id = str(zlib.crc32(f"{target}{time.time_ns()}".encode()))
    where = f"regions/{region}" if region else "global"
    return {"kind": "compute#operation", "id": op_id, "name": f"operation-{op_id}", "operationType": kind,
            "targetLink": f"{_BASE}/projects/{project}/{target}", "status": "DONE", "progress": 100,
            "insertTime": stamp, "startTime": stamp, "endTime": stamp,
            **({"region": f"{_BASE}/projects/{project}/regions/{region}"} if region else {}),
            "selfLink": f"{_BASE}/projects/{project}/{where}/operations/operation-{op_id}"}


def _invalid(message: str) -> web.Response:
    return _error(400, f"Invalid value for field 'resource': {message}", "invalid")


def _port_spec(text: str) -> bool:
    """A firewall rule's port: N or LOW-HIGH, each 0-65535, LOW <= HIGH (as Compute Engine takes it)."""
    found = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", text)
    if not found:
        return False
    low, high = int(found.group(1)), int(found.group(2) or found.group(1))
    return 0 <= low <= high <= 65535


def _insert_firewall(world: World, project: str, body: Any) -> web.Response:
    """firewalls.insert, as `gcloud compute firewall-rules create` sends it: INGRESS allow
    rules only (what the fake's hosts enforce); deny and EGRESS rules are refused here
    rather than kept and ignored."""
    if not isinstance(body, dict):
        return _invalid("a Firewall resource (JSON object)")
    unknown = set(body) - _RULE_FIELDS
    if unknown:
        return _invalid(f"the fake does not model {', '.join(sorted(unknown))} (only INGRESS allow rules)")
    name = str(body.get("name") or "")
    if not _NAME.fullmatch(name):
        return _invalid(f"'{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'")
    network = str(body.get("network") or "global/networks/default").rstrip("/").rsplit("/", 1)[-1]
    nets = vpc.networks(world, project)
    if network not in nets:
        return _not_found(f"projects/{project}/global/networks/{network}")
    if any(r["name"] == name for rules in nets.values() for r in rules):
        return _error(409, f"The resource 'projects/{project}/global/firewalls/{name}' already exists",
                      "alreadyExists")
    if body.get("direction", "INGRESS") != "INGRESS":
        return _invalid("the fake models INGRESS rules only")
    allowed = body.get("allowed")
    if not isinstance(allowed, list) or not allowed or not all(
            isinstance(a, dict) and a.get("IPProtocol") for a in allowed):
        return _invalid("'allowed': at least one {IPProtocol, ports?}")
    for entry in allowed:
        for item in entry.get("ports") or []:
            if not _port_spec(str(item)):  # Google: "Invalid port specification"
                return _invalid(f"port '{item}': a port 0-65535 or a range LOW-HIGH of them")
    for cidr in body.get("sourceRanges") or []:
        try:
            ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            return _invalid(f"source range '{cidr}' is not a CIDR range")
    for tag in [*(body.get("sourceTags") or []), *(body.get("targetTags") or [])]:
        if not _NAME.fullmatch(str(tag)):
            return _invalid(f"tag '{tag}' is not a network tag")
    rule = {k: v for k, v in body.items() if k not in ("network", "kind")}
    rule.setdefault("direction", "INGRESS")
    rule.setdefault("priority", 1000)
    world.networks.setdefault(f"{project}/{network}", []).append(rule)
    return web.json_response(_operation(project, "insert", f"global/firewalls/{name}"))


def answer(world: World, method: str, tail: str, query: Any, body: Any = None) -> web.Response:
    """One Compute Engine call at /compute/v1/TAIL (BODY: a POST's JSON)."""
    match = re.fullmatch(r"projects/([^/]+)/?(.*)", tail)
    if not match:
        return _not_found(tail)
    project, rest = match.groups()
    try:
        served = (compute_flex.serve(world, method, project, rest, body)
                  or compute_reservations.serve(world, method, project, rest, body)
                  or compute_tpu.answer(world, method, project, rest, query, body))
    except compute_tpu.ComputeError as e:
        return web.json_response(e.body(), status=e.code)
    if served is not None:
        return web.json_response(served)
    if method == "POST":
        return _post(world, project, rest, body)
    if method != "GET":
        return _error(405, "Method not allowed by the fake", "methodNotAllowed")
    nets = vpc.networks(world, project)
    if rest == "":
        return web.json_response(_project(world, project))
    if found := re.fullmatch(r"global/networks/([^/]+)", rest):
        name = found.group(1)
        if name not in nets:
            return _not_found(f"projects/{project}/global/networks/{name}")
        return web.json_response({"kind": "compute#network", "name": name,
                                  "selfLink": f"{_BASE}/projects/{project}/global/networks/{name}",
                                  "autoCreateSubnetworks": name == vpc.DEFAULT})
    if found := re.fullmatch(r"regions/([^/]+)/subnetworks/([^/]+)", rest):
        region, name = found.groups()
        sub = vpc.subnet(world, project, region, name)
        if sub is None:
            return _not_found(f"projects/{project}/regions/{region}/subnetworks/{name}")
        return web.json_response({
            "kind": "compute#subnetwork", "name": name, "region": f"{_BASE}/projects/{project}/regions/{region}",
            "network": f"{_BASE}/projects/{project}/global/networks/{name}", **sub,
            "selfLink": f"{_BASE}/projects/{project}/regions/{region}/subnetworks/{name}"})
    if rest == "global/firewalls":
        rules = sorted((_rule(project, net, r) for net, rs in nets.items() for r in rs),
                       key=lambda r: r["name"])
        try:
            size = min(int(query.get("maxResults") or _PAGE), _PAGE)
            token = query.get("pageToken") or ""
            start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
        except ValueError:
            return _error(400, "Invalid value for field 'pageToken' or 'maxResults'.", "invalid")
        page: dict[str, Any] = {"kind": "compute#firewallList", "items": rules[start:start + size]}
        if start + size < len(rules):
            page["nextPageToken"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
        return web.json_response(page)
    return _not_found(f"projects/{project}/{rest}")


def _post(world: World, project: str, rest: str, body: Any) -> web.Response:
    if rest == "global/firewalls":
        return _insert_firewall(world, project, body)
    if found := re.fullmatch(r"regions/([^/]+)/subnetworks/([^/]+)/setPrivateIpGoogleAccess", rest):
        region, name = found.groups()
        if vpc.subnet(world, project, region, name) is None:
            return _not_found(f"projects/{project}/regions/{region}/subnetworks/{name}")
        on = (body or {}).get("privateIpGoogleAccess") if isinstance(body, dict) else None
        if not isinstance(on, bool):
            return _error(400, "Invalid value for field 'privateIpGoogleAccess': a boolean is required",
                          "invalid")
        vpc.set_private_google_access(world, project, region, name, on)
        return web.json_response(_operation(project, "setPrivateIpGoogleAccess",
                                            f"regions/{region}/subnetworks/{name}", region))
    return _error(405, "Method not allowed by the fake", "methodNotAllowed")
