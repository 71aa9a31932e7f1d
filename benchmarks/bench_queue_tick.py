"""One `podctl queue tick` over 1,000 queued entries: wall time and Cloud TPU API calls.

    python benchmarks/bench_queue_tick.py [--entries 1000] [--changing 10]

Setup (not measured): ENTRIES entries on on-demand queued resources in a zone with
no capacity; a first pass asks for all of them, so ENTRIES - CHANGING queued
resources wait in WAITING_FOR_RESOURCES; then CHANGING fresh entries are added.
Measured: one tick (lock, open the db, list the world, step every entry: the
CHANGING new ones each create their queued resource). Baseline, same run, same
world: the naive reconciler that GETs each entry's slice (podctl's describe, one
call per waiting queued resource) instead of listing the zone once.
The fake cloud's admin `stats()` counts the calls the server saw.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podctl.base._sync import run_sync  # noqa: E402
from podctl.cloud import describe  # noqa: E402
from podctl.cloud.connect import api_for_endpoint  # noqa: E402
from podctl.fake.api.server import fake_cloud  # noqa: E402
from podctl.queue.provision import parent_of  # noqa: E402
from podctl.queue.entry import Entry  # noqa: E402
from podctl.queue.tick import tick  # noqa: E402
from tests.queue_support import Queue  # noqa: E402


def add_raw(queue: Queue, count: int, bundle_hash: str) -> None:
    """Entries as `queue add` makes them (the bundle itself is not needed: nothing starts)."""
    with queue.store() as store:
        store.conn.execute("BEGIN")
        for i in range(count):
            store.add(Entry(id=0, name=f"bench{i}", accelerator_type="v5p-8", project="test-project",
                            zone="us-central1-a", bucket="podctl-fake", script="train.py",
                            bundle_hash=bundle_hash, tier="queued"))
        store.conn.execute("COMMIT")


async def naive(api, entries: list[Entry]) -> int:
    """One GET per entry with a slice, as a loop over entries would do it."""
    found = 0
    for e in entries:
        if e.slice_name and await describe.find(api, parent_of(e), e.slice_name):
            found += 1
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--changing", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, fake_cloud() as cloud:
        home = Path(tmp)
        admin = cloud.admin
        admin.set_timings(time_scale=300)
        admin.capacity(0)
        api = api_for_endpoint(cloud.tpu_api_url)
        queue = Queue(cloud, api, home)
        add_raw(queue, args.entries - args.changing, "0" * 64)
        t0 = time.perf_counter()
        tick(queue.ctx, queue.store)  # asks for every queued resource
        tick(queue.ctx, queue.store)  # sees them WAITING_FOR_RESOURCES
        setup = time.perf_counter() - t0
        add_raw(queue, args.changing, "0" * 64)

        admin.reset_stats()
        t0 = time.perf_counter()
        result = tick(queue.ctx, queue.store)
        ours_s = time.perf_counter() - t0
        ours = admin.stats()

        with queue.store() as store:
            entries = store.entries()
        admin.reset_stats()
        t0 = time.perf_counter()
        found = run_sync(naive(api, entries))
        naive_s = time.perf_counter() - t0
        base = admin.stats()
        admin.reset()

    waiting = sum(1 for e in entries if e.state == "provisioning")
    print(f"setup: {args.entries - args.changing} queued resources asked for and seen waiting "
          f"in {setup:.1f} s")
    print(f"entries: {len(entries)} ({waiting} provisioning, {result.changed} changed state "
          f"in the measured tick)")
    print(f"podctl queue tick : {ours_s:6.2f} s  {ours['calls']:5d} API calls  {ours['by_call']}")
    print(f"naive per-entry GET: {naive_s:6.2f} s  {base['calls']:5d} API calls  "
          f"(found {found})  [reads only; it would still have to create the {args.changing}]")
    print(f"ratio (calls): naive / podctl = {base['calls'] / max(1, ours['calls']):.1f}x; "
          f"time: {naive_s / ours_s:.1f}x")
    budget = 2 + result.changed
    print(f"target calls <= 1 list per zone per kind + 1 per changed entry = {budget}: "
          f"{'met' if ours['calls'] <= budget else 'NOT met'}; target time < 2 s: "
          f"{'met' if ours_s < 2 else 'NOT met'}")


if __name__ == "__main__":
    main()
