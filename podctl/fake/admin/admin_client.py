"""A small client for the fake cloud's admin API, for tests, benchmarks and the CLI."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from podctl.base.errors import FakeCloudError
from podctl.fake.admin import faults


def _json_call(method: str, base: str, path: str, body: dict[str, Any] | None, timeout: float,
               refused_by: str) -> dict[str, Any]:
    """METHOD BASE/PATH with BODY as JSON; its JSON answer (an object: every call of these APIs
    answers one), or FakeCloudError: the server's own message after REFUSED_BY, or that
    nothing answers at BASE."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{base}/{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
            return answer
    except urllib.error.HTTPError as e:
        message = json.loads(e.read() or b"{}").get("error", {}).get("message", str(e))
        raise FakeCloudError(f"{refused_by}: {message}") from e
    except OSError as e:
        raise FakeCloudError(f"the fake cloud at {base} does not answer ({e})") from e


class FakeAdmin:
    def __init__(self, admin_url: str, timeout: float = 30.0):
        self.admin_url = admin_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return _json_call(method, self.admin_url, path, body, self.timeout, f"fake cloud admin {path}")

    def status(self) -> dict[str, Any]:
        return self._call("GET", "status")

    def resources(self) -> dict[str, list[str]]:
        return self._call("GET", "resources")

    def is_empty(self) -> bool:
        return not any(self.resources().values())

    def stats(self) -> dict[str, Any]:
        return self._call("GET", "stats")

    def reset_stats(self) -> None:
        self._call("POST", "stats/reset", {})

    def set_quota(self, chips: int | None, project: str | None = None, zone: str | None = None) -> None:
        body: dict[str, Any] = {"chips": chips}
        body.update({k: v for k, v in (("project", project), ("zone", zone)) if v})
        self._call("POST", "quota", body)

    def set_project(self, project: str, *, exists: bool | None = None, api_enabled: bool | None = None,
                    denied: list[str] | None = None) -> dict[str, Any]:
        """PROJECT's switches: known or not, the Cloud TPU API enabled or not, and the
        permissions its caller lacks (each answered 403 as Google answers it)."""
        body: dict[str, Any] = {"project": project}
        body.update({k: v for k, v in (("exists", exists), ("api_enabled", api_enabled),
                                        ("denied", denied)) if v is not None})
        return self._call("POST", "project", body)

    def publish_guest_attribute(self, name: str, worker: int, namespace: str, key: str,
                                value: str) -> None:
        """Host WORKER of node NAME publishes NAMESPACE/KEY = VALUE (nodes.getGuestAttributes)."""
        self._call("POST", "guest_attributes", {"name": name, "worker": worker,
                                                "namespace": namespace, "key": key, "value": value})

    def add_network(self, network: str, firewalls: list[dict[str, Any]], project: str | None = None,
                    ip_range: str | None = None) -> dict[str, Any]:
        """A VPC network with these firewall rules (Compute Engine's JSON shape) and its
        subnets' IP_RANGE (default 10.0.0.0/20; fake/api/vpc.py)."""
        return self._call("POST", "network", {"network": network, "firewalls": firewalls,
                                              **({"project": project} if project else {}),
                                              **({"ipCidrRange": ip_range} if ip_range else {})})

    def set_timings(self, **timings: float) -> dict[str, Any]:
        return self._call("POST", "timings", timings)

    def advance(self, seconds: float) -> None:
        self._call("POST", "advance", {"seconds": seconds})

    def hosts(self) -> dict[str, Any]:
        """{"nodes": {node name: {ports, alive, connections, sessions, no_ssh, workers: [per
        host: worker, alive, boots, ssh_total, sessions_total]}}, "host_latency": s,
        "in_grace": [preempted nodes whose processes are not yet SIGKILLed]}."""
        return self._call("GET", "hosts")

    def host_stats(self, name: str) -> list[dict[str, Any]]:
        """Per host of live node NAME (full name or id), in worker order: {"worker",
        "alive", "boots" (startup-scripts run), "ssh_total" (SSH connections accepted),
        "sessions_total" (commands run)}; [] while the node has no live hosts."""
        for full, node in self.hosts()["nodes"].items():
            if name in (full, full.rsplit("/", 1)[-1]):
                workers: list[dict[str, Any]] = node["workers"]
                return workers
        return []

    def reset(self) -> None:
        self._call("POST", "reset", {})

    def set_iam(self, **change: Any) -> dict[str, Any]:
        """The project's IAM on buckets: secure=True|False, or bucket/member/role (remove=True)."""
        return self._call("POST", "iam", change)

    def faults(self) -> list[dict[str, Any]]:
        """The fake's fault table (name, summary, arguments), as the daemon serves it."""
        table: list[dict[str, Any]] = self._call("GET", "faults")["faults"]
        return table

    def inject(self, fault_name: str, /, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Fault NAME (faults.FAULTS: "kill-host" or "kill_host") with its arguments, positional
        in the table's order or by keyword; the daemon checks them. Returns its answer."""
        try:
            fault = faults.fault(fault_name)
        except KeyError:
            raise FakeCloudError(f"the fake cloud has no fault {fault_name!r}; its faults: "
                                 f"{', '.join(faults.BY_NAME)}") from None
        if len(args) > len(fault.args):
            raise TypeError(f"{fault.method}() takes {len(fault.args)} arguments")
        body = {arg.name: value for arg, value in zip(fault.args, args)}
        for key, value in kwargs.items():
            if key in body:
                raise TypeError(f"{fault.method}() got {key!r} twice")
            body[key] = value
        return self._call("POST", fault.name, body)


def _named(fault: faults.Fault) -> Any:
    def method(self: FakeAdmin, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.inject(fault.name, *args, **kwargs)

    method.__name__ = method.__qualname__ = fault.method
    args = ", ".join(a.name if a.positional else f"{a.name}={a.default!r}" for a in fault.args)
    method.__doc__ = f"{fault.method}({args}): {fault.summary}."
    return method


# FakeAdmin.preempt(name, after=..., grace=...), .kill_host(name, worker, signal=...), ...:
# one method per fault of the table, so that a new fault needs no line here.
for _fault in faults.FAULTS:
    setattr(FakeAdmin, _fault.method, _named(_fault))


class FakeCompute:
    """What `podctl fake firewall-rules create` and `subnets update` send the fake's Compute
    Engine API at API_URL (its TPU API's server), as gcloud sends Google's."""

    def __init__(self, api_url: str, timeout: float = 30.0):
        self.base = api_url.rstrip("/") + "/compute/v1"
        self.timeout = timeout

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return _json_call("POST", self.base, path, body, self.timeout, "Compute Engine")

    def create_firewall(self, project: str, rule: dict[str, Any]) -> dict[str, Any]:
        """firewalls.insert: RULE in Compute Engine's JSON (name, network, allowed, ...)."""
        return self._post(f"projects/{project}/global/firewalls", rule)

    def set_private_google_access(self, project: str, region: str, subnet: str, on: bool) -> dict[str, Any]:
        return self._post(f"projects/{project}/regions/{region}/subnetworks/{subnet}/setPrivateIpGoogleAccess",
                          {"privateIpGoogleAccess": on})
