"""Budgets: a cost or time limit on a slice or a run, and what enforces it.

`podctl up --max-cost USD --max-hours H` writes the budget on the slice as labels
(GCP label values allow only lowercase letters, digits, `_` and `-`):

    podctl-max-cost=500_00        dollars_cents, for people and for `budget check`
    podctl-deadline=1767225600    epoch seconds: the sooner of the two limits, at the
                                  price known when the slice was asked for

A label enforces nothing by itself; a podctl process has to be watching:

- `podctl run ... [--max-hours H]` follows its run and acts at the sooner of the
  slice's deadline and its own H hours from the start;
- `podctl budget check` (run it from cron; podctl/steps/budget_check.py) acts on every
  podctl slice in the zone whose deadline has passed or whose cost so far has reached
  its max cost.

Acting is the same everywhere: the run is asked to checkpoint and stop (SIGTERM
through the run's channel, a halt), which the training template answers by saving a
checkpoint), podctl waits a bounded grace period for the hosts to end, then
deletes the slice and says so. A `budget check` that cannot reach the hosts over
SSH (another identity: its key is not on the slice) asks through GCS instead
(podctl/jobs/stop.py), with the same grace: deleting a running slice is always the
owner's stop first, never a kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from podctl.base.durations import parse_duration
from podctl.base.errors import BudgetExceededError, InvalidValueError
from podctl.base.numbers import plain_number
from podctl.base.vocabulary import LIVE_RUN_STATES
from podctl.cloud.provider import SliceProvider
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo
from podctl.cloud.up import UpRequest
from podctl.cloud.wait import WaitPolicy
from podctl.jobs import run_record
from podctl.jobs.job import Job
from podctl.jobs.run_files import close_record, list_runs
from podctl.jobs.stop import HostAccess, stop_runs
from podctl.money import cost

T = TypeVar("T")
Notice = Callable[[str], None]
MAX_COST_LABEL = "podctl-max-cost"
DEADLINE_LABEL = "podctl-deadline"
GRACE_SECONDS = 300.0  # a checkpoint of a large model can take minutes to write
POLL_SECONDS = 5.0  # the clock is read again at least this often while a run is followed


# ---- the labels -----------------------------------------------------------------------

def encode_usd(usd: float) -> str:
    """500 -> '500_00', 0.015 -> '0_015': a label value may not hold a '.'."""
    whole, _, fraction = f"{usd:.6f}".rstrip("0").partition(".")
    return f"{whole}_{fraction.ljust(2, '0')}"


def decode_usd(text: str) -> float | None:
    dollars, _, fraction = text.partition("_")
    if not dollars.isdigit() or (fraction and not fraction.isdigit()):
        return None
    return float(f"{dollars}.{fraction or 0}")


def parse_hours(text: str, option: str) -> float:
    """'3.5' (hours), or a duration like '90m', '6h', '1h30m' -> hours above zero."""
    value = text.strip().lower()
    hours = plain_number(value)  # ASCII digits, finite: 'nan' or 'inf' is no budget
    if hours is None:
        return parse_duration(value, option) / 3600
    if not hours > 0:
        raise InvalidValueError(f"{option} {text!r}: give hours above zero (e.g. 3.5) or a "
                                "duration (e.g. 90m, 6h).")
    return hours


def check_max_cost(usd: float | None) -> float | None:
    if usd is not None and not (math.isfinite(usd) and usd > 0):
        raise InvalidValueError(f"--max-cost {usd}: give US dollars above zero (e.g. 500).")
    return usd


def fmt_usd(usd: float) -> str:
    """$500 for a round budget, $500.50, $0.001 below a cent."""
    if usd == int(usd):
        return f"${usd:,.0f}"
    return f"${usd:,.2f}" if usd >= 0.01 else f"${usd:.2g}"


def budget_labels(*, now: float, usd_per_hour: float | None, max_cost: float | None,
                  max_hours: float | None, zone: str, generation: str) -> dict[str, str]:
    """The labels for a new slice; a --max-cost needs the slice's price."""
    check_max_cost(max_cost)
    if max_cost is None and max_hours is None:
        return {}
    limits = [max_hours] if max_hours is not None else []
    labels = {}
    if max_cost is not None:
        if usd_per_hour is None:
            raise InvalidValueError("--max-cost needs a price: "
                                    f"{cost.unknown_price_message(zone, generation)}.")
        limits.append(max_cost / usd_per_hour)
        labels[MAX_COST_LABEL] = encode_usd(max_cost)
    labels[DEADLINE_LABEL] = str(int(now + min(limits) * 3600))
    return labels


@dataclass(frozen=True)
class SliceBudget:
    deadline: float | None
    max_cost: float | None


def slice_budget(info: SliceInfo) -> SliceBudget | None:
    deadline_text = info.labels.get(DEADLINE_LABEL, "")
    deadline = float(deadline_text) if deadline_text.isdigit() else None
    max_cost = decode_usd(info.labels.get(MAX_COST_LABEL, ""))
    if deadline is None and max_cost is None:
        return None
    return SliceBudget(deadline, max_cost)


def slice_cost_now(info: SliceInfo, now: float, override: float | None = None) -> float | None:
    price = cost.chip_hour_price(info.zone, spot=info.tier == "spot", override=override,
                                 generation=cost.generation_of(info.accelerator_type))
    return cost.cost_so_far(info.chips, max(0.0, now - info.created), price)


def overdue(info: SliceInfo, now: float) -> str | None:
    """Why INFO's budget is reached, in words; None when it is not (or it has none)."""
    budget = slice_budget(info) if info.managed else None
    if budget is None:
        return None
    hours = max(0.0, now - info.created) / 3600
    spent = slice_cost_now(info, now)
    if budget.max_cost is not None and spent is not None and spent >= budget.max_cost:
        return f"${spent:,.2f} of {fmt_usd(budget.max_cost)} after {hours:.1f} h"
    if budget.deadline is not None and now >= budget.deadline:
        of = f" of {fmt_usd(budget.max_cost)}" if budget.max_cost is not None else ""
        money = f"${spent:,.2f}{of}, " if spent is not None else ""
        return f"{money}deadline passed after {hours:.1f} h"
    return None


async def delete_slice(api: SliceProvider, parent: str, info: SliceInfo,
                       policy: WaitPolicy = WaitPolicy()) -> SliceInfo:
    deleted = await api.delete(parent, info)
    await api.wait_deleted(parent, deleted.name, kind=deleted.kind, policy=policy)
    return deleted


# ---- while `podctl run` follows -------------------------------------------------------

async def _settled(task: asyncio.Future[Any], timeout: float | None) -> bool:
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return bool(done)


async def watch_budget(follow: Awaitable[T], *, api: SliceProvider, parent: str, job: Job, info: SliceInfo,
                       max_hours: float | None, notice: Notice,
                       grace_seconds: float = GRACE_SECONDS,
                       clock: Callable[[], float] = time.time,
                       policy: WaitPolicy = WaitPolicy()) -> T:
    """Await FOLLOW (the run's log follower); if the slice's deadline or the run's
    MAX_HOURS comes first, stop the run, wait for it up to GRACE_SECONDS, delete the
    slice and raise BudgetExceededError."""
    started = clock()
    budget = slice_budget(info)
    limits = {}
    skew = api.server_now() - time.time()  # the deadline is on the service's clock
    if budget and budget.deadline is not None:
        limits["slice"] = budget.deadline - skew
    if max_hours is not None:
        limits["run"] = started + max_hours * 3600
    task = asyncio.ensure_future(follow)
    if not limits:
        return await task
    which = min(limits, key=lambda k: limits[k])
    deadline = limits[which]
    try:
        while not task.done() and clock() < deadline:
            await _settled(task, min(POLL_SECONDS, max(0.0, deadline - clock())))
    except BaseException:  # Ctrl-C: the follower's own handler stops the run
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    if task.done():
        return task.result()
    now = clock()
    if which == "slice":
        why = overdue(info, max(now, deadline) + skew) or f"deadline passed after " \
              f"{(now + skew - info.created) / 3600:.1f} h"
    else:
        price = cost.chip_hour_price(info.zone, spot=info.tier == "spot",
                                     generation=cost.generation_of(info.accelerator_type))
        spent = cost.cost_so_far(info.chips, now - started, price)
        money = f", ${spent:,.2f}" if spent is not None else ""
        why = f"{(now - started) / 3600:.1f} h of --max-hours {max_hours:g}{money}"
    notice(f"budget reached ({why}): stopping run {job.run_id}, deleting slice {info.name}")

    with contextlib.suppress(Exception):  # a host that is gone has nothing to stop
        await job.channel.halt(job.run_id)
    if not await _settled(task, grace_seconds):
        notice(f"run {job.run_id} did not stop within {grace_seconds:.0f}s; deleting anyway")
        task.cancel()
    with contextlib.suppress(BaseException):
        await task
    with contextlib.suppress(Exception):
        await job.stop(by="budget")  # the record says stopped, by whom, with its end time
    await delete_slice(api, parent, info, policy)
    notice(f"deleted slice {info.name}")
    raise BudgetExceededError(f"budget reached ({why}): run {job.run_id} was stopped and slice "
                              f"{info.name} deleted.")


# ---- from cron: `podctl budget check` -------------------------------------------------

@dataclass(frozen=True)
class Reaped:
    info: SliceInfo
    reason: str
    deleted: bool
    runs_stopped: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.info.name, "reason": self.reason, "deleted": self.deleted,
                "runs_stopped": list(self.runs_stopped),
                "labels": {k: v for k, v in self.info.labels.items()
                           if k in (MAX_COST_LABEL, DEADLINE_LABEL)}}


async def stop_runs_on(storage: Storage, info: SliceInfo, access: HostAccess, *,
                       grace_seconds: float = GRACE_SECONDS,
                       clock: Callable[[], float] = time.monotonic,
                       notice: Notice = lambda text: None) -> list[str]:
    """Ask every run still going on INFO to checkpoint and stop, as its owner would
    (over SSH, and through GCS for hosts SSH cannot reach: a cron of another identity);
    wait for its hosts up to GRACE_SECONDS (plus the GCS way's delay); mark its record
    stopped. ACCESS: podctl.jobs.stop.HostAccess. Returns the run ids."""
    named = [r for r in await list_runs(storage)
             if r.slice_name == info.name and r.state in LIVE_RUN_STATES]
    going = [r for r in named if run_record.on_slice(r, info.name, info.created)]
    for record in named:  # left `running` by an earlier slice of this name: close, not wait
        if record not in going:
            await close_record(storage, record.run_id, "lost", keep_exit_code=True,
                               reason="slice deleted")
    if not going:
        return []
    return await stop_runs(storage, info, going, access, stopped_by="budget",
                           grace_seconds=grace_seconds, clock=clock, notice=notice)


def with_budget(request: UpRequest, zone: str, *, max_cost: float | None, max_hours: str | None,
                price: float | None = None, now: float | None = None) -> UpRequest:
    """An UpRequest with the budget labels added (no change without a budget)."""
    import dataclasses

    if max_cost is None and max_hours is None:
        return request
    spec = request.spec
    chip_price = cost.chip_hour_price(zone, spot=spec.tier == "spot", override=price,
                                      generation=spec.slice_type.generation.key)
    labels = budget_labels(
        now=time.time() if now is None else now, zone=zone, max_cost=max_cost,
        generation=spec.slice_type.generation.key,
        usd_per_hour=spec.multislice.chips * chip_price.usd_per_chip_hour if chip_price else None,
        max_hours=parse_hours(max_hours, "--max-hours") if max_hours is not None else None)
    return dataclasses.replace(request, labels={**request.labels, **labels})


def existing_budget_labels(info: SliceInfo, *, max_cost: float | None, max_hours: str | None,
                           price: float | None = None, now: float | None = None) -> dict[str, str]:
    """The budget labels for a slice that already exists: --max-hours counts from now,
    --max-cost from the slice's creation (`budget check` counts its cost so far)."""
    check_max_cost(max_cost)
    now = time.time() if now is None else now
    limits: list[float] = []
    labels: dict[str, str] = {}
    if max_hours is not None:
        limits.append(now + parse_hours(max_hours, "--max-hours") * 3600)
    if max_cost is not None:
        generation = cost.generation_of(info.accelerator_type)  # not v5p's price for every slice
        chip_price = cost.chip_hour_price(info.zone, spot=info.tier == "spot", override=price,
                                          generation=generation)
        if chip_price is None or not info.chips:
            raise InvalidValueError("--max-cost needs a price: "
                                    f"{cost.unknown_price_message(info.zone, generation)}.")
        usd_per_hour = info.chips * chip_price.usd_per_chip_hour
        limits.append(info.created + max_cost / usd_per_hour * 3600)
        labels[MAX_COST_LABEL] = encode_usd(max_cost)
    if limits:
        labels[DEADLINE_LABEL] = str(int(min(limits)))
    return labels


async def set_on_existing(api: SliceProvider, parent: str, info: SliceInfo, labels: dict[str, str],
                          policy: WaitPolicy = WaitPolicy(timeout=120)) -> SliceInfo:
    """Write budget LABELS on an existing slice (replacing an earlier budget), so that
    `budget check` and `run` enforce it; a queued resource's labels cannot be changed
    (the v2 API has no update for it): refused, with what to do instead."""
    if info.kind != "node" or any(n.queued_resource for n in info.nodes):
        raise InvalidValueError(
            f"{info.name} already exists as a queued resource, whose labels Cloud TPU cannot "
            f"change: no budget was set. Use `podctl run {info.name} ... --max-hours H`, or "
            f"`podctl down {info.name}` and `podctl up` again with the budget.")
    if not info.managed:
        raise InvalidValueError(f"{info.name} was not created by podctl: podctl does not put a "
                                "budget on it.")
    return await api.set_labels(parent, info, {**info.labels, **labels}, policy)


def describe_labels(labels: dict[str, str]) -> str:
    """'max $500, deadline 2026-12-03 18:00 UTC' for a note."""
    parts = []
    max_cost = decode_usd(labels.get(MAX_COST_LABEL, ""))
    if max_cost is not None:
        parts.append(f"max {fmt_usd(max_cost)}")
    if labels.get(DEADLINE_LABEL, "").isdigit():
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(int(labels[DEADLINE_LABEL])))
        parts.append(f"deadline {when}")
    return ", ".join(parts)


def run_hours(max_hours: str | None, detach: bool) -> float | None:
    """`podctl run --max-hours`, checked: only a run that podctl follows is watched."""
    if max_hours is None:
        return None
    if detach:
        raise InvalidValueError("--max-hours is enforced while `podctl run` follows the run: drop "
                                "--detach, or budget the slice (`podctl up --max-hours`) and run "
                                "`podctl budget check` from cron.")
    return parse_hours(max_hours, "--max-hours")
