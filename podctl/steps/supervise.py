"""A run podctl watches to its end: start it, follow it, keep it within its budget
(`--max-hours`, the slice's own deadline) and, with `recover=N`, relaunch it from its
latest checkpoint when the infrastructure ends it. `podctl run` and `Slice.run(...,
recover=N)` in the Python API are this one step.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from podctl.base.errors import UsageError
from podctl.base.vocabulary import HEARTBEAT_SECONDS
from podctl.cloud.types import SliceInfo
from podctl.jobs.job import Job, RunResult
from podctl.jobs.run_files import load_record, save_record
from podctl.jobs.run_record import RunRecord
from podctl.money.budget import run_hours as run_hours  # --max-hours, checked: only a followed run is watched
from podctl.money.budget import watch_budget
from podctl.steps.elastic import ElasticPolicy
from podctl.steps.goodput import run_goodput
from podctl.steps.recovery import EndedByPodctl, RecoveredRun, RecoveryPolicy, run_recovering
from podctl.steps.runs import LineSink, Notice, RunOptions, follow_run, start_run
from podctl.steps.session import Session
from podctl.steps.slices import ready_slice
from podctl.steps.slow_hosts import SlowHostPolicy, SlowHostWatch, watch_slow_hosts
from podctl.steps.stall import StallPolicy, StallWatch, watch_stall


@dataclass(frozen=True)
class Supervision:
    """How podctl watches a run: recoveries, and the run's own budget."""

    recover: int = 0  # relaunch after the infrastructure ended it, up to N times
    retry_errors: bool = False  # with recover: also after the script's own non-zero exit
    max_hours: float | None = None  # stop the run (checkpoint first) and delete the slice after
    stall: StallPolicy = field(default_factory=StallPolicy)  # no step for too long: report, then wait/stop/recover
    slow: SlowHostPolicy = field(default_factory=SlowHostPolicy)  # a host slower than its peers
    slow_check_seconds: float = HEARTBEAT_SECONDS  # how often every host's pace is read
    elastic: ElasticPolicy | None = None  # go on on the surviving slices (with recover)

    def __post_init__(self) -> None:
        if self.stall.action == "recover" and not self.recover:
            raise UsageError("--on-stall recover relaunches the run: it goes with --recover N.")
        if self.elastic is not None and not self.recover:
            raise UsageError("--elastic goes with --recover N: it acts when the infrastructure "
                             "ends an attempt.")
        if self.slow.action == "recover" and not self.recover:
            raise UsageError("--on-slow-host recover makes the slice again and relaunches the "
                             "run: it goes with --recover N.")


@dataclass
class Supervised:
    run_id: str  # the run's id (a recovered run: its first attempt's)
    result: RunResult | None  # the last attempt's; None: its follower was cut off by its slice
    recovered: RecoveredRun | None = None  # with recover: every attempt
    record: RunRecord | None = None  # the run's record at its end (its end state and why)

    @property
    def exit_code(self) -> int:
        if self.recovered is not None:
            return self.recovered.exit_code
        assert self.result is not None
        return self.result.exit_code


async def run_supervised(session: Session, name: str, options: RunOptions, how: Supervision, *,
                         sink: LineSink, notice: Notice,
                         on_start: Callable[[Job], None] = lambda job: None) -> Supervised:
    """Run OPTIONS on slice NAME and follow it to its end, within HOW's budget and
    recoveries. ON_START is told of each attempt's Job as it starts. Ctrl-C (or a
    cancel) stops the run on every host before it propagates."""
    began = time.time()
    watches: dict[str, StallWatch] = {}  # attempt's run id -> its stall watch
    slow_watches: dict[str, SlowHostWatch] = {}  # attempt's run id -> its slow-host watch
    options, sink = _with_host_0(options, sink, watches)

    def budgeted(follow: Awaitable[RunResult], job: Job, info: SliceInfo) -> Awaitable[RunResult]:
        on_start(job)
        left = None if how.max_hours is None else max(0.0, how.max_hours - (time.time() - began) / 3600)
        watch = watches.setdefault(job.run_id, StallWatch(how.stall))
        slow = slow_watches.setdefault(job.run_id, SlowHostWatch(how.slow))
        paced = watch_slow_hosts(follow, storage=session.storage, job=job, watch=slow,
                                 notice=notice, every=how.slow_check_seconds)
        watched = watch_stall(paced, storage=session.storage, job=job, watch=watch, notice=notice)
        return watch_budget(watched, api=session.api, parent=session.settings.parent, job=job,
                            info=info, notice=notice, max_hours=left)

    def why_ended(run_id: str) -> EndedByPodctl | None:
        """An attempt podctl ended itself: for a stall, or for a slow host."""
        watch, slow = watches.get(run_id), slow_watches.get(run_id)
        if slow is not None and slow.ended_for is not None:
            return EndedByPodctl(slow.ended_for.describe(), True, "--on-slow-host recover",
                                 bad_worker=slow.ended_for.host)
        if watch is None or not watch.stalls or watch.policy.action == "wait":
            return None
        last = watch.stalls[-1]
        where = ("before its first step" if last["after_step"] is None
                 else f"after step {last['after_step']}")
        return EndedByPodctl(
            f"stalled {where} (no step for {last['quiet_seconds']:.0f} s)",
            watch.policy.action == "recover", f"--on-stall {watch.policy.action}")

    if how.recover:
        recovered = await run_recovering(
            session, name, options, RecoveryPolicy(recoveries=how.recover,
                                                   retry_code_errors=how.retry_errors,
                                                   elastic=how.elastic),
            sink=sink, notice=notice, wrap=budgeted, why_ended=why_ended)
        await note_goodput(session, recovered.run_id)
        return Supervised(recovered.run_id, recovered.result, recovered,
                          await _ended(session, recovered.run_id))
    info = await ready_slice(session, name)
    job = await start_run(session, info, options, sink=sink, notice=notice)
    try:
        result = await budgeted(follow_run(job), job, info)
    except BaseException:
        # A Ctrl-C that lands before the follower's task first ran cancels it before
        # its own handler could stop the hosts: stop them here.
        try:
            await job.stop()
        finally:
            await job.close()
        raise
    await note_goodput(session, job.run_id)
    return Supervised(job.run_id, result, record=await _ended(session, job.run_id))


async def _ended(session: Session, run_id: str) -> RunRecord | None:
    """The run's record as its end left it (None: GCS did not answer; the caller says less)."""
    try:
        return await load_record(session.storage, run_id)
    except Exception:  # noqa: BLE001 - the run is over whatever GCS says now
        return None


def _with_host_0(options: RunOptions, sink: LineSink,
                 watches: dict[str, StallWatch]) -> tuple[RunOptions, LineSink]:
    """The stall watch reads host 0's step lines: follow host 0 too when it is not one
    of the hosts shown, and show only those."""
    shown = options.hosts
    extra = shown != "all" and "0" not in [h.strip() for h in shown.split(",")]
    if extra:
        options = replace(options, hosts=f"{shown},0")

    def feeding(host: int, line: str) -> None:
        for watch in list(watches.values()):
            watch.saw(host, line)
        if not (extra and host == 0):
            sink(host, line)

    return options, feeding


async def note_goodput(session: Session, run_id: str) -> None:
    """Write the run's goodput into its record, for `podctl runs`. An account of the
    run, never a reason to fail it: best effort."""
    try:
        report = await run_goodput(session, run_id)
        record = await load_record(session.storage, run_id)
        record.extra = {**record.extra, "goodput": report.goodput}
        await save_record(session.storage, record)
    except Exception:  # noqa: BLE001 - a missing price, GCS gone for a moment, an old record
        pass
