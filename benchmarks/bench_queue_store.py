"""One `podctl queue tick` over 1,000 entries with the queue in PostgreSQL, beside the
same tick with the queue in SQLite (the baseline, in the same run, on the same fake
cloud), and three ticks at once (three machines' cron firing together).

    python benchmarks/bench_queue_store.py [--entries 1000] [--changing 10]

Per store, setup (not measured): ENTRIES - CHANGING entries on on-demand queued
resources in a zone with no capacity, asked for and seen WAITING_FOR_RESOURCES by two
ticks; then CHANGING fresh entries. Measured: one tick (open the store, take the tick
lock, read every entry, list the zone once, step each entry: the CHANGING new ones
create their queued resources), then three ticks started together on a world where
CHANGING more entries were added (one takes the lock and does the pass; the other two
find it held and return). Reported: wall time, the Cloud TPU API calls the fake's
server counted, and the bound: one list per zone and kind + one create per changed
entry. The PostgreSQL server is a local pgserver (Unix socket): a managed one across a
network adds its round trips (about 2 queries per changed entry, 1 read of all).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podctl.base._sync import run_sync  # noqa: E402
from podctl.cloud.connect import api_for_endpoint  # noqa: E402
from podctl.fake.api.server import fake_cloud  # noqa: E402
from podctl.queue.entry import Entry  # noqa: E402
from podctl.queue.tick import run_pass, tick  # noqa: E402
from tests.queue_support import Queue  # noqa: E402


def add_raw(queue: Queue, count: int, start: int) -> None:
    """Entries as `queue add` makes them (no bundle needed: nothing starts)."""
    with queue.store() as store:
        for i in range(start, start + count):
            store.add(Entry(id=0, name=f"bench{i}", accelerator_type="v5p-8", project="test-project",
                            zone="us-central1-a", bucket="podctl-fake", script="train.py",
                            bundle_hash="0" * 64, tier="queued", owner=f"user{i % 4}"))


async def three_at_once(queue: Queue) -> int:
    """Three ticks' passes started together, each with its own connection and lock
    attempt; the number that ran a pass (the others found the lock held)."""

    async def one() -> bool:
        with queue.store() as store:
            lock = store.tick_lock()
            if not lock.acquire():
                return False
            try:
                await run_pass(queue.ctx, store)
                return True
            finally:
                lock.release()

    return sum(await asyncio.gather(one(), one(), one()))


def measure(cloud, home: Path, url: str | None, entries: int, changing: int) -> dict:
    admin = cloud.admin
    admin.reset()
    admin.set_timings(time_scale=300)
    admin.capacity(0)
    api = api_for_endpoint(cloud.tpu_api_url)
    queue = Queue(cloud, api, home, url=url)
    add_raw(queue, entries - changing, 0)
    tick(queue.ctx, queue.store)  # asks for every queued resource
    tick(queue.ctx, queue.store)  # sees them waiting
    add_raw(queue, changing, entries)
    admin.reset_stats()
    t0 = time.perf_counter()
    one = tick(queue.ctx, queue.store)
    one_s = time.perf_counter() - t0
    one_calls = admin.stats()["calls"]
    add_raw(queue, changing, entries + changing)
    admin.reset_stats()
    t0 = time.perf_counter()
    ran = run_sync(three_at_once(queue))
    three_s = time.perf_counter() - t0
    three_calls = admin.stats()["calls"]
    with queue.store() as store:  # the fake holds ~1,000 queued resources: let them go
        leftover = len(store.entries())
    admin.reset()
    return {"one_s": one_s, "one_calls": one_calls, "changed": one.changed, "three_s": three_s,
            "three_calls": three_calls, "three_ran": ran, "entries": leftover}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--changing", type=int, default=10)
    args = parser.parse_args()
    import pgserver

    with tempfile.TemporaryDirectory() as tmp, fake_cloud() as cloud:
        server = pgserver.get_server(tempfile.mkdtemp(prefix="podctl-bench-pg-"), cleanup_mode="delete")
        try:
            results = {
                "sqlite": measure(cloud, Path(tmp) / "sqlite", None, args.entries, args.changing),
                "postgresql": measure(cloud, Path(tmp) / "pg", server.get_uri(), args.entries,
                                      args.changing),
            }
        finally:
            server.cleanup()
    bound = 2 + args.changing
    for store, r in results.items():
        print(f"{store:10s} one tick: {r['one_s']:5.2f} s {r['one_calls']:3d} API calls "
              f"({r['changed']} changed; bound {bound}: {'met' if r['one_calls'] <= bound else 'NOT met'}) | "
              f"three at once: {r['three_s']:5.2f} s {r['three_calls']:3d} API calls, "
              f"{r['three_ran']} ran a pass | {r['entries']} entries")
    pg, lite = results["postgresql"], results["sqlite"]
    print(f"ratio PostgreSQL / SQLite: one tick {pg['one_s'] / lite['one_s']:.2f}x, "
          f"three at once {pg['three_s'] / lite['three_s']:.2f}x")


if __name__ == "__main__":
    main()
