"""A small client for the fake cloud's admin API, for tests, benchmarks and the CLI."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from podctl.errors import FakeCloudError


class FakeAdmin:
    def __init__(self, admin_url: str, timeout: float = 30.0):
        self.admin_url = admin_url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.admin_url}/{path}", data=data, method=method,
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            message = json.loads(e.read() or b"{}").get("error", {}).get("message", str(e))
            raise FakeCloudError(f"fake cloud admin {path}: {message}") from e
        except OSError as e:
            raise FakeCloudError(f"the fake cloud at {self.admin_url} does not answer ({e})") from e

    def status(self) -> dict:
        return self._call("GET", "status")

    def resources(self) -> dict[str, list[str]]:
        return self._call("GET", "resources")

    def is_empty(self) -> bool:
        return not any(self.resources().values())

    def stats(self) -> dict:
        return self._call("GET", "stats")

    def reset_stats(self) -> None:
        self._call("POST", "stats/reset", {})

    def fail_next(self, count: int, code: int | str = 503, call: str | None = None) -> None:
        """The next COUNT Cloud TPU calls (only those named CALL, if given) fail with CODE."""
        self._call("POST", "fail", {"count": count, "code": str(code), "call": call})

    def set_latency(self, seconds: float) -> None:
        self._call("POST", "latency", {"seconds": seconds})

    def preempt(self, name: str, after: float = 0.0, grace: float | None = None) -> None:
        """Preempt NAME now or AFTER simulated seconds. Its hosts stop taking SSH and their
        processes get SIGTERM, then SIGKILL after GRACE wall-clock seconds (default:
        timings.preempt_grace, 10 s); GCS stays reachable meanwhile."""
        body: dict[str, Any] = {"name": name, "after": after}
        if grace is not None:
            body["grace"] = grace
        self._call("POST", "preempt", body)

    def set_capacity(self, chips: int | None, zone: str | None = None) -> dict:
        return self._call("POST", "capacity", {"chips": chips, **({"zone": zone} if zone else {})})

    def set_quota(self, chips: int | None, project: str | None = None, zone: str | None = None) -> None:
        body: dict[str, Any] = {"chips": chips}
        body.update({k: v for k, v in (("project", project), ("zone", zone)) if v})
        self._call("POST", "quota", body)

    def set_project(self, project: str, *, exists: bool | None = None, api_enabled: bool | None = None,
                    denied: list[str] | None = None) -> dict:
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

    def set_timings(self, **timings: float) -> dict:
        return self._call("POST", "timings", timings)

    def advance(self, seconds: float) -> None:
        self._call("POST", "advance", {"seconds": seconds})

    def set_host_latency(self, seconds: float) -> None:
        """Delay each SSH connection to a fake host by SECONDS (a simulated round trip)."""
        self._call("POST", "host_latency", {"seconds": seconds})

    def drop_host(self, name: str, worker: int) -> dict:
        """Host WORKER of node NAME vanishes (its processes killed); the node stays READY."""
        return self._call("POST", "drop_host", {"name": name, "worker": worker})

    def kill_processes(self, name: str, worker: int, signal: str = "KILL") -> int:
        """Every process host WORKER of NAME started gets SIGNAL (TERM or KILL): a crash or an
        OOM kill. The host stays up and takes new SSH connections. Returns how many."""
        return self._call("POST", "kill_processes",
                          {"name": name, "worker": worker, "signal": signal})["signalled"]

    def cut_ssh(self, name: str, worker: int) -> int:
        """Abort host WORKER's SSH connections (the client sees them drop); new ones work.
        Returns how many were cut."""
        return self._call("POST", "cut_ssh", {"name": name, "worker": worker})["connections_cut"]

    def gcs_outage(self, seconds: float) -> None:
        """GCS answers every request with 503 for SECONDS of wall-clock time (0 ends it)."""
        self._call("POST", "gcs_outage", {"seconds": seconds})

    def hosts(self) -> dict:
        """{"nodes": {node name: {ports, alive, connections, sessions}}, "host_latency": s,
        "in_grace": [preempted nodes whose processes are not yet SIGKILLed]}."""
        return self._call("GET", "hosts")

    def reset(self) -> None:
        self._call("POST", "reset", {})
