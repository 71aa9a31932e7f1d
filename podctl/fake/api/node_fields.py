"""The parts of a fake node's shape that Google's server decides: the fields it fills in
on create, FieldMask paths, and guest attributes (podctl/fake/README.md has the sources)."""

from __future__ import annotations

import re
from typing import Any

from podctl.fake.api import access
from podctl.fake.api.apierror import invalid

# Compute Engine's metadata limits (Metadata.items): a key matches [a-zA-Z0-9-_]+ and is
# under 128 bytes, a value at most 256 KiB, all keys and values together under 512 KB.
_METADATA_KEY = re.compile(r"^[a-zA-Z0-9_-]+$")
METADATA_KEY_BYTES = 128
METADATA_VALUE_BYTES = 262144
METADATA_TOTAL_BYTES = 512 * 1024

_SCOPES = [
    "https://www.googleapis.com/auth/devstorage.read_write",
    "https://www.googleapis.com/auth/logging.write",
    "https://www.googleapis.com/auth/service.management",
    "https://www.googleapis.com/auth/servicecontrol",
    "https://www.googleapis.com/auth/cloud-platform",
    "https://www.googleapis.com/auth/pubsub",
]


def server_filled(project: str, zone: str, node: dict[str, Any]) -> dict[str, Any]:
    """What Google fills in on create (recorded): network, subnetwork, service account,
    CIDR block, and empty scheduling and shielded-instance configs."""
    network = dict(node.get("networkConfig") or {})
    net = network.get("network") or "default"
    network["network"] = net if "/" in net else f"projects/{project}/global/networks/{net}"
    # without one named, the network's own subnet in the region (the fake names it after
    # the network: vpc.py), `default` in the default network as recorded
    sub = network.get("subnetwork") or net.rstrip("/").rsplit("/", 1)[-1]
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


def check_metadata(metadata: object) -> None:
    """A node's metadata map as a create or a patch sends it: 400 INVALID_ARGUMENT
    past Compute Engine's limits (docs/guides/fake.md: the same limits on the TPU API are assumed)."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise invalid("Invalid JSON payload received. 'metadata' must be a map of strings")
    total = 0
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise invalid(f"Invalid value at 'node.metadata[{key}]' (TYPE_STRING): {value!r}")
        size = len(key.encode())
        if not _METADATA_KEY.fullmatch(key) or size >= METADATA_KEY_BYTES:
            raise invalid(f"Invalid metadata key {key[:140]!r}: a key is 1 to "
                          f"{METADATA_KEY_BYTES - 1} bytes of letters, digits, '-' and '_'")
        if len(value.encode()) > METADATA_VALUE_BYTES:
            raise invalid(f"Metadata value of {key!r} is {len(value.encode())} bytes; "
                          f"at most {METADATA_VALUE_BYTES} are allowed")
        total += size + len(value.encode())
    if total >= METADATA_TOTAL_BYTES:
        raise invalid(f"Metadata of {total} bytes (keys and values together); it must be under "
                      f"{METADATA_TOTAL_BYTES}")


def host_metadata(node: dict[str, Any]) -> dict[str, Any]:
    """The node's metadata as its hosts see it now: a patched map reaches them
    `timings.metadata_propagation` after the patch is done (world._metadata_propagated)."""
    if "_host_metadata" in node:
        return node["_host_metadata"] or {}
    return node.get("metadata") or {}
