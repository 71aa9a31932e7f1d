"""Before `up` on a network of the user's (--network/--subnetwork): does it admit SSH?

podctl reaches every host by SSH (tcp:22). Google's default network has
`default-allow-ssh`; a network a user made has no rule unless they added one, and then
`up` succeeds while no run can ever start. So, before anything is created, podctl reads
the network's firewall rules (Compute Engine API, `compute.firewalls.list`) and, when
no enabled INGRESS allow rule for the node's tags admits tcp:22, refuses in one line
with the `gcloud compute firewall-rules create` that fixes it. Where the rules cannot be
read (no permission, the API off), it says so and goes on: the check is a courtesy.

Not judged: deny rules and priorities, source ranges (a rule from 35.235.240.0/20
only, IAP's, counts too), target service accounts (counted as matching).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from podctl.errors import InvalidValueError

SSH_PORT = 22
_TIMEOUT = 30.0


@dataclass(frozen=True)
class Network:
    project: str
    name: str

    @property
    def path(self) -> str:
        return f"projects/{self.project}/global/networks/{self.name}"


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


def admits_ssh(rule: dict, network: Network, tags: tuple[str, ...]) -> bool:
    """An enabled INGRESS allow rule of NETWORK that lets tcp:22 reach a VM with TAGS."""
    if rule.get("disabled") or rule.get("direction", "INGRESS") != "INGRESS":
        return False
    if not str(rule.get("network", "")).endswith(network.path):
        return False
    targets = rule.get("targetTags") or []
    if targets and not set(targets) & set(tags):
        return False
    return any(a.get("IPProtocol") in ("tcp", "all") and _covers(a.get("ports"), SSH_PORT)
               for a in rule.get("allowed") or [])


def fix_command(network: Network, tags: tuple[str, ...]) -> str:
    target = f" --target-tags {','.join(tags)}" if tags else ""
    return (f"gcloud compute firewall-rules create {network.name}-allow-ssh --project {network.project} "
            f"--network {network.name} --allow tcp:22 --source-ranges 0.0.0.0/0{target}")


class ComputeReader:
    """GETs against the Compute Engine API at BASE (https://compute.googleapis.com, or
    the fake's server) with CREDENTIALS (None: anonymous, the fake's)."""

    def __init__(self, base: str, credentials: Any = None):
        import requests
        from google.auth.transport.requests import AuthorizedSession

        self.base = base.rstrip("/") + "/compute/v1"
        self.session = AuthorizedSession(credentials) if credentials is not None else requests.Session()

    def get(self, path: str, **params: str) -> tuple[int, dict]:
        response = self.session.get(f"{self.base}/{path}", params=params or None, timeout=_TIMEOUT)
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body if isinstance(body, dict) else {}

    def close(self) -> None:
        self.session.close()


def _message(body: dict) -> str:
    return str((body.get("error") or {}).get("message") or "no answer")


def _check(reader: ComputeReader, project: str, region: str, network: str | None,
           subnetwork: str | None, tags: tuple[str, ...]) -> str | None:
    if not network and subnetwork:
        path = subnetwork if "/" in subnetwork else f"projects/{project}/regions/{region}/subnetworks/{subnetwork}"
        status, body = reader.get(path)
        if status == 404:
            raise InvalidValueError(f"--subnetwork {subnetwork!r}: no such subnetwork in {region} of "
                                    f"project {project}.")
        if status != 200:
            return f"could not read subnetwork {subnetwork!r} ({status}: {_message(body)})"
        network = str(body.get("network", ""))
    name = str(network).rstrip("/").rsplit("/", 1)[-1]
    owner = str(network).split("projects/", 1)[1].split("/", 1)[0] if "projects/" in str(network) else project
    net = Network(owner, name)
    status, body = reader.get(net.path)
    if status == 404:
        raise InvalidValueError(f"--network {name!r}: no such network in project {owner}.")
    if status != 200:
        return f"could not read network {name!r} ({status}: {_message(body)})"
    token = ""
    while True:
        status, body = reader.get(f"projects/{owner}/global/firewalls", **({"pageToken": token} if token else {}))
        if status != 200:
            return f"could not read the firewall rules of network {name!r} ({status}: {_message(body)})"
        if any(admits_ssh(rule, net, tags) for rule in body.get("items") or []):
            return None
        token = str(body.get("nextPageToken") or "")
        if not token:
            break
    raise InvalidValueError(f"network {name!r} has no firewall rule admitting SSH (tcp:22), and podctl "
                            f"reaches the hosts by SSH; add one: {fix_command(net, tags)}")


async def check_ssh(reader: ComputeReader, *, project: str, region: str, network: str | None,
                    subnetwork: str | None, tags: tuple[str, ...]) -> str | None:
    """InvalidValueError when the network admits no SSH; a note (str) when the rules could
    not be read; None when a rule admits it."""
    try:
        return await asyncio.to_thread(_check, reader, project, region, network, subnetwork, tags)
    except OSError as e:  # requests' ConnectionError and friends
        return f"could not read the network's firewall rules ({e.__class__.__name__})"
