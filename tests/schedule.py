"""Longest first: the order pytest-xdist hands the slower tiers' cases to its workers when
asked for one at a time (`python -m pytest -q -n 3 --maxschedchunk 1 tests --ignore=tests/unit`).
Not `.ci/run`'s yet: a simulation of both schedulers over the cases' durations finds no tail
to cut (benchmarks/ci-history.md), and a whole-suite run beside the default is still to come.

With xdist's `--dist load` as it comes, each worker first takes a quarter of its share of
the collection as one contiguous chunk, in collection order: where a minutes-long case
falls late, one worker runs it alone at the end while the others are done (the tail).
Here the known long cases (tests/durations.txt, from a `--durations=0` run) go first,
longest first, and `--maxschedchunk 1` hands out one case at a time (one queued per
worker): list scheduling, longest first, whose tail is at most about the shortest of the
long cases. The one case that builds the hosts' environment first (tests/conftest.py
`_host_env_built_once`, which makes every other `host_env` case wait for it) leads, and
the next two need no such environment, so the other two workers do not start by waiting.

Cases that share a module-scoped fixture may now run on different workers, each making
the fixture once (xdist's `loadgroup`, which would keep them together, does not group
on this pytest: pytest-dev/pytest-xdist#1386).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.txt")


def known_seconds(path: Path = DURATIONS) -> dict[str, float]:
    """NODEID -> seconds (setup, call and teardown together), from `SECONDS NODEID` lines."""
    seconds: dict[str, float] = {}
    if not path.is_file():
        return seconds
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            value, nodeid = line.split(None, 1)
            seconds[nodeid.strip()] = float(value)
    return seconds


def order(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """ITEMS with the known long ones first, longest first, the rest in collection order;
    the longest `host_env` case leads, then the two longest that need no hosts' environment."""
    ranked = sorted(items, key=lambda item: -seconds.get(item.nodeid, 0.0))

    def lead(candidates: Iterable[pytest.Item], count: int) -> list[pytest.Item]:
        return [item for item in candidates if seconds.get(item.nodeid, 0.0) > 0][:count]

    front = lead((i for i in ranked if "host_env" in i.keywords), 1) + \
        lead((i for i in ranked if "host_env" not in i.keywords), 2)
    return front + [item for item in ranked if item not in front]


def schedule(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Called from tests/conftest.py's collection hook, on each xdist worker (they must all
    come to the same order: the same file, the same collection)."""
    if not hasattr(config, "workerinput") or config.getoption("maxschedchunk", None) != 1:
        return  # not one case at a time under xdist's workers: run as collected
    items[:] = order(items, known_seconds())
