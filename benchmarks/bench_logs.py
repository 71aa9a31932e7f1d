"""Log throughput and delay through the GCS path, on a fake v5p-512 (64 hosts).

    python benchmarks/bench_logs.py [--slice v5p-512] [--lines 20000]

(a) Throughput: every host prints --lines lines; the merged lines per second that
    reach the reader through agent -> GCS chunks -> LogReader, beside the baseline
    of the anchors' way, in the same run: `cat` of each host's local log over one
    SSH connection per host, after the fact.
(b) Delay: every host prints a timestamp every 0.25 s for 10 s; the reader (as
    `podctl logs --follow` does) notes when each line arrives. Target: under 3 s.
"""

from __future__ import annotations

import argparse
import os
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from podctl.cloud import terminate
from podctl.cloud.connect import api_for_endpoint
from podctl.cloud.sshkey import ensure_ssh_key
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud.wait import WaitPolicy
from podctl.fake.admin import daemon
from podctl.jobs import launch
from podctl.jobs.job import Job, RunRequest
from podctl.jobs.run_spec import RunSpec
from podctl.jobs.ssh import Fleet, HostPins
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage

PARENT = "projects/bench/locations/us-central1-a"
LINES = "import os, sys\nme = os.environ['PODCTL_PROCESS_ID']\nfor i in range(int(sys.argv[1])):\n    print(me, i)\n"
TICKS = ("import time\nfor i in range(40):\n    print(repr(time.time()), flush=True)\n"
         "    time.sleep(0.25)\n")


async def run_script(info, key, storage, tmp: Path, source: str, *args: str,
                     sink=None) -> tuple[Job, float]:
    work = tmp / f"work-{time.monotonic_ns()}"
    work.mkdir()
    (work / "job.py").write_text(source)
    request = RunRequest(info=info, spec=RunSpec(script=work / "job.py", args=tuple(args)), hosts=None,
                         ssh_port=None, coordinator_port=launch.JAX_COORDINATOR_PORT,
                         flush_seconds=float(os.environ.get("FLUSH", "2")), poll_seconds=0.25)
    job = Job(storage, request, project="bench", zone="us-central1-a", private_key=key.private_path,
              pins=HostPins(tmp / "pins.json"), sink=sink or (lambda host, line: None),
              notice=lambda text: None)
    await job.start(await job.prepare())
    start = time.perf_counter()
    try:
        result = await job.follow()
    finally:
        await job.close()
    assert result.exit_code == 0, result
    return job, time.perf_counter() - start


async def ssh_cat_baseline(info, key, tmp: Path, run_id: str) -> tuple[int, float]:
    targets = launch.targets_for(info, None)
    start = time.perf_counter()
    async with Fleet(targets, key.private_path, HostPins(tmp / "pins.json")) as fleet:
        async def cat(conn, target):
            out = await conn.run(f"cat $HOME/.podctl/runs/{run_id}/output.log", check=True)
            return len(out.stdout.splitlines())

        counts = await fleet.each(cat)
    return sum(counts), time.perf_counter() - start


async def measure(daemon_info: dict, tmp: Path, slice_name: str, lines: int) -> None:
    key = ensure_ssh_key(tmp / "config")
    api = api_for_endpoint(daemon_info["tpu_api"])
    policy = WaitPolicy(initial=0.1, maximum=1, timeout=600)
    info = (await up(api, UpRequest(parent=PARENT, name="logs", spec=SliceSpec.build(slice_name),
                                    ssh_keys=key.metadata_entry, owner="bench", policy=policy))).info
    storage = Storage.connect(FAKE_BUCKET, endpoint=daemon_info["gcs"])
    try:
        received = [0]

        def count(host: int, line: str) -> None:
            received[0] += 1

        job, seconds = await run_script(info, key, storage, tmp, LINES, str(lines), sink=count)
        total = len(info.hosts) * lines
        assert received[0] == total, (received[0], total)
        cat_lines, cat_seconds = await ssh_cat_baseline(info, key, tmp, job.run_id)
        delays: list[float] = []

        def delay(host: int, line: str) -> None:
            delays.append(time.time() - float(line))

        await run_script(info, key, storage, tmp, TICKS, sink=delay)
    finally:
        await terminate.terminate(api, PARENT, "logs", policy=policy)
    hosts = len(info.hosts)
    print(f"{slice_name}: {hosts} hosts, {lines} lines each ({total} lines)")
    print(f"GCS path, followed while running   {total / seconds:9.0f} lines/s  ({seconds:.1f} s from "
          "start to the last line)")
    print(f"baseline: ssh cat of each host's log {cat_lines / cat_seconds:9.0f} lines/s  "
          f"({cat_seconds:.1f} s, after the fact)")
    delays.sort()
    print(f"delay print -> reader over {len(delays)} lines: median {statistics.median(delays):.2f} s, "
          f"p95 {delays[int(len(delays) * 0.95)]:.2f} s, max {delays[-1]:.2f} s (target < 3 s)")


async def main_async(slice_name: str, lines: int) -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        info = daemon.start(tmp / "fake", project="bench", zone="us-central1-a", time_scale=1000)
        try:
            await measure(info, tmp, slice_name, lines)
        finally:
            daemon.stop(tmp / "fake")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slice", default="v5p-512")
    parser.add_argument("--lines", type=int, default=20000)
    args = parser.parse_args()
    asyncio.run(main_async(args.slice, args.lines))


if __name__ == "__main__":
    main()
