"""`podctl budget check` (run it from cron): every podctl slice in the zone whose budget
is reached has its runs stopped, then is deleted; budgeted slices that are dead
(PREEMPTED, FAILED, ...) are deleted unless a run still owns one.

A step above both money/budget.py (what a budget is, when it is reached) and policy/gc.py (which dead
slices may go): each of those stays one-way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from podctl.base.errors import PodctlError
from podctl.cloud.provider import SliceProvider
from podctl.cloud.types import SliceInfo
from podctl.cloud.wait import WaitPolicy
from podctl.money.budget import GRACE_SECONDS, Notice, Reaped, delete_slice, overdue, stop_runs_on
from podctl.policy import gc
from podctl.steps.session import Session

StopRuns = Callable[[SliceInfo], Awaitable[list[str]]]


async def reap(api: SliceProvider, parent: str, *, now: float | None = None, dry_run: bool = False,
               stop_runs: StopRuns | None = None, notice: Notice = lambda text: None,
               policy: WaitPolicy = WaitPolicy(), keep: Any = None) -> list[Reaped]:
    """Stop the runs on, then delete, every podctl slice in PARENT whose budget is reached;
    and delete the budgeted ones that are dead (PREEMPTED, FAILED, ...) unless KEEP
    (podctl.policy.gc.Keep) says a run still owns one."""
    reaped = []
    slices = await api.list_slices(parent)
    now = api.server_now() if now is None else now  # deadlines are on the service's clock
    for info in slices:
        reason = overdue(info, now)
        if reason is None or info.state == "DELETING":
            continue
        if dry_run:
            reaped.append(Reaped(info, reason, deleted=False))
            continue
        stopped: list[str] = []
        if stop_runs is not None and info.ready:
            try:
                stopped = await stop_runs(info)
            except PodctlError as e:  # the budget wins over a run that cannot be reached
                notice(f"could not stop the runs on {info.name} ({e}); deleting it anyway")
        notice(f"budget reached ({reason}): "
               + (f"stopped run {', '.join(stopped)}, " if stopped else "")
               + f"deleting slice {info.name}")
        await delete_slice(api, parent, info, policy)
        reaped.append(Reaped(info, reason, deleted=True, runs_stopped=tuple(stopped)))
    done = {r.info.name for r in reaped}
    return reaped + await gc.reap_budgeted(api, parent, [s for s in slices if s.name not in done],
                                           now=now, dry_run=dry_run, keep=keep, notice=notice,
                                           policy=policy)


async def check_budgets(session: Session, *, dry_run: bool = False,
                        grace_seconds: float = GRACE_SECONDS,
                        notice: Notice = lambda text: None) -> list[Reaped]:
    """`podctl budget check` in the session's zone: `reap`, the runs on a slice asked to
    checkpoint and stop (GRACE_SECONDS to do it) through the session's bucket, and a
    run still going there keeping a dead budgeted slice (no bucket: no run is known)."""
    async def stop_runs(info: SliceInfo) -> list[str]:
        if not session.settings.bucket:
            notice(f"no bucket (--bucket, PODCTL_BUCKET): runs on {info.name} not signalled")
            return []
        return await stop_runs_on(session.storage, info, session.host_access(info),
                                  grace_seconds=grace_seconds, notice=notice)

    keep = (gc.run_keeper(session.storage, clock=session.api.server_now)
            if session.settings.bucket else None)
    return await reap(session.api, session.settings.parent, dry_run=dry_run, stop_runs=stop_runs,
                      notice=notice, keep=keep)
