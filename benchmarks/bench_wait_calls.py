"""Cloud TPU API calls made while `up` waits for a simulated 10-minute provisioning.

    python benchmarks/bench_wait_calls.py [--minutes 10]

The fake cloud runs at time scale 1 and the waiter's sleep advances the fake's
clock instead of sleeping, so ten simulated minutes take a second or two. The
baseline, in the same run, is the loop people write by hand (and MaxText-style
scripts use): describe the node every N seconds until it is READY.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from podctl.cloud import describe, terminate
from podctl.cloud.connect import api_for_endpoint
from podctl.cloud.types import SliceSpec
from podctl.cloud.up import UpRequest, up
from podctl.cloud.wait import Clock, WaitPolicy
from podctl.fake.api.server import fake_cloud

PARENT = "projects/bench/locations/us-central1-a"
KEY = "podctl:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBench podctl"


def simulated_clock(admin):
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds
        admin.advance(seconds)

    return now, Clock(now=lambda: now[0], sleep=sleep)


async def podctl_up(api, admin, name: str) -> tuple[int, float]:
    now, clock = simulated_clock(admin)
    api.calls.clear()
    request = UpRequest(parent=PARENT, name=name, spec=SliceSpec.build("v5p-4096"), ssh_keys=KEY,
                        owner="bench", policy=WaitPolicy(timeout=7200))
    result = await up(api, request, clock=clock)
    assert result.info.ready
    return api.total_calls, now[0]


async def fixed_interval(api, admin, name: str, interval: float) -> tuple[int, float]:
    """create, then GET the node every INTERVAL seconds until READY."""
    from google.cloud import tpu_v2

    now, clock = simulated_clock(admin)
    api.calls.clear()
    await api.create_node(PARENT, name, tpu_v2.Node(accelerator_type="v5p-4096",
                                                    runtime_version="v2-alpha-tpuv5"))
    while (await describe.describe(api, PARENT, name, "node")).state != "READY":
        await clock.sleep(interval)
    return api.total_calls, now[0]


async def run(minutes: float) -> None:
    with fake_cloud() as cloud:
        cloud.admin.set_timings(time_scale=1.0, node_create=minutes * 60, node_delete=1)
        api = api_for_endpoint(cloud.tpu_api_url)
        rows = []
        start = time.perf_counter()
        rows.append(("podctl up (backoff 1..30 s + jitter)", *await podctl_up(api, cloud.admin, "a")))
        for interval in (1.0, 5.0):
            rows.append((f"hand loop: GET every {interval:.0f} s",
                         *await fixed_interval(api, cloud.admin, f"b{int(interval)}", interval)))
        for name in ("a", "b1", "b5"):
            await terminate.terminate(api, PARENT, name, clock=simulated_clock(cloud.admin)[1])
        assert cloud.admin.is_empty()
        ours = rows[0][1]
        print(f"simulated provisioning: {minutes:.0f} min (v5p-4096); wall {time.perf_counter() - start:.1f} s")
        for label, calls, waited in rows:
            print(f"{label:40s} {calls:5d} API calls  ready seen after {waited:6.0f} s  "
                  f"calls vs podctl {calls / ours:5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    asyncio.run(run(parser.parse_args().minutes))


if __name__ == "__main__":
    main()
