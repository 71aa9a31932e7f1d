"""Where a slice is made and what it may reach: the options real v5p capacity needs.

    --reservation NAME   a queued resource's `reservationName`
                         (projects/P/locations/ZONE/reservations/NAME; most v5p is reserved)
    --reserved           a node's `schedulingConfig.reserved`: any matching reservation
    --network, --subnetwork               `networkConfig.network` / `.subnetwork`
    --internal-ips       `networkConfig.enableExternalIps: false` (podctl then connects to
                         the hosts' internal addresses: run it inside the VPC)
    --service-account, --scopes           `serviceAccount {email, scope[]}`
    --tags               `tags[]`: network tags for firewall rules (RFC 1035 names)

Field names from google/cloud/tpu/v2/cloud_tpu.proto (Node, NetworkConfig,
ServiceAccount, SchedulingConfig, QueuedResource.reservation_name); gcloud creates
TPU VMs with external IPs unless --internal-ips, and so does podctl.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from podctl.base.errors import InvalidValueError
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import SliceInfo

if TYPE_CHECKING:
    from google.cloud import tpu_v2
else:  # imported at first use: lazy_tpu.py says why
    from podctl.cloud.lazy_tpu import tpu_v2

SCOPE_PREFIX = "https://www.googleapis.com/auth/"
_TAG = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1035, as GCE network tags
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_RESOURCE_ID = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_RESERVATION = re.compile(r"^projects/([^/]+)/locations/([^/]+)/reservations/([^/]+)$")
MAX_TAGS = 64  # GCE's limit on network tags per instance


@dataclass(frozen=True)
class Placement:
    reservation: str | None = None
    reserved: bool = False
    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    scopes: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    internal_ips: bool = False

    def checked(self, *, project: str, zone: str, queued: bool, spot: bool) -> Placement:
        """Refuse what Cloud TPU would refuse (or podctl cannot ask for), in one line
        each; expand short names (a reservation in this project, scope aliases)."""
        if self.reservation is not None and self.reserved:
            raise InvalidValueError("--reservation NAME and --reserved: choose one (--reserved "
                                    "takes any matching reservation).")
        if (self.reservation is not None or self.reserved) and spot:
            raise InvalidValueError("a reservation is capacity of its own: drop --spot.")
        if self.reserved and queued:
            raise InvalidValueError("--reserved is for a node; a queued resource names its "
                                    "reservation: --reservation NAME.")
        reservation = self.reservation
        if reservation is not None:
            reservation = _reservation_path(reservation, project, zone)
        for tag in self.tags:
            if not _TAG.match(tag):
                raise InvalidValueError(f"--tags {tag!r}: a network tag is 1-63 lowercase letters, "
                                        "digits and hyphens, starting with a letter.")
        if len(self.tags) > MAX_TAGS:
            raise InvalidValueError(f"--tags: at most {MAX_TAGS} network tags.")
        if self.service_account is not None and not _EMAIL.match(self.service_account):
            raise InvalidValueError(f"--service-account {self.service_account!r} is not a service "
                                    "account's email (NAME@PROJECT.iam.gserviceaccount.com).")
        scopes = tuple(s if s.startswith("https://") else SCOPE_PREFIX + s for s in self.scopes)
        for scope in scopes:
            if not re.match(r"^https://www\.googleapis\.com/auth/[a-z0-9._-]+$", scope):
                raise InvalidValueError(f"--scopes {scope!r}: give an OAuth scope (cloud-platform, or "
                                        f"{SCOPE_PREFIX}...).")
        for option, value in (("--network", self.network), ("--subnetwork", self.subnetwork)):
            if value is not None and not (_RESOURCE_ID.match(value) or value.startswith("projects/")):
                raise InvalidValueError(f"{option} {value!r}: give a name (e.g. default) or a "
                                        "resource path (projects/P/...).")
        return replace(self, reservation=reservation, scopes=scopes)

    def apply_to_node(self, node: tpu_v2.Node) -> None:
        """Set the node's fields. External IPs unless --internal-ips, as gcloud does (the
        API's own default is none, which a laptop outside the VPC cannot reach)."""
        node.network_config = tpu_v2.NetworkConfig(
            network=self.network or "", subnetwork=self.subnetwork or "",
            enable_external_ips=not self.internal_ips)
        if self.service_account is not None or self.scopes:
            node.service_account = tpu_v2.ServiceAccount(email=self.service_account or "",
                                                         scope=list(self.scopes))
        if self.tags:
            node.tags = list(self.tags)
        if self.reserved:
            node.scheduling_config = tpu_v2.SchedulingConfig(reserved=True)

    def apply_to_queued(self, qr: tpu_v2.QueuedResource) -> None:
        if self.reservation:
            qr.reservation_name = self.reservation


def _reservation_path(text: str, project: str, zone: str) -> str:
    match = _RESERVATION.match(text)
    if match:
        if match.group(2) != zone:
            raise InvalidValueError(f"--reservation {text!r} is in {match.group(2)}; the slice is "
                                    f"asked for in {zone}: pass --zone {match.group(2)}.")
        return text
    if not _RESOURCE_ID.match(text):
        raise InvalidValueError(f"--reservation {text!r}: give a reservation's name, or "
                                "projects/P/locations/ZONE/reservations/NAME.")
    return f"projects/{project}/locations/{zone}/reservations/{text}"


def from_node(node: Any, reservation: str | None = None) -> Placement:
    """The placement a node (and its queued resource's RESERVATION) was made with, so that
    a slice made again (recovery) lands where the first one did."""
    net = node.network_config
    account = node.service_account
    return Placement(
        reservation=reservation or None, reserved=bool(node.scheduling_config.reserved),
        network=net.network or None, subnetwork=net.subnetwork or None,
        service_account=account.email or None, scopes=tuple(account.scope),
        tags=tuple(node.tags), internal_ips=not net.enable_external_ips)


async def read(api: TpuApi, parent: str, info: SliceInfo) -> Placement:
    """What INFO's slice was made with (a node, or a queued resource's first node)."""
    if info.kind == "queued-resource":  # an elastic slice's: its first queued resource's
        name = info.members[0].name if info.members else info.name
        qr = await api.get_queued_resource(f"{parent}/queuedResources/{name}")
        specs = qr.tpu.node_spec
        node = specs[0].node if specs else tpu_v2.Node()
        return from_node(node, qr.reservation_name)
    return from_node(await api.get_node(f"{parent}/nodes/{info.name}"))
