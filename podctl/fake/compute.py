"""The fake's VPC networks and their firewall rules: the part of the Compute Engine API
podctl asks before `up` on a network of the user's (podctl/cloud/firewall.py).

Every project has the network `default` with Google's default rules that matter here,
`default-allow-internal` (all ports from 10.128.0.0/9) and `default-allow-ssh`
(tcp:22 from anywhere); the admin API adds other networks with rules of their own
(`POST /admin/network {project?, network, firewalls: [rule, ...]}`), and a network the
fake was not told of does not exist. Served (Compute Engine v1 JSON, errors in its
shape):

    GET /compute/v1/projects/P/global/networks/N
    GET /compute/v1/projects/P/regions/R/subnetworks/S    (the default network's, or an
                                                           added network's, named after it)
    GET /compute/v1/projects/P/global/firewalls?maxResults=&pageToken=
    GET /compute/v1/projects/P                            (commonInstanceMetadata: the
                                                           `enable-oslogin` switch, oslogin.py)

What the fake's hosts let through is the default network's rules whatever the network
(fake/README.md); these rules are what podctl reads, not what the hosts enforce.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from typing import Any

from aiohttp import web

from podctl.fake.world import World

_BASE = "https://www.googleapis.com/compute/v1"
DEFAULT_RULES = [
    {"name": "default-allow-internal", "direction": "INGRESS", "priority": 65534,
     "sourceRanges": ["10.128.0.0/9"],
     "allowed": [{"IPProtocol": "tcp", "ports": ["0-65535"]}, {"IPProtocol": "udp", "ports": ["0-65535"]},
                 {"IPProtocol": "icmp"}]},
    {"name": "default-allow-ssh", "direction": "INGRESS", "priority": 65534,
     "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}]},
]
_PAGE = 500  # Compute Engine's default and largest maxResults


def networks(world: World, project: str) -> dict[str, list[dict]]:
    """The project's networks -> their firewall rules (as the admin API added them)."""
    added = {key.split("/", 1)[1]: rules for key, rules in world.networks.items()
             if key.split("/", 1)[0] == project}
    return {"default": DEFAULT_RULES, **added}


def add_network(world: World, body: dict, project: str) -> dict:
    network = str(body.get("network") or "")
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", network):
        raise ValueError("network takes {project?, network: NAME, firewalls: [rule, ...]}")
    rules = body.get("firewalls") or []
    if not isinstance(rules, list) or not all(isinstance(r, dict) and r.get("name") for r in rules):
        raise ValueError("firewalls: a list of rules, each with a name")
    world.networks[f"{body.get('project') or project}/{network}"] = rules
    return {"networks": sorted(networks(world, str(body.get("project") or project)))}


def _error(code: int, message: str, reason: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message, "errors": [
        {"message": message, "domain": "global", "reason": reason}]}}, status=code)


def _not_found(what: str) -> web.Response:
    return _error(404, f"The resource '{what}' was not found", "notFound")


def _rule(project: str, network: str, rule: dict) -> dict:
    return {"kind": "compute#firewall", "direction": "INGRESS", "priority": 1000, "disabled": False,
            **rule, "network": f"{_BASE}/projects/{project}/global/networks/{network}",
            "selfLink": f"{_BASE}/projects/{project}/global/firewalls/{rule['name']}"}


def _project(world: World, project: str) -> dict:
    """`projects.get`: what podctl reads of it is commonInstanceMetadata (enable-oslogin)."""
    items = world.project_metadata.get(project, {})
    text = "".join(f"{k}={v};" for k, v in sorted(items.items()))
    return {"kind": "compute#project", "name": project, "id": str(zlib.crc32(project.encode())),
            "selfLink": f"{_BASE}/projects/{project}",
            "commonInstanceMetadata": {
                "kind": "compute#metadata",
                "fingerprint": base64.b64encode(hashlib.sha256(text.encode()).digest()[:8]).decode(),
                **({"items": [{"key": k, "value": v} for k, v in sorted(items.items())]} if items else {})}}


def answer(world: World, method: str, tail: str, query: Any) -> web.Response:
    """One Compute Engine call at /compute/v1/TAIL."""
    if method != "GET":
        return _error(405, "Method not allowed by the fake", "methodNotAllowed")
    match = re.fullmatch(r"projects/([^/]+)/?(.*)", tail)
    if not match:
        return _not_found(tail)
    project, rest = match.groups()
    nets = networks(world, project)
    if rest == "":
        return web.json_response(_project(world, project))
    if found := re.fullmatch(r"global/networks/([^/]+)", rest):
        name = found.group(1)
        if name not in nets:
            return _not_found(f"projects/{project}/global/networks/{name}")
        return web.json_response({"kind": "compute#network", "name": name,
                                  "selfLink": f"{_BASE}/projects/{project}/global/networks/{name}",
                                  "autoCreateSubnetworks": name == "default"})
    if found := re.fullmatch(r"regions/([^/]+)/subnetworks/([^/]+)", rest):
        region, name = found.groups()
        if name not in nets:
            return _not_found(f"projects/{project}/regions/{region}/subnetworks/{name}")
        return web.json_response({
            "kind": "compute#subnetwork", "name": name, "region": f"{_BASE}/projects/{project}/regions/{region}",
            "network": f"{_BASE}/projects/{project}/global/networks/{name}",
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
