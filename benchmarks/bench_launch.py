"""Start a trivial command on every host of a fake slice, four ways, in one run.

    python benchmarks/bench_launch.py [--slice v5p-4096] [--rtt 0.1]

- podctl: the job layer's Fleet (one process, bounded concurrency, pinned keys);
- floor: bare asyncssh connect + exec on all hosts at once, nothing else;
- anchor "all at once": one OpenSSH `ssh` process per host, all started together
  (MaxText's multihost_runner through gcloud);
- anchor "pool of 4": the same through a pool of 4 (SkyPilot's max(4, cores-1) on
  a 2-core machine).
The fake hosts delay each connection by --rtt seconds, a simulated network round trip.
They live in the fake cloud's daemon, a process of their own, as real hosts are
machines of their own; this process holds only the clients.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from podctl.cloud.connect import api_for_endpoint
from podctl.cloud.sshkey import SSH_USER, ensure_ssh_key
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud import terminate
from podctl.cloud.wait import WaitPolicy
from podctl.fake.admin import daemon
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.jobs import launch
from podctl.jobs.ssh import Fleet, HostPins

PARENT = "projects/bench/locations/us-central1-a"


async def podctl_fleet(targets, key: Path, tmp: Path) -> float:
    start = time.perf_counter()
    async with Fleet(targets, key, HostPins(tmp / "pins.json")) as fleet:
        async def run(conn, target):
            return (await conn.run("true", check=False)).exit_status

        codes = await fleet.each(run)
    assert set(codes) == {0}
    return time.perf_counter() - start


async def floor(targets, key: Path) -> float:
    import asyncssh

    client_key = asyncssh.read_private_key(key)
    start = time.perf_counter()

    async def one(t):
        async with asyncssh.connect(t.address, t.port, username=SSH_USER, client_keys=[client_key],
                                    known_hosts=None, agent_path=None, config=None) as conn:
            return (await conn.run("true", check=False)).exit_status

    codes = await asyncio.gather(*(one(t) for t in targets))
    assert set(codes) == {0}
    return time.perf_counter() - start


def ssh_argv(t, key: Path) -> list[str]:
    return ["ssh", "-i", str(key), "-p", str(t.port), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
            f"{SSH_USER}@{t.address}", "true"]


def ssh_all_at_once(targets, key: Path) -> float:
    start = time.perf_counter()
    procs = [subprocess.Popen(ssh_argv(t, key), stdin=subprocess.DEVNULL) for t in targets]
    codes = [p.wait() for p in procs]
    assert set(codes) == {0}, codes[:5]
    return time.perf_counter() - start


def ssh_pool(targets, key: Path, workers: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        codes = list(pool.map(lambda t: subprocess.run(ssh_argv(t, key), stdin=subprocess.DEVNULL).returncode,
                              targets))
    assert set(codes) == {0}
    return time.perf_counter() - start


async def main_async(slice_name: str, rtt: float, anchors: bool) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        state = tmp / "fake"
        info = daemon.start(state, project="bench", zone="us-central1-a", time_scale=1000)
        try:
            await measure(info, tmp, slice_name, rtt, anchors)
        finally:
            daemon.stop(state)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(daemon_info: dict, tmp: Path, slice_name: str, rtt: float, anchors: bool) -> None:
    admin = FakeAdmin(daemon_info["admin"])
    key = ensure_ssh_key(tmp / "config")
    api = api_for_endpoint(daemon_info["tpu_api"])
    policy = WaitPolicy(initial=0.1, maximum=1, timeout=600)
    info = (await up(api, UpRequest(parent=PARENT, name="bench", spec=SliceSpec.build(slice_name),
                                    ssh_keys=key.metadata_entry, owner="bench", policy=policy))).info
    targets = launch.targets_for(info, None)
    admin.host_latency(rtt)
    rows = [("floor: asyncssh connect+exec, all at once", await floor(targets, key.private_path))]
    rows.append(("podctl Fleet", await podctl_fleet(targets, key.private_path, tmp)))
    if anchors and shutil.which("ssh"):
        rows.append(("anchor: one ssh process per host, all at once",
                     ssh_all_at_once(targets, key.private_path)))
        rows.append(("anchor: ssh processes, pool of 4", ssh_pool(targets, key.private_path, 4)))
    await terminate.terminate(api, PARENT, "bench", policy=policy)
    assert admin.is_empty()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ours = rows[1][1]
    print(f"{slice_name}: {len(targets)} hosts, simulated RTT {rtt * 1000:.0f} ms, fd limit "
          f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]}, peak RSS: client {peak_mb:.0f} MB, "
          f"fake cloud daemon {_peak_rss_mb(daemon_info['pid']):.0f} MB")
    for label, seconds in rows:
        print(f"{label:48s} {seconds:7.2f} s   {seconds / ours:5.2f}x podctl")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slice", default="v5p-4096")
    parser.add_argument("--rtt", type=float, default=0.1)
    parser.add_argument("--no-anchors", action="store_true", help="skip the OpenSSH baselines")
    args = parser.parse_args()
    asyncio.run(main_async(args.slice, args.rtt, not args.no_anchors))


if __name__ == "__main__":
    main()
