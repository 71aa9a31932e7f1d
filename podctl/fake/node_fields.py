"""The parts of a fake node's shape that Google's server decides: the fields it fills in
on create, FieldMask paths, and guest attributes (podctl/fake/README.md has the sources)."""

from __future__ import annotations

import re

from podctl.fake import access

_SCOPES = [
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/service.management",
    "https://www.googleapis.com/auth/servicecontrol",
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/pubsub",
]


def server_filled(project: str, zone: str, node: dict) -> dict:
    """What Google fills in on create (recorded): network, subnetwork, service account,
    CIDR block, and empty scheduling and shielded-instance configs."""
    network = dict(node.get("networkConfig") or {})
    net = network.get("network") or "default"
    network["network"] = net if "/" in net else f"projects/{project}/global/networks/{net}"
    sub = network.get("subnetwork") or "default"
    region = zone.rsplit("-", 1)[0]
    network["subnetwork"] = sub if "/" in sub else f"projects/{project}/regions/{region}/subnetworks/{sub}"
    account = dict(node.get("serviceAccount") or {})
    account.setdefault("email", f"{access.project_number(project)}-compute@developer.gserviceaccount.com")
    account.setdefault("scope", list(_SCOPES))
    scheduling = {k: v for k, v in (node.get("schedulingConfig") or {}).items() if v}
    shielded = {k: v for k, v in (node.get("shieldedInstanceConfig") or {}).items() if v}
    return {"networkConfig": network, "serviceAccount": account,
            "cidrBlock": node.get("cidrBlock") or "10.20.30.0/24",
            "schedulingConfig": scheduling, "shieldedInstanceConfig": shielded}


def camel(path: str) -> str:
    """A FieldMask path as JSON or proto names it -> lowerCamelCase (network_config.x -> networkConfig.x)."""
    return ".".join(re.sub(r"_([a-z])", lambda m: m.group(1).upper(), part) for part in path.split("."))
