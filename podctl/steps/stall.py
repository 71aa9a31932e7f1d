"""A stalled run caught, with evidence: no step for longer than a threshold.

While podctl follows a run it reads host 0's step lines (the template prints one per
step; see docs/guides/cost.md, "Goodput"). When none has come for `after` seconds (by default
FACTOR x the median step time, at least MIN_SECONDS), or no first step has come for
`startup` seconds (by default `after`, else STARTUP_SECONDS: starting and the first
compile take their own time) since every host's script started (its agent's heartbeat says "running": the
environment build and `--setup` before it do not count), it says so on the console and in
the run's record, names the hosts that are behind or silent (each host's agent reports
the step its script last finished, the script's process state and its own heartbeat),
and has every host's agent capture its script's Python stacks into
gs://BUCKET/podctl/runs/RUN_ID/stacks/STAMP/. Then, per `action`:

    wait     keep watching (the default): a new step clears the stall
    stop     end the run on every host (a stalled run cannot checkpoint: SIGTERM, then
             SIGKILL after KILL_GRACE_SECONDS)
    recover  the same, then `--recover` relaunches it from its latest checkpoint,
             counted as a recovery
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from podctl.base.errors import UsageError
from podctl.base.vocabulary import HEARTBEAT_SECONDS
from podctl.cloud.storage import Storage, StorageError
from podctl.host import metric_line, run_layout
from podctl.jobs import run_files
from podctl.jobs.host_label import host_name
from podctl.jobs.job import Job
from podctl.jobs.peer_cause import NOT_ANSWERING, SILENT_BEAT_SECONDS

T = TypeVar("T")
ACTIONS = ("wait", "stop", "recover")
MIN_SECONDS = 300.0  # compile-free steps of a big model take seconds; a stall is minutes
# Without --stall-after: the script's start to its first step (JAX's start, a restore, the
# first compile of a big model) may take this long before it is a stall. docs/guides/recovery.md "A
# stalled run" and --stall-after's help state it.
STARTUP_SECONDS = 30 * 60.0
BEAT_READ_SECONDS = HEARTBEAT_SECONDS  # how often heartbeats are read for the scripts' start
FACTOR = 10.0
POLL_SECONDS = 2.0
KILL_GRACE_SECONDS = 20.0
STACKS_WAIT_SECONDS = 40.0  # for every host's stacks to land


@dataclass(frozen=True)
class StallPolicy:
    action: str = "wait"
    after: float | None = None  # seconds without a step; None: FACTOR x median, >= MIN_SECONDS
    min_seconds: float = MIN_SECONDS
    # seconds from the scripts' start to the first step; None: AFTER, else STARTUP_SECONDS
    startup: float | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UsageError(f"--on-stall {self.action!r}: use one of {', '.join(ACTIONS)}.")
        if self.after is not None and self.after <= 0:
            raise UsageError("--stall-after must be more than 0 seconds.")
        if self.startup is not None and self.startup <= 0:
            raise UsageError("--stall-startup must be more than 0 seconds.")

    def threshold(self, step_seconds: list[float]) -> float:
        if self.after is not None:
            return self.after
        median = statistics.median(step_seconds) if step_seconds else 0.0
        return max(self.min_seconds, FACTOR * median)

    def first_step_threshold(self) -> float:
        """Seconds from the scripts' start to the first step before it is a stall."""
        if self.startup is not None:
            return self.startup
        return self.after if self.after is not None else STARTUP_SECONDS


@dataclass
class StallWatch:
    """Fed host 0's lines as they arrive (`saw`); asked now and then (`stalled`)."""

    policy: StallPolicy
    clock: Callable[[], float] = time.time
    last_step: int | None = None
    last_step_at: float | None = None  # when podctl saw it
    # When podctl saw every host's script running (its clock, not the hosts'): the
    # first step is awaited from here; None until then (the environment being built).
    scripts_started_at: float | None = None
    beats_read_at: float = 0.0
    step_seconds: list[float] = field(default_factory=list)
    reported: bool = False  # this stall was reported; a new step re-arms the watch
    stalls: list[dict[str, Any]] = field(default_factory=list)

    def saw(self, host: int, line: str) -> None:
        record = metric_line.parse(line) if host == 0 else None
        if record is None or record["kind"] != "step":
            return
        self.last_step, self.last_step_at, self.reported = record["step"], self.clock(), False
        if not record.get("compile") and "step_time_s" in record:
            self.step_seconds = (self.step_seconds + [record["step_time_s"]])[-1000:]

    def current_threshold(self) -> float:
        if self.last_step_at is None:
            return self.policy.first_step_threshold()
        return self.policy.threshold(self.step_seconds)

    def stalled(self) -> float | None:
        """Seconds since the last step (before the first: since every host's script
        started), when that is past its threshold (and not yet reported); None otherwise."""
        since = self.last_step_at if self.last_step_at is not None else self.scripts_started_at
        if since is None or self.reported:
            return None
        quiet = self.clock() - since
        return quiet if quiet > self.current_threshold() else None

    def saw_beats(self, beats: dict[int, dict[str, Any]], num_hosts: int) -> None:
        """Heartbeats read: once every host's agent has started its script, the wait
        for the first step begins."""
        if self.scripts_started_at is None and len(beats) >= num_hosts and all(
                "running" in (beats.get(h, {}).get("phases") or {}) for h in range(num_hosts)):
            self.scripts_started_at = self.clock()


def name_hosts(beats: dict[int, dict[str, Any]], num_hosts: int, now: float) -> list[str]:
    """Which hosts are behind, stopped or silent, from their agents' heartbeats."""
    steps = {h: (b.get("progress") or {}).get("step") for h, b in beats.items()}

    def name(h: int) -> str:
        process = (beats.get(h) or {}).get("process_index")
        return host_name(h, process if isinstance(process, int) else None)

    known = [s for s in steps.values() if isinstance(s, int)]
    said = []
    if known and min(known) < max(known):
        top = max(known)
        behind = sorted(h for h, s in steps.items() if isinstance(s, int) and s < top)
        said.append("; ".join(f"{name(h)} is at step {steps[h]:,}" for h in behind)
                    + f"; the others at {top:,}")
    for h in range(num_hosts):
        beat = beats.get(h)
        if beat is None or now - float(beat.get("time", 0)) > SILENT_BEAT_SECONDS:
            said.append(f"{name(h)} is silent (no heartbeat"
                        + (f" for {now - float(beat.get('time', 0)):.0f} s)" if beat else ")"))
            continue
        state = (beat.get("process") or {}).get("state")
        if state in NOT_ANSWERING:
            said.append(f"{name(h)}'s script is {NOT_ANSWERING[state]}")
    return said


read_beats = run_files.read_beats  # every host's last heartbeat (goodput, slow hosts read it too)


async def report(storage: Storage, job: Job, watch: StallWatch, quiet: float,
                 notice: Callable[[str], None]) -> dict[str, Any]:
    """Say it, name the hosts, capture every host's stacks, note it in the record."""
    run_id, num_hosts = job.run_id, len(job.targets)
    threshold = watch.current_threshold()
    if watch.last_step_at is None:
        notice(f"run {run_id} stalled: no first step {quiet:.0f} s after its script started "
               f"on every host (threshold {threshold:.0f} s)")
    else:
        notice(f"run {run_id} stalled: no step for {quiet:.0f} s after step {watch.last_step} "
               f"(threshold {threshold:.0f} s)")
    names = name_hosts(await read_beats(storage, run_id), num_hosts, time.time())
    for said in names:
        notice(f"run {run_id}: {said}")
    began = time.time()
    with contextlib.suppress(Exception):  # a host that is gone has no stacks to give
        await job.channel.stacks(run_id)
    prefix = run_layout.stacks_prefix(run_id)
    got: set[int] = set()
    while time.time() - began < STACKS_WAIT_SECONDS and len(got) < num_hosts:
        await asyncio.sleep(POLL_SECONDS)
        with contextlib.suppress(StorageError):
            got = {run_layout.host_of(o.name) for o in await storage.list(prefix)
                   if o.updated >= began - 5}
    where = f"gs://{storage.bucket_name}/{prefix}"
    notice(f"run {run_id}: stacks of {len(got)} of {num_hosts} hosts in {where}"
           + ("" if len(got) == num_hosts else
              f" (none from {', '.join(f'{h:04d}' for h in range(num_hosts) if h not in got)})"))
    stall = {"at": time.time(), "after_step": watch.last_step, "quiet_seconds": round(quiet, 1),
             "hosts": names, "stacks": where, "action": watch.policy.action}
    watch.stalls.append(stall)
    with contextlib.suppress(Exception):
        record = await run_files.load_record(storage, run_id)
        record.extra = {**record.extra, "stalls": [*record.extra.get("stalls", []), stall]}
        await run_files.save_record(storage, record)
    return stall


async def follow_checking(follow: Awaitable[T], every: float,
                          check: Callable[[], Awaitable[None]]) -> T:
    """Await FOLLOW (the run's follower), calling CHECK every EVERY seconds while it
    goes (the stall watch, the slow-host watch); FOLLOW is cancelled if this is."""
    task = asyncio.ensure_future(follow)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            await check()
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise


async def watch_stall(follow: Awaitable[T], *, storage: Storage, job: Job, watch: StallWatch,
                      notice: Callable[[str], None]) -> T:
    """Await FOLLOW (the run's follower, whose sink feeds WATCH); on a stall report it,
    then wait, or end the run (stop, recover: the follower then returns its end)."""

    async def check() -> None:
        if watch.scripts_started_at is None and time.time() - watch.beats_read_at >= BEAT_READ_SECONDS:
            watch.beats_read_at = time.time()
            with contextlib.suppress(StorageError):
                watch.saw_beats(await read_beats(storage, job.run_id), len(job.targets))
        quiet = watch.stalled()
        if quiet is None:
            return
        watch.reported = True
        await report(storage, job, watch, quiet, notice)
        if watch.policy.action != "wait":
            notice(f"run {job.run_id}: ending it on every host (--on-stall {watch.policy.action})")
            where = ("before its first step" if watch.last_step is None
                     else f"after step {watch.last_step}")
            job.end_reason = (f"stalled {where} (no step for {quiet:.0f} s; "
                              f"--on-stall {watch.policy.action})")
            with contextlib.suppress(Exception):
                await job.channel.halt(job.run_id, grace_seconds=KILL_GRACE_SECONDS)

    return await follow_checking(follow, POLL_SECONDS, check)
