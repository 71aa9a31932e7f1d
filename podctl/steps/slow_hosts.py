"""A host slower than its peers, step after step: named, and with `--on-slow-host
recover` left behind (the slice is made again on other hardware).

In SPMD every host's step ends together, since the collectives wait for the slowest,
so a slow host does not show in the step time of any one host: the whole slice runs at
its pace. It shows in what each host does alone: building its input batch, where a
host with slow CPUs, a slow disk or network to its data, or a noisy neighbour falls
behind (the commonest straggler of a TPU pod). The template writes
the mean of that over its last steps (`host_s`) beside the mean step (`step_s`) and its
JAX process index into $PODCTL_PROGRESS_FILE; each host's agent carries that file in its
heartbeat (docs/guides/cost.md: "Goodput", the progress file). A host whose `host_s` is FACTOR times
the median of its peers' (and MIN_EXCESS seconds more) is slow.

While podctl follows a run it reads every host's heartbeat every CHECK_SECONDS. A slow
host is said once on the console and noted in the run's record (`extra.slow_hosts`);
with action "recover" (and `--recover N`), a host still slow `after` seconds later ends
the attempt (SIGTERM: the template checkpoints at its next step) and the recovery makes
the slice again rather than relaunching on the same hardware.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from podctl.base.errors import UsageError
from podctl.base.vocabulary import HEARTBEAT_SECONDS
from podctl.cloud.storage import Storage
from podctl.jobs import run_files
from podctl.jobs.host_label import host_name
from podctl.jobs.job import Job
from podctl.steps.stall import follow_checking, read_beats

T = TypeVar("T")
ACTIONS = ("report", "recover")
FACTOR = 2.0  # a host's own part of a step this many times its peers' median
MIN_EXCESS = 0.002  # and at least this many seconds more (less is noise)
MIN_WINDOW = 20  # steps a host's mean must be over before it is judged
CHECK_SECONDS = HEARTBEAT_SECONDS  # no news comes faster than an agent's heartbeat
AFTER_SECONDS = 300.0  # slow for this long before `recover` acts


@dataclass(frozen=True)
class SlowHostPolicy:
    action: str = "report"
    after: float = AFTER_SECONDS

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UsageError(f"--on-slow-host {self.action!r}: use one of {', '.join(ACTIONS)}.")
        if self.after < 0:
            raise UsageError("--slow-host-after must be 0 seconds or more.")


@dataclass(frozen=True)
class HostPace:
    """One host's own part of a step and its mean step, over its last `window` steps."""

    host: int
    host_s: float
    step_s: float
    window: int
    process: int | None = None  # its JAX process index, when its script said


@dataclass(frozen=True)
class SlowHost:
    host: int
    host_s: float
    peers_s: float  # the median of the other hosts' host_s
    step_s: float
    process: int | None = None  # its JAX process index, when its script said

    @property
    def ratio(self) -> float:
        return self.host_s / self.peers_s if self.peers_s > 0 else float("inf")

    def describe(self) -> str:
        return (f"{host_name(self.host, self.process)} is slow: {_ms(self.host_s)} of each step building "
                f"its input batch against {_ms(self.peers_s)} on its "
                f"peers ({self.ratio:.1f}x); every host waits for it (step {_ms(self.step_s)})")

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "process": self.process, "host_s": round(self.host_s, 5),
                "peers_s": round(self.peers_s, 5),
                "ratio": round(self.ratio, 2) if self.peers_s > 0 else None,
                "step_s": round(self.step_s, 5)}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def paces(beats: dict[int, dict[str, Any]]) -> dict[int, HostPace]:
    """Each host's pace from its agent's heartbeat (or final status), where its script
    reported one."""
    out = {}
    for host, beat in beats.items():
        p = beat.get("progress") or {}
        host_s, step_s, window = p.get("host_s"), p.get("step_s"), p.get("window")
        if (isinstance(host_s, (int, float)) and isinstance(step_s, (int, float))
                and isinstance(window, (int, float))):
            process = p.get("process")
            out[host] = HostPace(host, float(host_s), float(step_s), int(window),
                                 process if isinstance(process, int) else None)
    return out


def slow_hosts(found: dict[int, HostPace], factor: float = FACTOR) -> list[SlowHost]:
    """The hosts whose own part of a step is FACTOR x their peers' median (a slice of
    one host has no peers)."""
    judged = {h: p for h, p in found.items() if p.window >= MIN_WINDOW}
    slow = []
    for host, pace in sorted(judged.items()):
        peers = [p.host_s for h, p in judged.items() if h != host]
        if not peers:
            continue
        median = statistics.median(peers)
        if pace.host_s >= factor * median and pace.host_s - median >= MIN_EXCESS:
            slow.append(SlowHost(host, pace.host_s, median, pace.step_s, pace.process))
    return slow


@dataclass
class SlowHostWatch:
    """One attempt's watch: which hosts are slow, since when, and whether it acted."""

    policy: SlowHostPolicy
    clock: Callable[[], float] = time.time
    since: dict[int, float] = field(default_factory=dict)  # host -> first seen slow
    said: set[int] = field(default_factory=set)
    ended_for: SlowHost | None = None  # the host it ended the attempt for

    def update(self, slow: list[SlowHost]) -> tuple[list[SlowHost], SlowHost | None]:
        """(hosts newly slow, to be said; the host to act on now, if any)."""
        now = self.clock()
        self.since = {s.host: self.since.get(s.host, now) for s in slow}
        new = [s for s in slow if s.host not in self.said]
        self.said |= {s.host for s in new}
        act = None
        if self.policy.action == "recover" and self.ended_for is None:
            due = [s for s in slow if now - self.since[s.host] >= self.policy.after]
            act = max(due, key=lambda s: s.ratio) if due else None
        return new, act


async def _note(storage: Storage, run_id: str, slow: SlowHost) -> None:
    with contextlib.suppress(Exception):  # an account, not a reason to fail the run
        record = await run_files.load_record(storage, run_id)
        noted = [h for h in record.extra.get("slow_hosts", []) if h.get("host") != slow.host]
        record.extra = {**record.extra, "slow_hosts": [*noted, {**slow.to_json(), "at": time.time()}]}
        await run_files.save_record(storage, record)


async def watch_slow_hosts(follow: Awaitable[T], *, storage: Storage, job: Job,
                           watch: SlowHostWatch, notice: Callable[[str], None],
                           every: float = CHECK_SECONDS) -> T:
    """Await FOLLOW (the run's follower); every EVERY seconds look for a slow host, say
    it, and with `recover` end the attempt on every host once it stayed slow."""

    async def check() -> None:
        try:
            beats = await read_beats(storage, job.run_id)
        except Exception:  # noqa: BLE001 - GCS away for a moment: look again next time
            return
        new, act = watch.update(slow_hosts(paces(beats)))
        for slow in new:
            notice(f"run {job.run_id}: {slow.describe()}")
            await _note(storage, job.run_id, slow)
        if act is not None:
            watch.ended_for = act
            notice(f"run {job.run_id}: host {act.host:04d} stayed slow for "
                   f"{watch.policy.after:.0f} s; checkpointing and ending the attempt to "
                   "make the slice again on other hardware (--on-slow-host recover)")
            job.end_reason = f"{act.describe()} (--on-slow-host recover)"
            with contextlib.suppress(Exception):  # the agents' own grace: time to checkpoint
                await job.channel.halt(job.run_id)

    return await follow_checking(follow, every, check)
