"""The fake's VPC networks as Google keeps them: each network's firewall rules, each
subnetwork's range and Private Google Access, and what follows for a node's hosts.

Every project has the network `default` with Google's four pre-populated rules
(https://cloud.google.com/vpc/docs/firewalls#more_rules_default_vpc:
`default-allow-internal` tcp/udp 0-65535 and icmp from 10.128.0.0/9, `default-allow-ssh`
tcp:22, `default-allow-rdp` tcp:3389 and `default-allow-icmp` icmp from anywhere, all at
priority 65534). Any other network has only the rules a user adds (the admin API's
`POST /admin/network`, or `firewalls.insert`: compute.py): a custom VPC starts with the
implied rules alone, deny all ingress. A network N has one subnetwork per region, named
N; its `privateIpGoogleAccess` is off until turned on (`subnetworks.setPrivateIpGoogleAccess`),
as on a new subnet; its `ipCidrRange` is the auto-mode range for the default network's,
else the one the admin API gave (10.0.0.0/20 unless told).

World state: `world.networks` ("project/network" -> the rules added to it; the default
network's four are not stored) and `world.subnets` ("project/region/name" -> the fields
set on it: privateIpGoogleAccess, ipCidrRange).

`reach(world, node)` says what one node's hosts may reach (hosts.py writes it for the
hosts' sitecustomize): Google APIs (GCS, the fake's API) with an external IP or Private
Google Access; each host of the same network at the TCP ports that network's INGRESS
allow rules admit from this node (its subnet's range, its tags) to that host's tags.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

DEFAULT = "default"
_ALL_PORTS = (0, 65535)
DEFAULT_RULES: list[dict[str, Any]] = [
    {"name": "default-allow-internal", "description": "Allow internal traffic on the default network",
     "direction": "INGRESS", "priority": 65534, "sourceRanges": ["10.128.0.0/9"],
     "allowed": [{"IPProtocol": "tcp", "ports": ["0-65535"]}, {"IPProtocol": "udp", "ports": ["0-65535"]},
                 {"IPProtocol": "icmp"}]},
    {"name": "default-allow-ssh", "description": "Allow SSH from anywhere", "direction": "INGRESS",
     "priority": 65534, "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}]},
    {"name": "default-allow-rdp", "description": "Allow RDP from anywhere", "direction": "INGRESS",
     "priority": 65534, "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "tcp", "ports": ["3389"]}]},
    {"name": "default-allow-icmp", "description": "Allow ICMP from anywhere", "direction": "INGRESS",
     "priority": 65534, "sourceRanges": ["0.0.0.0/0"], "allowed": [{"IPProtocol": "icmp"}]},
]
# The default (auto mode) network's subnet ranges, per region (GCE docs "Auto mode IPv4
# ranges", recalled); a region not listed gets one inside 10.128.0.0/9 of the fake's own.
AUTO_RANGES = {"us-central1": "10.128.0.0/20", "us-east1": "10.142.0.0/20", "us-east4": "10.150.0.0/20",
               "us-east5": "10.202.0.0/20", "us-south1": "10.206.0.0/20", "us-west1": "10.138.0.0/20",
               "us-west4": "10.182.0.0/20", "europe-west4": "10.164.0.0/20",
               "asia-southeast1": "10.148.0.0/20", "asia-northeast1": "10.146.0.0/20"}
CUSTOM_RANGE = "10.0.0.0/20"
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def networks(world: Any, project: str) -> dict[str, list[dict[str, Any]]]:
    """The project's networks -> their firewall rules (the default network's four first)."""
    added = {key.split("/", 1)[1]: rules for key, rules in world.networks.items()
             if key.split("/", 1)[0] == project}
    return {**added, DEFAULT: DEFAULT_RULES + added.get(DEFAULT, [])}


def subnet(world: Any, project: str, region: str, name: str) -> dict[str, Any] | None:
    """The subnetwork NAME of REGION (None: no such network, so no such subnet)."""
    if name not in networks(world, project):
        return None
    stored = world.subnets.get(f"{project}/{region}/{name}") or {}
    if name == DEFAULT:
        default_range = AUTO_RANGES.get(region) or f"10.{128 + sum(map(ord, region)) % 120}.0.0/20"
    else:
        default_range = (world.subnets.get(f"{project}/*/{name}") or {}).get("ipCidrRange") or CUSTOM_RANGE
    return {"ipCidrRange": stored.get("ipCidrRange") or default_range,
            "privateIpGoogleAccess": bool(stored.get("privateIpGoogleAccess"))}


def add_network(world: Any, body: dict[str, Any], project: str) -> dict[str, Any]:
    """Admin `network {project?, network, firewalls: [rule, ...], ipCidrRange?}`: a VPC with
    these rules (a network `default` gets them beside Google's four)."""
    network = str(body.get("network") or "")
    if not _NAME.fullmatch(network):
        raise ValueError("network takes {project?, network: NAME, firewalls: [rule, ...], ipCidrRange?}")
    rules = body.get("firewalls") or []
    if not isinstance(rules, list) or not all(isinstance(r, dict) and r.get("name") for r in rules):
        raise ValueError("firewalls: a list of rules, each with a name")
    owner = str(body.get("project") or project)
    world.networks[f"{owner}/{network}"] = rules
    if body.get("ipCidrRange"):
        ipaddress.ip_network(str(body["ipCidrRange"]))  # ValueError: 400
        world.subnets[f"{owner}/*/{network}"] = {"ipCidrRange": str(body["ipCidrRange"])}
    return {"networks": sorted(networks(world, owner))}


def set_private_google_access(world: Any, project: str, region: str, name: str, on: bool) -> None:
    world.subnets.setdefault(f"{project}/{region}/{name}", {})["privateIpGoogleAccess"] = bool(on)


def where(node: dict[str, Any]) -> tuple[str, str, str, str]:
    """(project, network, region, subnetwork) of a node, from its server-filled paths."""
    config = node.get("networkConfig") or {}
    net = str(config.get("network") or "").split("/")
    sub = str(config.get("subnetwork") or "").split("/")
    project = net[1] if len(net) > 1 else str(node.get("name", "")).split("/")[1]
    region = sub[3] if len(sub) > 5 else ""
    return project, net[-1] or DEFAULT, region, sub[-1] or DEFAULT


def _covers(ranges: list[str], source: str) -> bool:
    try:
        inner = ipaddress.ip_network(source)
        return any(inner.subnet_of(ipaddress.ip_network(r, strict=False))  # type: ignore[arg-type]
                   for r in ranges if ipaddress.ip_network(r, strict=False).version == inner.version)
    except ValueError:
        return False


def _tcp_ports(rule: dict[str, Any]) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for allowed in rule.get("allowed") or []:
        if str(allowed.get("IPProtocol")).lower() not in ("tcp", "all", "6"):
            continue
        for item in allowed.get("ports") or ["0-65535"]:
            low, _, high = str(item).partition("-")
            spans.append((int(low), int(high or low)))
    return spans


def admitted_tcp(rules: list[dict[str, Any]], *, target_tags: list[str], source_range: str,
                 source_tags: list[str]) -> list[tuple[int, int]]:
    """The TCP port spans RULES let in to a VM with TARGET_TAGS from a VM whose address is
    in SOURCE_RANGE and which carries SOURCE_TAGS: enabled INGRESS allow rules only (a
    rule with no source named admits any source, as gcloud's default 0.0.0.0/0)."""
    spans: list[tuple[int, int]] = []
    for rule in rules:
        if rule.get("disabled") or rule.get("direction", "INGRESS") != "INGRESS":
            continue
        targets = rule.get("targetTags") or []
        if targets and not set(targets) & set(target_tags):
            continue
        ranges, tags = rule.get("sourceRanges") or [], rule.get("sourceTags") or []
        if (ranges or tags) and not (_covers(ranges, source_range) or set(tags) & set(source_tags)):
            continue
        spans.extend(_tcp_ports(rule))
    return sorted(set(spans))


def reach(world: Any, node: dict[str, Any], peers: dict[str, list[str]]) -> dict[str, Any]:
    """What NODE's hosts may reach: {"external": bool, "google_apis": bool, "peers": [{
    "addresses": [...], "tcp": [[low, high], ...]}]}, PEERS being every live node's name
    -> its hosts' internal addresses (only those of NODE's network count)."""
    project, network, region, sub_name = where(node)
    sub = subnet(world, project, region, sub_name) or {"ipCidrRange": "0.0.0.0/32",
                                                       "privateIpGoogleAccess": False}
    external = bool((node.get("networkConfig") or {}).get("enableExternalIps"))
    rules = networks(world, project).get(network, [])
    out = []
    for name, addresses in peers.items():
        other = world.nodes.get(name)
        if other is None or where(other)[:2] != (project, network):
            continue  # another VPC: no route between them
        spans = admitted_tcp(rules, target_tags=list(other.get("tags") or []),
                             source_range=sub["ipCidrRange"], source_tags=list(node.get("tags") or []))
        out.append({"addresses": addresses, "tcp": [list(s) for s in spans]})
    return {"external": external, "google_apis": external or sub["privateIpGoogleAccess"], "peers": out}
