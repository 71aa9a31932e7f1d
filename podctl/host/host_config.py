"""One host's config from the run-wide one (launch.json), on the host or in podctl.

`launch.launch_config(spec, targets, agent_sha)` writes what every host shares once
(JobSpec's fields, the agent's hash, and per host only [slice_index, worker,
peer_address]: at 512 hosts per-host copies of the worker lists would be megabytes);
`for_host(launch, host)` derives host HOST's config from it, exactly the dict
`launch.host_config` hands a host over SSH (it delegates here: one derivation for both
paths). Shipped in the agent's zip (launch.AGENT_MODULES), where the host's watcher
(host_watch.py) runs it: standard library only, Python 3.10, it imports nothing.
"""

from __future__ import annotations

from typing import Any

LAUNCH_VERSION = 1


def for_host(launch: dict[str, Any], host: int) -> dict[str, Any]:
    """Host HOST's config (its index in the run: slices in order, workers in order)."""
    if launch.get("v") != LAUNCH_VERSION:
        raise ValueError(f"a launch config of version {launch.get('v')!r}, not {LAUNCH_VERSION}")
    hosts = launch["hosts"]
    if not 0 <= host < len(hosts):
        raise ValueError(f"host {host} is not in this run of {len(hosts)} hosts")
    slice_index, worker, _address = hosts[host]
    first = hosts[0][2]
    same_slice = [h[2] for h in hosts if h[0] == slice_index]
    present = sorted({h[0] for h in hosts})
    slices = len(present)
    slice_env = {}
    if slices > 1:
        port = launch["megascale_port"]
        # the slice's place among the run's slices, not its index in the multislice: an
        # elastic run relaunched on slices 0 and 2 of 3 runs them as 0 and 1 of 2
        slice_env = {"MEGASCALE_COORDINATOR_ADDRESS": f"{first}:{port}",
                     "MEGASCALE_NUM_SLICES": str(slices),
                     "MEGASCALE_SLICE_ID": str(present.index(slice_index)),
                     "MEGASCALE_PORT": str(port)}
    return {
        "run_id": launch["run_id"], "bucket": launch["bucket"], "project": launch["project"],
        "host": host, "process_id": host, "num_processes": len(hosts),
        # between hosts, internal addresses: the firewall drops the rest (launch.targets_for)
        "worker_id": worker, "worker_hostnames": same_slice,
        "coordinator": f"{first}:{launch['coordinator_port']}",
        "checkpoint_dir": launch["checkpoint_dir"],
        "script": launch["script"], "args": list(launch["args"]), "command": list(launch["command"]),
        "env": dict(launch["env"]), "slice_env": slice_env, "setup": launch["setup"],
        "bundle_hash": launch["bundle_hash"], "bundle_object": launch["bundle_object"],
        "agent_sha": launch["agent_sha"], "agent_object": launch["agent_object"],
        "flush_seconds": launch["flush_seconds"], "heartbeat_seconds": launch["heartbeat_seconds"],
        "environment": launch["environment"],
    }
