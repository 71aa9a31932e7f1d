"""Recovery: a run cut short by its slice (preempted, suspended, a host lost) is
relaunched on a new slice of the same spec, from its latest complete checkpoint.

    start -> follow + watch the slice -> ended
        ok, or the script's own failure           -> done (a code error is not retried)
        infrastructure, attempts left              -> record it, delete what is left,
                                                      create again (backoff on stockout),
                                                      relaunch the same bundle --resume

The run keeps the first attempt's id: its record lists every attempt (run id, why it
ended, last step reached, step it resumed at, steps lost); later attempts are runs of
their own whose records name the first (`extra.parent`), so their logs and status
live where every run's do. A noticed preemption (SIGTERM first, as a spot TPU VM
gets) loses no steps when the script checkpoints on SIGTERM, as the template does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from podctl.base.errors import (
    NotFoundError,
    PodctlError,
    QuotaExceededError,
    SliceDeletedError,
    SliceLostError,
    StockoutError,
    TransientError,
    WaitTimeoutError,
)
from podctl.base.failures import (
    DELETED_STATES,
    EXIT_HOST_LOST,
    INFRA_EXIT_CODES,
    bad_host,
    dead_state,
    hardware_cause,
    infrastructure_reason,
    is_dead,
    unfit,
)
from podctl.base.vocabulary import SERVING_STATES
from podctl.cloud import placement, tombstones
from podctl.cloud.names import ELASTIC_OF_LABEL, ELASTIC_SLICES_LABEL
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo
from podctl.cloud.up import UpRequest
from podctl.jobs.job import Job, RunResult
from podctl.jobs.metrics import RunMetrics, read_metrics
from podctl.jobs.run_files import (
    RunRecord,
    StopRequest,
    close_record,
    load_record,
    read_stop_request,
    request_stop,
    save_record,
)
from podctl.policy import maintenance
from podctl.steps import elastic as elastic_steps
from podctl.steps import runs as run_steps
from podctl.steps import slices
from podctl.steps.elastic import ElasticPolicy, ElasticRun
from podctl.steps.runs import Notice, RunOptions
from podctl.steps.session import Session

DELETED_GRACE_SECONDS = 5.0  # for the statuses of hosts killed by a deletion to land

# A re-create that failed on the infrastructure, not on the request: tried again while
# recoveries are left (a SpecMismatch or a permission error is the user's to fix).
RECREATE_LOST = (SliceLostError, TransientError, WaitTimeoutError)



@dataclass(frozen=True)
class EndedByPodctl:
    """Why podctl itself ended an attempt (a stall, a slow host), and what next."""

    reason: str
    relaunch: bool  # recover it (--on-stall recover, --on-slow-host recover)
    flag: str  # the option that said so, for the message when it is not relaunched
    bad_worker: int | None = None  # the host to leave behind: make the slice again


# Why podctl itself ended the attempt RUN_ID; None: podctl did not
WhyEnded = Callable[[str], "EndedByPodctl | None"]
# Wraps each attempt's follow (a budget watch): (the follow, its Job, its slice) -> the follow
Wrap = Callable[[Awaitable[RunResult], Job, SliceInfo], Awaitable[RunResult]]


@dataclass
class Attempt:
    number: int
    run_id: str
    started: float
    ended: float | None = None
    exit_code: int | None = None
    reason: str | None = None  # why it ended, when the infrastructure ended it
    start_step: int | None = None  # the step it resumed from (0: fresh)
    last_step: int | None = None  # the last step it logged
    steps_lost: int | None = None  # steps done again by the next attempt
    failed_worker: int | None = None  # the host whose failure ended it
    hardware: str | None = None  # why that failure looks like the host's hardware
    slices: int | None = None  # the slices it ran on (an elastic run's may be fewer than the run's)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RecoveryPolicy:
    recoveries: int = 0  # --recover N: at most N relaunches
    retry_code_errors: bool = False
    watch_seconds: float = 10.0  # how often the slice's state is read while the run goes
    # After the slice is seen dead, how long its hosts may still take to end on their
    # own: a spot TPU VM's notice is 30 s, in which the template saves a checkpoint and
    # the agent reports; deleting the slice sooner would cut that save short.
    notice_seconds: float = 30.0
    backoff_initial: float = 5.0  # between creations refused for capacity or quota
    backoff_max: float = 120.0
    recreate_timeout: float = 6 * 3600.0  # give up making the slice again after this long
    elastic: ElasticPolicy | None = None  # --elastic: go on on the surviving slices (steps/elastic.py)


@dataclass
class RecoveredRun:
    run_id: str  # the first attempt's: the run's id
    exit_code: int
    attempts: list[Attempt] = field(default_factory=list)
    result: RunResult | None = None  # the last attempt's
    stopped: str | None = None  # why recovery stopped with recoveries left ("slice deleted")

    @property
    def recoveries(self) -> int:
        return recoveries(self.attempts)

    @property
    def steps_lost(self) -> int:
        return sum(a.steps_lost or 0 for a in self.attempts)


GROWN_BACK = "grown back to"  # an elastic run's attempt that podctl ended to grow back


def recoveries(attempts: list[Attempt]) -> int:
    """The relaunches after the infrastructure ended an attempt: an elastic run's
    grow-back (podctl ended the attempt itself, on purpose) is none."""
    return sum(1 for a in attempts[:-1] if not (a.reason or "").startswith(GROWN_BACK))


async def slice_state(session: Session, name: str) -> str:
    """The slice's state now, a node's dead state first; "GONE" when it no longer exists."""
    try:
        info = await session.api.describe(session.settings.parent, name)
    except NotFoundError:
        return "GONE"
    return dead_state(info) or info.state


async def _follow_watching(job: Job, session: Session, info: SliceInfo,
                           policy: RecoveryPolicy, wrap: Wrap | None) -> tuple[RunResult | None, str | None]:
    """Follow the run while reading the slice's state every WATCH_SECONDS -> (the
    RunResult or None, the dead state that cut it short or None)."""
    follow = job.follow()
    task = asyncio.ensure_future(wrap(follow, job, info) if wrap else follow)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=policy.watch_seconds)
            if done:
                result = task.result()
                if result.exit_code == 0:
                    return result, None
                # A noticed preemption ends the script (SIGTERM, exit 143) before the
                # slice's state is read here: read it now, to tell why.
                state = await slice_state(session, info.name)
                return result, state if is_dead(state) else None
            state = await slice_state(session, info.name)
            if is_dead(state):
                # Let a noticed preemption's last checkpoint and status land, then stop
                # reading; a deleted slice gives no notice, so it gets only a moment.
                grace = policy.notice_seconds if state not in DELETED_STATES else min(
                    policy.notice_seconds, DELETED_GRACE_SECONDS)
                done, _ = await asyncio.wait({task}, timeout=grace)
                if done:
                    return task.result(), state
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                return None, state
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise


def deleted_by_owner(session: Session, info: SliceInfo, state: str | None) -> bool:
    """A slice deleted, not preempted: `podctl down` left a tombstone for this very
    slice, or it went DELETING or GONE with no PREEMPTED or SUSPENDED state before."""
    if tombstones.deleted_by_owner(session.settings.state_dir, info):
        return True
    return state in DELETED_STATES


async def collected_state(storage: Storage, run_id: str, notice: Notice) -> str | None:
    """The dead state (PREEMPTED, ...) of the slice that `podctl gc` collected from
    under RUN_ID, as gc noted it in the run's record; None if gc did not collect it."""
    record = await load_record(storage, run_id)
    collected = record.extra.get("collected")
    state = collected.get("state") if isinstance(collected, dict) else None
    if not isinstance(state, str) or not is_dead(state) or state in DELETED_STATES:
        return None
    notice(f"slice {record.slice_name} was {state}, and `podctl gc` collected it meanwhile")
    return state


def _deleted_message(name: str, run_id: str) -> str:
    return (f"slice {name} was deleted (by `podctl down` or another delete, not a preemption): "
            f"not making it again; to go on, `podctl up` it and `podctl run {name} SCRIPT "
            f"--resume {run_id}`")


async def _clear(session: Session, name: str, notice: Notice) -> None:
    """Delete what is left of slice NAME (PREEMPTED, SUSPENDED, a lost re-create) and
    wait until it is gone, so that the name is free to be made again."""
    parent = session.settings.parent
    with contextlib.suppress(NotFoundError):
        current = await session.api.describe(parent, name)
        current = await session.api.owning_slice(parent, current)
        notice(f"deleting {current.name} ({current.state})")
        deleted = await session.api.delete(parent, current)
        await session.api.wait_deleted(parent, deleted.name, kind=deleted.kind)


async def _recreate(session: Session, info: SliceInfo, policy: RecoveryPolicy,
                    notice: Notice, run_id: str,
                    spend: Callable[[], bool] | None = None) -> SliceInfo:
    """Delete what is left of the slice, then create it again with the same spec and
    placement, waiting out stockouts and quota with capped exponential backoff. Any
    other infrastructure failure of the re-create (the new slice preempted while being
    made, the API failing after its retries, a wait cut short) costs one recovery:
    SPEND() takes one and says whether there was one left."""
    parent = session.settings.parent
    where: placement.Placement | None = None
    deadline = time.monotonic() + policy.recreate_timeout
    delay = policy.backoff_initial
    began = time.time()
    while True:
        try:
            if where is None:  # made again where it was: reservation, network, account, tags
                try:
                    current = await session.api.describe(parent, info.name)
                    where = await session.api.placement(parent, current)
                except NotFoundError:
                    where = placement.Placement()
            await _clear(session, info.name, notice)
            request = _recreate_request(session, info, where)
            notice(f"creating {info.name} again ({request.spec.describe()})")
            return (await slices.up(session, request)).info
        except SliceDeletedError as e:  # deleted by someone while being made: not ours to redo
            raise SliceDeletedError(_deleted_message(info.name, run_id)) from e
        except (StockoutError, QuotaExceededError) as e:
            if time.monotonic() + delay > deadline:
                raise WaitTimeoutError(f"{info.name} could not be created again within "
                                       f"{policy.recreate_timeout / 3600:.1f} h ({e}).") from e
            notice(f"no capacity for {info.name} yet ({e}); trying again in {delay:.0f}s")
        except RECREATE_LOST as e:  # preempted while creating, 503s, a wait cut short
            s = session.settings
            if tombstones.deleted_since(s.state_dir, s.project, s.zone, info.name, began):
                raise SliceDeletedError(_deleted_message(info.name, run_id)) from e
            if spend is None or not spend():
                raise
            notice(f"{info.name} was lost while being made again ({e}); trying again in "
                   f"{delay:.0f}s")
        await asyncio.sleep(delay)
        delay = min(policy.backoff_max, delay * 2)


def _recreate_request(session: Session, info: SliceInfo, where: placement.Placement) -> UpRequest:
    """INFO's spec as an `up` request. The user's own labels (budgets among them) go
    with it; podctl's own are made anew."""
    carried = {k: v for k, v in info.labels.items()
               if k not in ("podctl-managed", "podctl-owner", "podctl-created", "podctl-request",
                            ELASTIC_OF_LABEL, ELASTIC_SLICES_LABEL)}
    options = slices.SliceOptions(
        slice_type=info.accelerator_type, name=info.name, queued=info.kind == "queued-resource",
        spot=info.tier == "spot", guaranteed=info.tier == "guaranteed", num_slices=info.num_slices,
        runtime_version=info.runtime_version, labels=carried, placement=where,
        elastic=bool(info.members))  # one queued resource per slice again
    return slices.up_request(session.settings, options)


def account_steps_lost(attempts: list[Attempt]) -> None:
    """Steps an attempt's end cost: its last step less the step the next attempt that
    got going resumed at. Attempts that never said where they started are skipped over
    (preempted before their first step, they lost nothing and reveal nothing)."""
    pending: Attempt | None = None
    for attempt in attempts:
        if attempt.start_step is not None and pending is not None:
            pending.steps_lost = max(0, (pending.last_step or 0) - attempt.start_step)
            pending = None
        if attempt.last_step is not None:
            pending = attempt
        elif attempt is not attempts[-1] and attempt.steps_lost is None:
            attempt.steps_lost = 0


async def _save_attempts(session: Session, run_id: str, attempts: list[Attempt],
                         last: RunRecord | None = None) -> None:
    """The run's record (the first attempt's) lists every attempt; at the end it takes
    the last attempt's outcome."""
    record = await load_record(session.storage, run_id)
    record.extra["attempts"] = [a.to_json() for a in attempts]
    record.extra["recoveries"] = recoveries(attempts)
    record.extra["steps_lost"] = sum(a.steps_lost or 0 for a in attempts)
    if last is not None and len(attempts) > 1:
        record.state, record.exit_code = last.state, last.exit_code
        record.failed_host, record.ended = last.failed_host, last.ended
        for said in ("reason", "stopped_by", "peer_cause"):  # the run's end is its last attempt's
            record.extra.pop(said, None)
            if said in last.extra:
                record.extra[said] = last.extra[said]
    if last is not None:  # the follower is done: no attempt comes after this one
        record.extra["recovering"] = False
    await save_record(session.storage, record)


async def _end_stopped(session: Session, run_id: str, attempts: list[Attempt], stop: StopRequest,
                       code: int, result: RunResult | None, notice: Notice) -> RecoveredRun:
    """The owner stopped the run: it ends here, whatever ended its attempt."""
    attempt = attempts[-1]
    attempt.reason = f"stopped by {stop.by}"
    await _save_attempts(session, run_id, attempts, await load_record(session.storage, attempt.run_id))
    for ended in dict.fromkeys((run_id, attempt.run_id)):
        await close_record(session.storage, ended, "stopped", keep_exit_code=True,
                           even_if_ended=True, stopped_by=stop.by)
    notice(f"run {run_id} ended: stopped by {stop.by} (a stop is final: not recovered)")
    return RecoveredRun(run_id, code, attempts, result, stopped=attempt.reason)


async def _stop_if_asked(session: Session, run_id: str, job: Job) -> None:
    """An attempt started while its run was being stopped (the stop came while the
    slice was made again): it is stopped at once, as its run was."""
    stop = await read_stop_request(session.storage, run_id)
    if stop is None:
        return
    await request_stop(session.storage, [job.run_id], by=stop.by, grace_seconds=stop.grace_seconds)
    await job.stop(by=stop.by)


async def _fit_to_rerun(session: Session, name: str, notice: Notice) -> bool:
    """The slice is up (READY, ACTIVE) and no node reports unfit health: a relaunch may go
    where the attempt ran."""
    try:
        info = await session.api.describe(session.settings.parent, name)
        if info.api == "compute" and info.state == "REPAIRING":
            # a Compute Engine MIG recreating a VM it lost: the slice comes back whole
            notice(f"the MIG of {name} is recreating a VM; waiting for it")
            info = await session.api.wait_ready(session.settings.parent, name)
    except NotFoundError:
        return False
    except PodctlError as e:
        notice(f"{name} did not come back whole ({e})")
        return False
    if (dead_state(info) or info.state) not in SERVING_STATES:
        return False
    why = unfit(info)
    if why:
        notice(f"{why}: making {name} again on other hardware rather than relaunching on it")
    return why is None


async def _note_bad_host(session: Session, run_id: str, worker: int) -> None:
    """The run's record names the bad host, for `podctl runs --json` and a person later."""
    record = await load_record(session.storage, run_id)
    record.extra = {**record.extra, "bad_hosts": sorted({*record.extra.get("bad_hosts", []), worker})}
    await save_record(session.storage, record)


async def _metrics(session: Session, run_id: str) -> RunMetrics | None:
    try:
        return await read_metrics(session.storage, run_id)
    except Exception:  # metrics are an account of the run, never a reason to fail it
        return None


async def _start(session: Session, info: SliceInfo, options: RunOptions,
                 sink: Callable[[int, str], None], notice: Notice) -> tuple[Job | None, str, str | None]:
    """Start an attempt -> (the Job, or None if the slice died while it started; the
    run id; the slice's dead state, if it died). A start that failed on a live slice
    is the user's to see: raised."""
    job = await run_steps.new_job(session, info, options, sink=sink, notice=notice)
    try:
        return await run_steps.launch_job(job, notice=notice), job.run_id, None
    except PodctlError:
        state = await slice_state(session, info.name)
        if not is_dead(state):
            raise
        notice(f"the run could not start: slice {info.name} is {state}")
        return None, job.run_id, state


@dataclass(frozen=True)
class _Judged:
    """Why an attempt ended, as recovery acts on it."""

    reason: str | None  # None: nothing to recover (a success, or the script's own failure)
    suspect: int | None  # a worker to make the slice again without
    ours: EndedByPodctl | None  # podctl ended it (a stall, a slow host)
    plan: Any  # host maintenance it stopped for (policy/maintenance.py), or None


async def _judge(session: Session, attempts: list[Attempt], hardware_since: int, result: RunResult | None,
                 code: int, state: str | None, deleted: bool, policy: RecoveryPolicy,
                 why_ended: WhyEnded | None) -> _Judged:
    """Why the last of ATTEMPTS ended (and the worker to blame, noted on it)."""
    attempt = attempts[-1]
    failed = result.failed if result else None
    said = failed.explanation() if failed else None
    reason = None if code == 0 else infrastructure_reason(code, state, said)
    if failed is not None and state is None:  # a dead slice explains it: not the host
        attempt.failed_worker, attempt.hardware = failed.host, hardware_cause(code, said)
        if result is not None and result.cause is not None:  # a host that stopped answering
            reason, attempt.hardware = result.cause.describe(), "stopped answering"
    # Failures count against a worker only on the hardware they happened on.
    suspect = bad_host([(a.failed_worker, a.hardware) for a in attempts[hardware_since:]])
    if deleted:
        reason = "slice deleted"
    ours = why_ended(attempt.run_id) if why_ended and not deleted else None
    if ours is not None:  # podctl ended it (a stall): recovered only when asked to be
        reason = ours.reason
        if ours.bad_worker is not None:
            suspect = ours.bad_worker
    if reason is None and code != 0 and policy.retry_code_errors:
        reason = f"exit code {code} (retried: --retry-errors)"
    plan = None if deleted or code not in INFRA_EXIT_CODES else (
        await maintenance.stopped_for(session.storage, attempt.run_id))  # policy/maintenance.py
    reason = maintenance.reason(plan) if plan is not None else reason
    attempt.reason = reason
    return _Judged(reason, suspect, ours, plan)


async def _record_end(session: Session, attempt_id: str, result: RunResult | None, code: int,
                      state: str | None, deleted: bool, reason: str | None) -> Any:
    """The attempt's record; where the follower was cut off, saved as `lost` with why."""
    last_record = await load_record(session.storage, attempt_id)
    if result is None or deleted:
        last_record.state, last_record.exit_code, last_record.ended = "lost", code, time.time()
        lost_why = "slice deleted" if deleted else reason or (f"slice {state.lower()}" if state else None)
        if lost_why:
            last_record.extra = {**last_record.extra, "reason": lost_why}
        await save_record(session.storage, last_record)
    return last_record


def _say_the_end(notice: Notice, run_id: str, slice_name: str, reason: str | None, deleted: bool,
                 ours: EndedByPodctl | None, policy: RecoveryPolicy) -> None:
    if deleted:
        notice(f"run {run_id} ended: {_deleted_message(slice_name, run_id)}")
    elif ours is not None and not ours.relaunch:
        notice(f"run {run_id} ended: {reason} ({ours.flag})")
    elif reason is not None:
        notice(f"run {run_id} ended: {reason}; no recoveries left (--recover {policy.recoveries})")


async def _follow_attempt(session: Session, run_id: str, job: Job, number: int, info: SliceInfo,
                          policy: RecoveryPolicy, wrap: Wrap | None) -> tuple[Any, str | None]:
    """Follow one attempt to its end: (its result, the slice's state if that ended it)."""
    try:
        if number > 1:
            await _stop_if_asked(session, run_id, job)
        return await _follow_watching(job, session, info, policy, wrap)
    except BaseException:  # Ctrl-C or a budget: stop what runs, as a plain run does
        with contextlib.suppress(Exception):
            await job.stop()
        raise
    finally:
        await job.close()


async def run_recovering(session: Session, name: str, options: RunOptions,
                         policy: RecoveryPolicy, *, sink: Callable[[int, str], None],
                         notice: Notice, wrap: Wrap | None = None,
                         why_ended: WhyEnded | None = None) -> RecoveredRun:
    """Run OPTIONS on slice NAME; recover from the infrastructure up to
    POLICY.recoveries times. WRAP, if given, wraps each attempt's follow (budgets, the
    stall watch); WHY_ENDED says why podctl itself ended an attempt (a stall), and
    whether that is to be recovered."""
    info = await slices.ready_slice(session, name)
    full = info  # the run's whole slice: an elastic run's attempts may run on fewer of its slices
    elastic = ElasticRun(session, full, policy.elastic, notice)  # without --elastic: changes nothing
    options = replace(options, spec=replace(options.spec, env=elastic.options_env(options.spec.env)))
    if policy.recoveries:  # `podctl stop` between attempts: the run is still going
        options = replace(options, extra={**options.extra, "recovering": True})
    job, run_id, state = await _start(session, info, options, sink, notice)
    attempts = [Attempt(number=1, run_id=run_id, started=time.time(),
                        slices=len(elastic_steps.slice_ids(info)))]
    try:
        return await _attempts(session, options, policy, sink, notice, wrap, why_ended,
                               (info, full, elastic), (job, run_id, state), attempts)
    finally:  # ended, failed or stopped by a signal: a lost slice's request is for this run only
        await elastic.withdraw(f"run {run_id} ended")


async def _attempts(session: Session, options: RunOptions, policy: RecoveryPolicy,
                    sink: Callable[[int, str], None], notice: Notice, wrap: Wrap | None,
                    why_ended: WhyEnded | None, slices_: tuple[SliceInfo, SliceInfo, ElasticRun],
                    started: tuple[Job | None, str, str | None], attempts: list[Attempt]) -> RecoveredRun:
    """run_recovering's attempts, from the first one STARTED on INFO (of FULL)."""
    info, full, elastic = slices_
    job, run_id, state = started
    spent = 0  # recoveries used: relaunches, and re-creates lost on the way
    hardware_since = 0  # the first attempt on the slice's present hardware

    def spend() -> bool:
        nonlocal spent
        if spent >= policy.recoveries:
            return False
        spent += 1
        return True

    while True:
        attempt = attempts[-1]
        result = None
        if job is not None:
            result, state = await _follow_attempt(session, run_id, job, attempt.number, info, policy,
                                                  elastic.wrap(wrap))
        code = result.exit_code if result is not None else EXIT_HOST_LOST
        attempt.ended, attempt.exit_code = time.time(), code
        await _note_steps(session, attempt)
        account_steps_lost(attempts)
        stop = await read_stop_request(session.storage, run_id, attempt.run_id)
        if stop is not None:  # the owner's stop is final: never recovered
            return await _end_stopped(session, run_id, attempts, stop, code, result, notice)
        grown = await elastic.regrown(result is not None and code != 0)
        if grown is not None:  # podctl ended it to grow back: no failure, no recovery spent
            attempt.reason = f"{GROWN_BACK} {len(elastic_steps.slice_ids(grown))} of {full.num_slices} slices"
            info = grown
            job, state = await _next_attempt(session, run_id, options, info, attempts, sink, notice)
            continue
        if state in DELETED_STATES:
            state = await collected_state(session.storage, attempt.run_id, notice) or state
        deleted = code != 0 and deleted_by_owner(session, info, state)
        judged = await _judge(session, attempts, hardware_since, result, code, state, deleted,
                              policy, why_ended)
        reason, suspect, ours, plan = judged.reason, judged.suspect, judged.ours, judged.plan
        last_record = await _record_end(session, attempt.run_id, result, code, state, deleted, reason)
        if reason is None or deleted or (ours is not None and not ours.relaunch) or not spend():
            await _save_attempts(session, run_id, attempts, last_record)
            _say_the_end(notice, run_id, info.name, reason, deleted, ours, policy)
            return RecoveredRun(run_id, code, attempts, result, stopped=reason if deleted else None)
        where = f" at step {attempt.last_step}" if attempt.last_step is not None else ""
        notice(f"run {run_id} attempt {attempt.number} ended{where}: {reason}; recovering "
               f"(attempt {attempt.number + 1} of {policy.recoveries + 1})")
        await _save_attempts(session, run_id, attempts)
        shrunk = await elastic.after_loss(plan is not None or ours is not None, attempt.run_id)
        if shrunk is not None:  # go on on the survivors, from their local state
            info = shrunk
        elif plan is not None and await maintenance.wait_out(  # waited out: resume in place
                partial(session.api.describe, session.settings.parent, info.name), plan, notice):
            info = await slices.ready_slice(session, info.name)
        elif suspect is not None:
            if ours is not None and ours.bad_worker is not None:
                notice(f"worker {suspect} is a bad host ({reason}); making {info.name} again "
                       "on other hardware rather than relaunching on it")
            else:
                causes = "; ".join(a.hardware or "" for a in attempts[hardware_since:]
                                   if a.failed_worker == suspect)
                notice(f"worker {suspect} failed twice ({causes}): a bad host; making "
                       f"{info.name} again on other hardware rather than relaunching on it")
            await _note_bad_host(session, run_id, suspect)
            info = await _recreate(session, full, policy, notice, run_id, spend)
            hardware_since = len(attempts)
        elif plan is None and state is None and code != EXIT_HOST_LOST and await _fit_to_rerun(
                session, info.name, notice):
            # The processes were killed but every host is up: relaunch where it ran.
            notice(f"slice {info.name} is healthy; relaunching on it")
            info = await slices.ready_slice(session, info.name)
        else:
            info = await _recreate(session, full, policy, notice, run_id, spend)
            hardware_since = len(attempts)
        job, state = await _next_attempt(session, run_id, options, info, attempts, sink, notice)


async def _note_steps(session: Session, attempt: Attempt) -> None:
    """Where ATTEMPT started and the last step it logged, from its metrics."""
    measured = await _metrics(session, attempt.run_id)
    if measured is not None:
        # An attempt cut short before its script said where it started has no start
        # step (not 0: that would count every step before it as lost).
        attempt.start_step = measured.start_step if measured.configured else None
        attempt.last_step = measured.final_step


async def _next_attempt(session: Session, run_id: str, options: RunOptions, info: SliceInfo,
                        attempts: list[Attempt], sink: Callable[[int, str], None],
                        notice: Notice) -> tuple[Job | None, str | None]:
    """The next attempt of run RUN_ID on INFO (the first attempt's script and bundle,
    resumed from its checkpoints), listed in ATTEMPTS -> (its Job, the slice's dead state)."""
    await _save_attempts(session, run_id, attempts)
    first = await load_record(session.storage, run_id)
    relaunch = replace(options, spec=replace(options.spec, script=Path(first.script or "")),
                       bundle_hash=first.bundle_hash, resume=run_id)
    number = attempts[-1].number + 1
    job, attempt_id, state = await _start(
        session, info, replace(relaunch, extra={"parent": run_id, "attempt": number}), sink, notice)
    attempts.append(Attempt(number=number, run_id=attempt_id, started=time.time(),
                            slices=len(elastic_steps.slice_ids(info))))
    await _save_attempts(session, run_id, attempts)
    return job, state
