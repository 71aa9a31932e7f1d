"""The fake's checks of where a node is made: networkConfig, serviceAccount, tags,
schedulingConfig, and a queued resource's reservationName. Shapes from
google/cloud/tpu/v2/cloud_tpu.proto (NetworkConfig, ServiceAccount, SchedulingConfig,
QueuedResource.reservation_name, documented as
projects/{project}/locations/{zone}/reservations/{reservation}); network tags follow
RFC 1035 as Compute Engine's do. Refused as the real API refuses a bad request: 400
INVALID_ARGUMENT. The fake has no inventory of VPCs or reservations, so a well-formed
name it cannot check is accepted (noted in docs/guides/fake.md)."""

from __future__ import annotations

import re
from typing import Any

from podctl.fake.api.apierror import invalid

_NETWORK_FIELDS = {"network", "subnetwork", "enableExternalIps", "canIpForward", "queueCount"}
_ACCOUNT_FIELDS = {"email", "scope"}
_SCHEDULING_FIELDS = {"preemptible", "reserved", "spot"}
_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_TAG = re.compile(rf"^{_NAME}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _fields(value: Any, allowed: set[str], what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"Invalid value at '{what}': expected an object")
    unknown = set(value) - allowed
    if unknown:
        raise invalid(f"Invalid JSON payload received. Unknown name {sorted(unknown)[0]!r} at '{what}'")
    return value


def _bool(value: Any, what: str) -> None:
    if not isinstance(value, bool):
        raise invalid(f"Invalid value at '{what}' (TYPE_BOOL), {value!r}")


def check_node(body: dict[str, Any], project: str, zone: str) -> None:
    region = zone.rsplit("-", 1)[0]
    if "networkConfig" in body:
        net = _fields(body["networkConfig"], _NETWORK_FIELDS, "node.network_config")
        for key in ("enableExternalIps", "canIpForward"):
            if key in net:
                _bool(net[key], f"node.network_config.{key}")
        network = net.get("network", "")
        if network and not (re.fullmatch(_NAME, network) or re.fullmatch(
                rf"projects/[^/]+/global/networks/{_NAME}", network)):
            raise invalid(f"Invalid network {network!r}: a name or projects/P/global/networks/NAME")
        subnetwork = net.get("subnetwork", "")
        match = re.fullmatch(rf"projects/[^/]+/regions/([^/]+)/subnetworks/{_NAME}", subnetwork)
        if subnetwork and not (re.fullmatch(_NAME, subnetwork) or match):
            raise invalid(f"Invalid subnetwork {subnetwork!r}: a name or "
                          "projects/P/regions/REGION/subnetworks/NAME")
        if match and match.group(1) != region:
            raise invalid(f"Subnetwork {subnetwork!r} is not in region {region} of zone {zone}")
    if "serviceAccount" in body:
        account = _fields(body["serviceAccount"], _ACCOUNT_FIELDS, "node.service_account")
        email = account.get("email", "")
        if email and not _EMAIL.match(str(email)):
            raise invalid(f"Invalid service account email {email!r}")
        scopes = account.get("scope", [])
        if not isinstance(scopes, list) or not all(isinstance(s, str) and s.startswith("https://")
                                                   for s in scopes):
            raise invalid("Invalid value at 'node.service_account.scope': a list of OAuth scope URLs")
    if "tags" in body:
        tags = body["tags"]
        if not isinstance(tags, list) or not all(isinstance(t, str) and _TAG.match(t) for t in tags):
            raise invalid(f"Invalid tags {tags!r}: each must match RFC 1035 (lowercase letters, digits, "
                          "hyphens; 1-63 characters, starting with a letter)")
    if "schedulingConfig" in body:
        config = _fields(body["schedulingConfig"], _SCHEDULING_FIELDS, "node.scheduling_config")
        for key, value in config.items():
            _bool(value, f"node.scheduling_config.{key}")
        if config.get("spot") and config.get("reserved"):
            raise invalid("A node cannot be both spot and reserved: set one of "
                          "scheduling_config.spot and scheduling_config.reserved")


def check_reservation(name: Any, zone: str) -> None:
    match = re.fullmatch(r"projects/([^/]+)/locations/([^/]+)/reservations/([^/]+)", str(name))
    if not match:
        raise invalid(f"Invalid reservation_name {name!r}: expected "
                      "projects/{project}/locations/{zone}/reservations/{reservation}")
    if match.group(2) != zone:
        raise invalid(f"Reservation {name!r} is not in zone {zone}")
