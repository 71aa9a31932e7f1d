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
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Awaitable, Callable

from podctl import lifecycle, maintenance
from podctl.cloud.describe import describe
from podctl.cloud.types import SliceInfo
from podctl.errors import (
    NotFoundError, PodctlError, QuotaExceededError, SliceDeletedError, SliceLostError, StockoutError,
    TransientError, WaitTimeoutError,
)
from podctl.jobs.logs import EXIT_HOST_LOST

# Slice states in which the run's hosts are gone or going.
DEAD_STATES = {"PREEMPTED", "SUSPENDING", "SUSPENDED", "TERMINATED", "FAILED", "STOPPING",
               "STOPPED", "DELETING"}
# Of those, the states a deletion shows (a preemption shows PREEMPTED or SUSPENDED
# first, and keeps it until someone deletes the slice): seen without a preemption
# before them, the slice was deleted by its owner and is not made again.
DELETED_STATES = {"DELETING", "GONE"}
DELETED_GRACE_SECONDS = 5.0  # for the statuses of hosts killed by a deletion to land
# Exit codes that mean the machine, not the script: SIGTERM podctl did not send (a
# preemption or maintenance notice), SIGKILL (the VM going away), a host lost.
INFRA_EXIT_CODES = {143, 137, EXIT_HOST_LOST}

# A re-create that failed on the infrastructure, not on the request: tried again while
# recoveries are left (a SpecMismatch or a permission error is the user's to fix).
RECREATE_LOST = (SliceLostError, TransientError, WaitTimeoutError)

Wrap = Callable[[Awaitable[Any], Any, SliceInfo], Awaitable[Any]]


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


@dataclass
class RecoveredRun:
    run_id: str  # the first attempt's: the run's id
    exit_code: int
    attempts: list[Attempt] = field(default_factory=list)
    result: Any = None  # the last attempt's RunResult
    stopped: str | None = None  # why recovery stopped with recoveries left ("slice deleted")

    @property
    def recoveries(self) -> int:
        return len(self.attempts) - 1

    @property
    def steps_lost(self) -> int:
        return sum(a.steps_lost or 0 for a in self.attempts)


async def slice_state(session: lifecycle.Session, name: str) -> str:
    """The slice's state now; "GONE" when it no longer exists."""
    from podctl.cloud.describe import describe

    try:
        info = await describe(session.api, session.settings.parent, name)
    except NotFoundError:
        return "GONE"
    if any(n.state in DEAD_STATES for n in info.nodes):
        return next(n.state for n in info.nodes if n.state in DEAD_STATES)
    return info.state


async def _follow_watching(job: Any, session: lifecycle.Session, info: SliceInfo,
                           policy: RecoveryPolicy, wrap: Wrap | None) -> tuple[Any, str | None]:
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
                return result, state if state in DEAD_STATES or state == "GONE" else None
            state = await slice_state(session, info.name)
            if state in DEAD_STATES or state == "GONE":
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


def deleted_by_owner(session: lifecycle.Session, info: SliceInfo, state: str | None) -> bool:
    """A slice deleted, not preempted: `podctl down` left a tombstone for this very
    slice, or it went DELETING or GONE with no PREEMPTED or SUSPENDED state before."""
    from podctl import tombstones

    if tombstones.deleted_by_owner(session.settings.state_dir, info):
        return True
    return state in DELETED_STATES


def _deleted_message(name: str, run_id: str) -> str:
    return (f"slice {name} was deleted (by `podctl down` or another delete, not a preemption): "
            f"not making it again; to go on, `podctl up` it and `podctl run {name} SCRIPT "
            f"--resume {run_id}`")


def _infrastructure(exit_code: int | None, state: str | None, failed: Any) -> str | None:
    """Why the infrastructure, not the script, ended the attempt; None if it did not."""
    if state in DEAD_STATES or state == "GONE":
        return f"slice {state.lower()}"
    if exit_code == EXIT_HOST_LOST:
        return "host lost" + (f" ({failed.error})" if failed is not None and failed.error else "")
    if exit_code in INFRA_EXIT_CODES:
        return f"exit code {exit_code} (killed from outside the script)"
    return None


async def _clear(session: lifecycle.Session, name: str, notice: lifecycle.Notice) -> None:
    """Delete what is left of slice NAME (PREEMPTED, SUSPENDED, a lost re-create) and
    wait until it is gone, so that the name is free to be made again."""
    from podctl.cloud import describe, terminate
    from podctl.cloud.wait import wait_deleted

    parent = session.settings.parent
    with contextlib.suppress(NotFoundError):
        current = await describe.describe(session.api, parent, name)
        current = await terminate.owning_slice(session.api, parent, current)
        notice(f"deleting {current.name} ({current.state})")
        deleted = await terminate.delete(session.api, parent, current)
        await wait_deleted(session.api, parent, deleted.name, kind=deleted.kind)


async def _recreate(session: lifecycle.Session, info: SliceInfo, policy: RecoveryPolicy,
                    notice: lifecycle.Notice, run_id: str,
                    spend: Callable[[], bool] | None = None) -> SliceInfo:
    """Delete what is left of the slice, then create it again with the same spec and
    placement, waiting out stockouts and quota with capped exponential backoff. Any
    other infrastructure failure of the re-create (the new slice preempted while being
    made, the API failing after its retries, a wait cut short) costs one recovery:
    SPEND() takes one and says whether there was one left."""
    from podctl import tombstones
    from podctl.cloud import describe, placement

    parent = session.settings.parent
    where: placement.Placement | None = None
    deadline = time.monotonic() + policy.recreate_timeout
    delay = policy.backoff_initial
    began = time.time()
    while True:
        try:
            if where is None:  # made again where it was: reservation, network, account, tags
                try:
                    current = await describe.describe(session.api, parent, info.name)
                    where = await placement.read(session.api, parent, current)
                except NotFoundError:
                    where = placement.Placement()
            await _clear(session, info.name, notice)
            request = _recreate_request(session, info, where)
            notice(f"creating {info.name} again ({request.spec.describe()})")
            return (await lifecycle.up(session, request)).info
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


def _recreate_request(session: lifecycle.Session, info: SliceInfo, where: Any) -> Any:
    """INFO's spec as an `up` request. The user's own labels (budgets among them) go
    with it; podctl's own are made anew."""
    carried = {k: v for k, v in info.labels.items()
               if k not in ("podctl-managed", "podctl-owner", "podctl-created", "podctl-request")}
    options = lifecycle.SliceOptions(
        slice_type=info.accelerator_type, name=info.name, queued=info.kind == "queued-resource",
        spot=info.tier == "spot", guaranteed=info.tier == "guaranteed", num_slices=info.num_slices,
        runtime_version=info.runtime_version, labels=carried, placement=where)
    return lifecycle.up_request(session.settings, options)


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


async def _save_attempts(session: lifecycle.Session, run_id: str, attempts: list[Attempt],
                         last: Any = None) -> None:
    """The run's record (the first attempt's) lists every attempt; at the end it takes
    the last attempt's outcome."""
    from podctl.jobs.history import load_record, save_record

    record = await load_record(session.storage, run_id)
    record.extra["attempts"] = [a.to_json() for a in attempts]
    record.extra["recoveries"] = len(attempts) - 1
    record.extra["steps_lost"] = sum(a.steps_lost or 0 for a in attempts)
    if last is not None and len(attempts) > 1:
        record.state, record.exit_code = last.state, last.exit_code
        record.failed_host, record.ended = last.failed_host, last.ended
    await save_record(session.storage, record)


async def _metrics(session: lifecycle.Session, run_id: str) -> Any:
    from podctl.jobs.metrics import read_metrics

    try:
        return await read_metrics(session.storage, run_id)
    except Exception:  # metrics are an account of the run, never a reason to fail it
        return None


async def _start(session: lifecycle.Session, info: SliceInfo, options: lifecycle.RunOptions,
                 sink: Callable[[int, str], None], notice: lifecycle.Notice) -> tuple[Any, str, str | None]:
    """Start an attempt -> (the Job, or None if the slice died while it started; the
    run id; the slice's dead state, if it died). A start that failed on a live slice
    is the user's to see: raised."""
    try:
        job = await lifecycle.start_run(session, info, options, sink=sink, notice=notice)
        return job, job.run_id, None
    except PodctlError as e:
        state = await slice_state(session, info.name)
        if (state not in DEAD_STATES and state != "GONE") or not getattr(e, "run_id", None):
            raise
        notice(f"the run could not start: slice {info.name} is {state}")
        return None, e.run_id, state  # type: ignore[attr-defined]


async def run_recovering(session: lifecycle.Session, name: str, options: lifecycle.RunOptions,
                         policy: RecoveryPolicy, *, sink: Callable[[int, str], None],
                         notice: lifecycle.Notice, wrap: Wrap | None = None) -> RecoveredRun:
    """Run OPTIONS on slice NAME; recover from the infrastructure up to
    POLICY.recoveries times. WRAP, if given, wraps each attempt's follow (budgets)."""
    from podctl.jobs.history import load_record

    info = await lifecycle.ready_slice(session, name)
    job, run_id, state = await _start(session, info, options, sink, notice)
    attempts = [Attempt(number=1, run_id=run_id, started=time.time())]
    relaunch: lifecycle.RunOptions | None = None
    spent = 0  # recoveries used: relaunches, and re-creates lost on the way

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
            try:
                result, state = await _follow_watching(job, session, info, policy, wrap)
            except BaseException:  # Ctrl-C or a budget: stop what runs, as a plain run does
                with contextlib.suppress(Exception):
                    await job.stop()
                raise
            finally:
                await job.close()
        code = result.exit_code if result is not None else EXIT_HOST_LOST
        attempt.ended, attempt.exit_code = time.time(), code
        measured = await _metrics(session, attempt.run_id)
        if measured is not None:
            # An attempt cut short before its script said where it started has no start
            # step (not 0: that would count every step before it as lost).
            attempt.start_step = measured.start_step if measured.configured else None
            attempt.last_step = measured.final_step
        account_steps_lost(attempts)
        deleted = code != 0 and deleted_by_owner(session, info, state)
        reason = None if code == 0 else _infrastructure(code, state,
                                                        result.failed if result else None)
        if deleted:
            reason = "slice deleted"
        if reason is None and code != 0 and policy.retry_code_errors:
            reason = f"exit code {code} (retried: --retry-errors)"
        plan = None if deleted or code not in INFRA_EXIT_CODES else (
            await maintenance.stopped_for(session.storage, attempt.run_id))  # maintenance.py
        reason = maintenance.reason(plan) if plan is not None else reason
        attempt.reason = reason
        last_record = await load_record(session.storage, attempt.run_id)
        if result is None or deleted:  # the follower was cut off: say how the attempt ended
            last_record.state, last_record.exit_code, last_record.ended = "lost", code, time.time()
            if deleted:
                last_record.extra = {**last_record.extra, "reason": "slice deleted"}
            from podctl.jobs.history import save_record

            await save_record(session.storage, last_record)
        if reason is None or deleted or not spend():
            await _save_attempts(session, run_id, attempts, last_record)
            if deleted:
                notice(f"run {run_id} ended: {_deleted_message(info.name, run_id)}")
            elif reason is not None:
                notice(f"run {run_id} ended: {reason}; no recoveries left (--recover "
                       f"{policy.recoveries})")
            return RecoveredRun(run_id, code, attempts, result, stopped=reason if deleted else None)
        where = f" at step {attempt.last_step}" if attempt.last_step is not None else ""
        notice(f"run {run_id} attempt {attempt.number} ended{where}: {reason}; recovering "
               f"(attempt {attempt.number + 1} of {policy.recoveries + 1})")
        await _save_attempts(session, run_id, attempts)
        if plan is not None and await maintenance.wait_out(  # waited out: resume in place
                lambda: describe(session.api, session.settings.parent, info.name), plan, notice):
            info = await lifecycle.ready_slice(session, info.name)
        elif plan is None and state is None and code != EXIT_HOST_LOST and await slice_state(
                session, info.name) in ("READY", "ACTIVE"):
            # The processes were killed but every host is up: relaunch where it ran.
            notice(f"slice {info.name} is healthy; relaunching on it")
            info = await lifecycle.ready_slice(session, info.name)
        else:
            info = await _recreate(session, info, policy, notice, run_id, spend)
        if relaunch is None:
            first = await load_record(session.storage, run_id)
            relaunch = replace(options, script=type(options.script)(first.script or ""),
                               bundle_hash=first.bundle_hash, resume=run_id)
        number = attempt.number + 1
        job, attempt_id, state = await _start(
            session, info, replace(relaunch, extra={"parent": run_id, "attempt": number}), sink, notice)
        attempts.append(Attempt(number=number, run_id=attempt_id, started=time.time()))
        await _save_attempts(session, run_id, attempts)
