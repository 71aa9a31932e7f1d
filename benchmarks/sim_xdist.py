"""How long `-n 3` would take if every case took its tests/durations.txt time whatever ran
beside it: xdist's `--dist load` as it comes (contiguous chunks in collection order) against
one case at a time, longest first (`--maxschedchunk 1`, tests/schedule.py). No model of
the cases slowing each other down on 2 cores: it finds the tail the order makes, nothing else.

    python -m pytest --co -q tests --ignore=tests/unit | grep :: > /tmp/nodeids.txt
    python -m pytest --co -q -m host_env tests --ignore=tests/unit | grep :: > /tmp/host_env.txt
    python benchmarks/sim_xdist.py /tmp/nodeids.txt /tmp/host_env.txt WORKER_SECONDS

WORKER_SECONDS: the whole run's pytest wall time x 3, shared among the unlisted cases.
"""

from __future__ import annotations

import heapq
import sys
from collections import deque
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.schedule import known_seconds, order  # noqa: E402

WORKERS = 3


def load_chunks(durations: list[float]) -> float:
    """xdist 3.8's LoadScheduling: a quarter of each worker's share up front, then refills."""
    pending = deque(range(len(durations)))
    queues: list[deque[int]] = [deque() for _ in range(WORKERS)]
    for queue in queues:
        for _ in range(max(len(durations) // WORKERS // 4, 2)):
            queue.append(pending.popleft())
    return _run(durations, queues, pending, chunked=True)


def one_at_a_time(durations: list[float]) -> float:
    pending = deque(range(len(durations)))
    queues: list[deque[int]] = [deque([pending.popleft(), pending.popleft()]) for _ in range(WORKERS)]
    return _run(durations, queues, pending, chunked=False)


def _run(durations: list[float], queues: list[deque[int]], pending: deque[int], chunked: bool) -> float:
    clock: list[tuple[float, int]] = [(durations[queue[0]], w) for w, queue in enumerate(queues)]
    heapq.heapify(clock)
    end = 0.0
    while clock:
        now, w = heapq.heappop(clock)
        end = max(end, now)
        queues[w].popleft()
        if pending:
            if chunked:
                low = max(2, len(pending) // WORKERS // 4)
                high = max(2, len(pending) // WORKERS // 2)
                if len(queues[w]) < low and not len(queues[w]) >= 2:
                    for _ in range(min(high - len(queues[w]), len(pending))):
                        queues[w].append(pending.popleft())
            elif len(queues[w]) < 2:
                queues[w].append(pending.popleft())
        if queues[w]:
            heapq.heappush(clock, (now + durations[queues[w][0]], w))
    return end


def main(nodeids_file: str, host_env_file: str, worker_seconds: str) -> None:
    nodeids = [line.strip() for line in Path(nodeids_file).read_text().splitlines() if "::" in line]
    host_env = set(Path(host_env_file).read_text().split())
    known = known_seconds()
    listed = sum(known.get(n, 0.0) for n in nodeids)
    rest = [n for n in nodeids if n not in known]
    fill = max(0.5, (float(worker_seconds) - listed) / max(1, len(rest)))
    seconds = {n: known.get(n, fill) for n in nodeids}
    print(f"{len(nodeids) - len(rest)} cases listed ({listed:.0f} s), {len(rest)} others at {fill:.1f} s")
    items = [SimpleNamespace(nodeid=n, keywords={"host_env": 1} if n in host_env else {}) for n in nodeids]
    print(f"--dist load, collection order:       {load_chunks([seconds[n] for n in nodeids]):.0f} s")
    ranked = [i.nodeid for i in order(items, known)]  # type: ignore[arg-type]
    print(f"one at a time, longest first:        {one_at_a_time([seconds[n] for n in ranked]):.0f} s")
    print(f"the floor (all work / {WORKERS}, the longest case): "
          f"{max(sum(seconds.values()) / WORKERS, max(seconds.values())):.0f} s")


if __name__ == "__main__":
    main(*sys.argv[1:4])
