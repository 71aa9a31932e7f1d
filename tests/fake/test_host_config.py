"""A host's config from launch.json (host_config.for_host) is the one the SSH path hands
it (launch.host_config), for one slice and for several: the two paths give each host
the same environment. `_before` is launch.host_config as it was before launch.json
existed, kept here as the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from typing import Any

import pytest

from podctl.host import host_config, run_layout
from podctl.jobs import launch
from podctl.jobs.launch import MEGASCALE_PORT, JobSpec
from podctl.jobs.ssh import Target
from podctl.base.vocabulary import HEARTBEAT_SECONDS

SHA = "ab" * 32


def _before(spec: JobSpec, target: Target, targets: list[Target], agent_sha: str) -> dict[str, Any]:
    same_slice = [t for t in targets if t.slice_index == target.slice_index]
    first = targets[0]
    slices = len({t.slice_index for t in targets})
    slice_env = {}
    if slices > 1:
        slice_env = {"MEGASCALE_COORDINATOR_ADDRESS": f"{first.peer_address}:{MEGASCALE_PORT}",
                     "MEGASCALE_NUM_SLICES": str(slices), "MEGASCALE_SLICE_ID": str(target.slice_index),
                     "MEGASCALE_PORT": str(MEGASCALE_PORT)}
    return {
        "run_id": spec.run_id, "bucket": spec.bucket, "project": spec.project,
        "host": target.index, "process_id": target.index, "num_processes": len(targets),
        "worker_id": target.worker, "worker_hostnames": [t.peer_address for t in same_slice],
        "coordinator": f"{first.peer_address}:{spec.coordinator_port}",
        "checkpoint_dir": spec.checkpoint_dir or run_layout.checkpoint_dir(spec.bucket, spec.run_id),
        "script": spec.script, "args": list(spec.args), "command": list(spec.command),
        "env": dict(spec.env), "slice_env": slice_env, "setup": spec.setup,
        "bundle_hash": spec.bundle_hash, "bundle_object": spec.bundle_object,
        "agent_sha": agent_sha, "agent_object": run_layout.agent_object(agent_sha),
        "flush_seconds": spec.flush_seconds, "heartbeat_seconds": HEARTBEAT_SECONDS,
        "environment": spec.environment,
    }


def _targets(slices: int, workers: int) -> list[Target]:
    out = []
    for s in range(slices):
        for w in range(workers):
            i = len(out)
            out.append(Target(index=i, slice_index=s, worker=w, address=f"34.0.{s}.{w}", port=22,
                              internal=f"10.0.{s}.{w}" if i % 3 else ""))  # one without an internal
    return out


SPECS = [
    JobSpec(run_id="r-1", bucket="bkt", project="p", script="train.py", args=("--steps", "3"),
            env={"SECRET": "s3cret"}, setup="pip list", bundle_hash="cd" * 32,
            bundle_object=run_layout.bundle_object("cd" * 32), environment={"lock": "x", "key": "k"}),
    JobSpec(run_id="r-2", bucket="bkt2", project="p2", command=("bash", "-c", "true"),
            coordinator_port=9000, flush_seconds=0.5, checkpoint_dir="gs://else/ckpt"),
]


@pytest.mark.parametrize("slices,workers", [(1, 1), (1, 4), (2, 2), (4, 8)])
@pytest.mark.parametrize("spec", SPECS, ids=["script", "command"])
def test_for_host_of_launch_config_is_the_ssh_paths_config(spec, slices, workers):
    targets = _targets(slices, workers)
    launch_cfg = json.loads(json.dumps(launch.launch_config(spec, targets, SHA)))  # as GCS carries it
    for target in targets:
        want = _before(spec, target, targets, SHA)
        assert host_config.for_host(launch_cfg, target.index) == want
        assert launch.host_config(spec, target, targets, SHA) == want
    if slices > 1:
        assert host_config.for_host(launch_cfg, len(targets) - 1)["slice_env"]["MEGASCALE_SLICE_ID"] == str(slices - 1)


def test_an_elastic_runs_survivors_are_renumbered():
    """Slices 0 and 2 of 3 (slice 1 lost): two slices, ids 0 and 1, coordinator on the first."""
    survivors = [t for t in _targets(3, 2) if t.slice_index != 1]
    survivors = [Target(index=i, slice_index=t.slice_index, worker=t.worker, address=t.address,
                        port=t.port, internal=t.internal) for i, t in enumerate(survivors)]
    cfg = launch.launch_config(SPECS[0], survivors, SHA)
    envs = [host_config.for_host(cfg, i)["slice_env"] for i in range(len(survivors))]
    assert [e["MEGASCALE_SLICE_ID"] for e in envs] == ["0", "0", "1", "1"]
    assert {e["MEGASCALE_NUM_SLICES"] for e in envs} == {"2"}
    assert host_config.for_host(cfg, 3)["worker_hostnames"] == [survivors[2].peer_address,
                                                                 survivors[3].peer_address]


def test_launch_config_holds_per_host_only_slice_worker_and_address():
    targets = _targets(64, 8)  # 512 hosts: a v5p-4096's worth
    cfg = launch.launch_config(SPECS[0], targets, SHA)
    assert cfg["hosts"][10] == [1, 2, "10.0.1.2"] and cfg["hosts"][9] == [1, 1, "34.0.1.1"]
    assert all(len(h) == 3 for h in cfg["hosts"])
    assert len(json.dumps(cfg)) < 20_000  # not megabytes: no per-host worker lists
    with pytest.raises(ValueError):
        host_config.for_host(cfg, 512)
    with pytest.raises(ValueError):
        host_config.for_host({**cfg, "v": 2}, 0)


def test_the_agent_zip_ships_host_config_and_it_runs_alone(tmp_path):
    data, _ = launch.agent_source()
    zip_path = tmp_path / "agent.zip"
    zip_path.write_bytes(data)
    with zipfile.ZipFile(zip_path) as z:
        assert "host_config.py" in z.namelist()
    cfg = launch.launch_config(SPECS[0], _targets(2, 2), SHA)
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import host_config; "
            "print(json.dumps(host_config.for_host(json.loads(sys.stdin.read()), 3))); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'podctl'))")
    done = subprocess.run([sys.executable, "-s", "-c", code, str(zip_path)], input=json.dumps(cfg),
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out, mods = done.stdout.splitlines()
    assert json.loads(out) == host_config.for_host(cfg, 3) and mods == "[]"
