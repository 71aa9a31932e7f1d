"""Before `up` and `run`: does the slice's VPC let through what a run needs?

A run needs SSH from the client to every host (tcp:22; over SSH only), TCP between the
slice's hosts on JAX's coordinator port (several hosts) and on megascale's (several
slices), and, on hosts without external IPs, Private Google Access on their subnet to
reach GCS. Google's network `default` has `default-allow-internal` and
`default-allow-ssh`; a network a user made has no rule unless they added one, and then a
run hangs in `jax.distributed.initialize` on billed chips. So podctl reads the network's
subnet and firewall rules (Compute Engine API: `subnetworks.get`, `firewalls.list`) and
says what is missing in one line with the gcloud command that adds it. Where the rules
cannot be read (no permission, the API off), `up` says so and goes on, `run` goes on:
the check is a courtesy.

Judged as Google does for INGRESS allow rules: the rule's network, `disabled`, target
tags against the node's tags, TCP ports; for traffic between hosts also the source (a
source range holding the whole subnet's range, or source tags the node carries). Not
judged: deny rules and priorities, target service accounts (counted as matching), the
SSH rule's source ranges (IAP's 35.235.240.0/20 counts too), Cloud NAT (an
internal-IP slice on a subnet without Private Google Access is refused even where NAT
would carry its GCS traffic).
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from podctl.base.errors import InvalidValueError

SSH_PORT = 22
# JAX's coordinator: the port Google's TPU firewall opens. jax-ml/jax issue 35905: the rule
# GCP creates with a TPU slice admits tcp 8470, 8471, 8474, 8476 and 11211 between its VMs;
# JAX used 8476 until 0.8.1 and 8482 since, which that rule does not admit. podctl names the
# port in JAX_COORDINATOR_ADDRESS, so every JAX version uses 8476.
COORDINATOR_PORT = 8476
MEGASCALE_PORT = 8080  # libtpu's megascale (multislice), MEGASCALE_PORT
_TIMEOUT = 30.0


@dataclass(frozen=True)
class Network:
    project: str
    name: str

    @property
    def path(self) -> str:
        return f"projects/{self.project}/global/networks/{self.name}"


@dataclass(frozen=True)
class Vpc:
    """One network as read: its subnet in the slice's region (None: not read) and rules."""

    network: Network
    region: str
    subnet: str
    subnet_range: str | None = None
    private_google_access: bool | None = None
    rules: list[dict[str, Any]] = field(default_factory=list)


def _covers(ports: list[str] | None, port: int) -> bool:
    if not ports:
        return True  # no ports: every port of the protocol
    for item in ports:
        low, _, high = str(item).partition("-")
        try:
            if int(low) <= port <= int(high or low):
                return True
        except ValueError:
            continue
    return False


def _from_inside(rule: dict[str, Any], subnet_range: str | None, tags: tuple[str, ...]) -> bool:
    """The rule's sources hold every address of the subnet, or a tag the node carries."""
    ranges, sources = rule.get("sourceRanges") or [], rule.get("sourceTags") or []
    if not ranges and not sources:
        return True
    if set(sources) & set(tags) or subnet_range is None:
        return True  # (no subnet read: its range is not judged)
    try:
        inner = ipaddress.ip_network(subnet_range or "")
        return any(inner.subnet_of(outer)  # type: ignore[arg-type]
                   for outer in map(lambda r: ipaddress.ip_network(r, strict=False), ranges)
                   if outer.version == inner.version)
    except ValueError:
        return False


def admits(rule: dict[str, Any], network: Network, tags: tuple[str, ...], port: int, *,
           internal_from: str | None = None) -> bool:
    """An enabled INGRESS allow rule of NETWORK that lets tcp:PORT reach a VM with TAGS
    (from the subnet INTERNAL_FROM, with the same TAGS, when given)."""
    if rule.get("disabled") or rule.get("direction", "INGRESS") != "INGRESS":
        return False
    if not str(rule.get("network", "")).endswith(network.path):
        return False
    targets = rule.get("targetTags") or []
    if targets and not set(targets) & set(tags):
        return False
    if internal_from is not None and not _from_inside(rule, internal_from, tags):
        return False
    return any(a.get("IPProtocol") in ("tcp", "all") and _covers(a.get("ports"), port)
               for a in rule.get("allowed") or [])


def admits_ssh(rule: dict[str, Any], network: Network, tags: tuple[str, ...]) -> bool:
    return admits(rule, network, tags, SSH_PORT)


def fix_command(network: Network, tags: tuple[str, ...]) -> str:
    target = f" --target-tags {','.join(tags)}" if tags else ""
    return (f"gcloud compute firewall-rules create {network.name}-allow-ssh --project {network.project} "
            f"--network {network.name} --allow tcp:22 --source-ranges 0.0.0.0/0{target}")


def internal_fix(vpc: Vpc, ports: list[int], tags: tuple[str, ...]) -> str:
    target = f" --target-tags {','.join(tags)}" if tags else ""
    return (f"gcloud compute firewall-rules create {vpc.network.name}-allow-tpu-internal "
            f"--project {vpc.network.project} --network {vpc.network.name} --direction INGRESS "
            f"--allow {','.join(f'tcp:{p}' for p in ports)} --source-ranges {vpc.subnet_range or 'SUBNET_RANGE'}"
            f"{target}")


def access_fix(vpc: Vpc) -> str:
    return (f"gcloud compute networks subnets update {vpc.subnet} --project {vpc.network.project} "
            f"--region {vpc.region} --enable-private-ip-google-access")


class ComputeReader:
    """GETs against the Compute Engine API at BASE (https://compute.googleapis.com, or
    the fake's server) with CREDENTIALS (None: anonymous, the fake's)."""

    def __init__(self, base: str, credentials: Any = None):
        import requests
        from google.auth.transport.requests import AuthorizedSession

        self.base = base.rstrip("/") + "/compute/v1"
        self.session = AuthorizedSession(credentials) if credentials is not None else requests.Session()

    def get(self, path: str, **params: str) -> tuple[int, dict[str, Any]]:
        response = self.session.get(f"{self.base}/{path}", params=params or None, timeout=_TIMEOUT)
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def close(self) -> None:
        self.session.close()


def _message(body: dict[str, Any]) -> str:
    return str((body.get("error") or {}).get("message") or "no answer")


def _read(reader: ComputeReader, project: str, region: str, network: str | None,
          subnetwork: str | None) -> Vpc | str:
    """The network (from --network, else the subnetwork's, else `default`), its subnet in
    REGION and its rules; a note (str) saying why it could not be read; InvalidValueError
    for one that does not exist."""
    sub_name = (subnetwork or "").rstrip("/").rsplit("/", 1)[-1] or None
    sub_path = subnetwork if subnetwork and "/" in subnetwork else None
    if sub_path is None:
        # Google names a network's subnet in a region after it (auto mode, and the fake)
        sub_name = sub_name or (network or "default").rstrip("/").rsplit("/", 1)[-1]
        sub_path = f"projects/{project}/regions/{region}/subnetworks/{sub_name}"
    status, sub = reader.get(sub_path)
    if status == 404 and subnetwork:
        raise InvalidValueError(f"--subnetwork {subnetwork!r}: no such subnetwork in {region} of "
                                f"project {project}.")
    if status not in (200, 404):
        return f"could not read subnetwork {sub_name!r} ({status}: {_message(sub)})"
    if status == 404:
        sub = {}
    if not network:
        network = str(sub.get("network") or "default")
    name = str(network).rstrip("/").rsplit("/", 1)[-1]
    owner = str(network).split("projects/", 1)[1].split("/", 1)[0] if "projects/" in str(network) else project
    net = Network(owner, name)
    status, body = reader.get(net.path)
    if status == 404:
        raise InvalidValueError(f"--network {name!r}: no such network in project {owner}.")
    if status != 200:
        return f"could not read network {name!r} ({status}: {_message(body)})"
    rules: list[dict[str, Any]] = []
    token = ""
    while True:
        status, body = reader.get(f"projects/{owner}/global/firewalls", **({"pageToken": token} if token else {}))
        if status != 200:
            return f"could not read the firewall rules of network {name!r} ({status}: {_message(body)})"
        rules += [r for r in body.get("items") or [] if str(r.get("network", "")).endswith(net.path)]
        token = str(body.get("nextPageToken") or "")
        if not token:
            break
    return Vpc(net, region, str(sub.get("name") or sub_name), sub.get("ipCidrRange"),
               sub.get("privateIpGoogleAccess") if sub else None, rules)


@dataclass(frozen=True)
class Needs:
    """What a run on the slice needs of its VPC."""

    ssh: bool = True  # the client reaches every host by SSH
    hosts: int = 1  # > 1: TCP between them on the coordinator's port
    slices: int = 1  # > 1: and on megascale's
    internal_ips: bool = False  # no external IPs: GCS through Private Google Access
    tags: tuple[str, ...] = ()

    @property
    def internal_ports(self) -> list[int]:
        return ([COORDINATOR_PORT] if self.hosts > 1 or self.slices > 1 else []) + \
            ([MEGASCALE_PORT] if self.slices > 1 else [])


def _missing_ssh(vpc: Vpc, needs: Needs) -> str | None:
    if not needs.ssh or any(admits_ssh(rule, vpc.network, needs.tags) for rule in vpc.rules):
        return None
    return (f"network {vpc.network.name!r} has no firewall rule admitting SSH (tcp:22), and podctl "
            f"reaches the hosts by SSH; add one: {fix_command(vpc.network, needs.tags)}")


def _missing_access(vpc: Vpc, needs: Needs) -> str | None:
    if not needs.internal_ips or vpc.private_google_access is not False:
        return None
    return (f"subnetwork {vpc.subnet!r} ({vpc.region}) has no Private Google Access, and hosts "
            f"without external IPs reach GCS only through it; turn it on: {access_fix(vpc)}")


def _missing_internal(vpc: Vpc, needs: Needs) -> str | None:
    blocked = [port for port in needs.internal_ports
               if not any(admits(rule, vpc.network, needs.tags, port, internal_from=vpc.subnet_range)
                          for rule in vpc.rules)]
    if not blocked:
        return None
    what = " and ".join(f"{p} ({'JAX coordinator' if p == COORDINATOR_PORT else 'megascale'})" for p in blocked)
    return (f"network {vpc.network.name!r} admits no TCP between the slice's hosts on {what}, so "
            f"jax.distributed.initialize would wait until its timeout; add the rule: "
            f"{internal_fix(vpc, blocked, needs.tags)}")


def _check_up(reader: ComputeReader, project: str, region: str, network: str | None,
              subnetwork: str | None, needs: Needs) -> str | None:
    vpc = _read(reader, project, region, network, subnetwork)
    if isinstance(vpc, str):
        return vpc
    for refusal in (_missing_ssh(vpc, needs), _missing_access(vpc, needs)):
        if refusal:
            raise InvalidValueError(refusal)
    internal = _missing_internal(vpc, needs)
    return internal.replace(", so jax", "; runs will be refused until then, as jax") if internal else None


async def check_up(reader: ComputeReader, *, project: str, region: str, network: str | None,
                   subnetwork: str | None, needs: Needs) -> str | None:
    """Before `up`: InvalidValueError when the network admits no SSH, or the hosts would
    have no external IP and their subnet no Private Google Access; a note (str) when the
    hosts could not reach each other for a run, or the network could not be read; None
    when all is there."""
    try:
        return await asyncio.to_thread(_check_up, reader, project, region, network, subnetwork, needs)
    except OSError as e:  # requests' ConnectionError and friends
        return f"could not read the network's firewall rules ({e.__class__.__name__})"


async def check_ssh(reader: ComputeReader, *, project: str, region: str, network: str | None,
                    subnetwork: str | None, tags: tuple[str, ...]) -> str | None:
    """`check_up` for SSH alone."""
    return await check_up(reader, project=project, region=region, network=network,
                          subnetwork=subnetwork, needs=Needs(tags=tags))


def _check_run(reader: ComputeReader, project: str, region: str, network: str | None,
               subnetwork: str | None, needs: Needs) -> None:
    vpc = _read(reader, project, region, network, subnetwork)
    if isinstance(vpc, str):
        return
    for refusal in (_missing_ssh(vpc, needs), _missing_internal(vpc, needs), _missing_access(vpc, needs)):
        if refusal:
            raise InvalidValueError(refusal)


async def check_run(reader: ComputeReader, *, project: str, region: str, network: str | None,
                    subnetwork: str | None, needs: Needs) -> None:
    """Before a run: InvalidValueError naming the first rule (or switch) it lacks; a network
    that cannot be read is not judged."""
    try:
        await asyncio.to_thread(_check_run, reader, project, region, network, subnetwork, needs)
    except OSError:
        return
