"""Where a run's chip-hours went: its slice's time from the run's start to its end,
split into buckets that add up to it, each in seconds, chip-hours and dollars.

    setup               podctl start to the script's start on host 0: bundle, the
                        hosts' Python environment, --setup
    startup             the script's start to its first step's end: imports, JAX's
                        distributed start, building the model, compiling the step
    checkpoint_restore  restoring a checkpoint before the first step (a --resume)
    productive          training steps (the first, compiling step excluded), less
    wasted              the steps done again after a recovery (steps lost x step time)
    checkpoint_save     what the step loop waited for while a checkpoint was written
    recovery            from an attempt's end (a preemption, a host lost) to the first
                        step after it: remaking the slice, relaunching, restoring, compiling
    idle                the rest: outside reported steps (evaluation, the last save,
                        exit) and podctl's own gaps

An elastic run (`--elastic`: attempts on fewer slices than the run's, steps/elastic.py)
has the elastic events' own buckets in place of `recovery` for them, as
ml-goodput-measurement 0.2 has slice-down, scale-up and reinitialisation:

    slice_lost          an attempt's end to the script's start on fewer slices (the
                        survivors stopped, relaunched)
    growing_back        a grow-back stop's end to the script's start on more slices
    reinitialization    after either: the script's start to its first step there
                        (distributed start, restore, compile at the new size)
    fewer_slices        the share of the steps run on fewer slices whose chips stood
                        idle (1 - slices/K of those steps' time): chip-hours the slices
                        missing from the run would have trained

Beside the buckets, the hosts whose own part of a step (building their input batch) was
an outlier against their peers', from each attempt's last heartbeats
(steps/slow_hosts.py): one slow host makes every host's step slow.

Nothing needs instrumenting by hand: podctl knows when it started each attempt and why
each ended (the run's record), each host's agent says when its phases began (its
heartbeats and status), and the template prints one JSON line per step. Another script
gets the same buckets by printing the same lines on process 0's stdout (docs/guides/cost.md:
"Goodput"); without them its running time counts as idle.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from podctl.base.errors import PodctlError
from podctl.jobs.metrics import parse_records
from podctl.jobs.run_files import load_record, read_host_lines, read_host_phases, read_record
from podctl.steps.run_cost import RunBill, run_cost
from podctl.steps.session import Session
from podctl.steps.slow_hosts import SlowHost, paces, slow_hosts
from podctl.steps.stall import read_beats

BUCKETS = ("setup", "startup", "checkpoint_restore", "productive", "checkpoint_save", "wasted",
           "recovery", "slice_lost", "growing_back", "reinitialization", "fewer_slices", "idle")


@dataclass(frozen=True)
class Bucket:
    name: str
    seconds: float
    chip_hours: float
    usd: float | None

    def to_json(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "chip_hours": round(self.chip_hours, 6),
                "usd": None if self.usd is None else round(self.usd, 6)}


@dataclass(frozen=True)
class Goodput:
    run_id: str
    total_seconds: float  # the run's billed slice time: the buckets add up to it
    chips: int
    usd_per_chip_hour: float | None
    buckets: tuple[Bucket, ...]
    attempts: int
    slow_hosts: tuple[tuple[str, SlowHost], ...] = ()  # (attempt's run id, the host)

    @property
    def goodput(self) -> float | None:
        """Productive time over the whole: the fraction of the chip-hours that trained."""
        if self.total_seconds <= 0:
            return None
        return self.bucket("productive").seconds / self.total_seconds

    def bucket(self, name: str) -> Bucket:
        return next(b for b in self.buckets if b.name == name)

    def to_json(self) -> dict[str, Any]:
        """`podctl goodput RUN_ID --json` (docs/guides/cost.md, "Goodput")."""
        return {"run_id": self.run_id, "total_seconds": round(self.total_seconds, 3),
                "chips": self.chips, "usd_per_chip_hour": self.usd_per_chip_hour,
                "goodput": None if self.goodput is None else round(self.goodput, 6),
                "attempts": self.attempts,
                "buckets": {b.name: b.to_json() for b in self.buckets},
                "slow_hosts": [{"attempt": run_id, **h.to_json()} for run_id, h in self.slow_hosts]}


@dataclass
class _Attempt:
    run_id: str
    started: float
    ended: float
    steps_lost: int
    records: list[dict[str, Any]]
    phases: dict[str, float]
    slices: int | None = None  # the slices it ran on (an elastic run's attempts: recorded)

    def steps(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == "step"]

    def first_step_end(self) -> float | None:
        timed = [r["t"] for r in self.steps() if isinstance(r.get("t"), (int, float))]
        return min(timed) if timed else None

    def step_seconds(self) -> list[float]:
        return [float(r["step_time_s"]) for r in self.steps()
                if not r.get("compile") and isinstance(r.get("step_time_s"), (int, float))]

    def sum_of(self, kind: str, field: str) -> float:
        return sum(float(r[field]) for r in self.records
                   if r["kind"] == kind and isinstance(r.get(field), (int, float)))


async def _attempts(session: Session, run_id: str, ended: float) -> list[_Attempt]:
    record = await load_record(session.storage, run_id)
    listed = record.extra.get("attempts") or [
        {"run_id": run_id, "started": record.created, "ended": ended, "steps_lost": 0}]
    attempts = []
    for number, a in enumerate(listed):
        lines = await read_host_lines(session.storage, a["run_id"], 0)
        started = float(a.get("started") or record.created)
        attempts.append(_Attempt(
            # the run's time begins with its record, before the bundle is uploaded
            run_id=a["run_id"], started=min(started, record.created) if number == 0 else started,
            ended=float(a.get("ended") or ended), steps_lost=int(a.get("steps_lost") or 0),
            records=parse_records(lines),
            phases=await read_host_phases(session.storage, a["run_id"], 0),
            slices=a.get("slices") if isinstance(a.get("slices"), int) else None))
    return attempts


def split(total: float, attempts: list[_Attempt]) -> dict[str, float]:
    """The buckets' seconds (see the module's docstring); they add up to TOTAL."""
    seconds = dict.fromkeys(BUCKETS, 0.0)
    previous_end: float | None = None
    full = max((a.slices for a in attempts if a.slices), default=None)
    for number, attempt in enumerate(attempts):
        first_step = attempt.first_step_end()
        script_start = attempt.phases.get("running")
        if previous_end is None:  # the first attempt: set-up and start-up are its own
            if script_start is not None:
                seconds["setup"] += max(0.0, script_start - attempt.started)
                if first_step is not None:
                    restore = attempt.sum_of("config", "restore_s")
                    seconds["checkpoint_restore"] += restore
                    seconds["startup"] += max(0.0, first_step - script_start - restore)
        else:
            event = _elastic_event(attempts[number - 1].slices, attempt.slices)
            if event is None:  # after a preemption: all of it until training goes on again
                seconds["recovery"] += max(0.0, (first_step or attempt.ended) - previous_end)
            else:
                began = min(script_start or attempt.ended, first_step or attempt.ended)
                seconds[event] += max(0.0, began - previous_end)
                seconds["reinitialization"] += max(0.0, (first_step or attempt.ended) - max(began, previous_end))
        steps = attempt.step_seconds()
        done = sum(steps)
        wasted = min(done, attempt.steps_lost * statistics.median(steps)) if steps else 0.0
        missing = 0.0 if not (full and attempt.slices) else 1 - attempt.slices / full
        seconds["fewer_slices"] += (done - wasted) * missing
        seconds["productive"] += (done - wasted) * (1 - missing)
        seconds["wasted"] += wasted
        seconds["checkpoint_save"] += attempt.sum_of("checkpoint", "save_s")
        previous_end = attempt.ended
    seconds["idle"] = max(0.0, total - sum(seconds.values()))
    return seconds


def _elastic_event(before: int | None, after: int | None) -> str | None:
    """The elastic bucket of the move from BEFORE slices to AFTER, or None (the same, or
    not recorded: a recovery)."""
    if before is None or after is None or before == after:
        return None
    return "slice_lost" if after < before else "growing_back"


async def _slow_hosts(session: Session, run_id: str) -> list[SlowHost]:
    """The slow hosts podctl named while it followed attempt RUN_ID (its record), else
    what the hosts' last heartbeats show (a detached run nobody followed)."""
    record = await read_record(session.storage, run_id)
    noted = (record.extra.get("slow_hosts") if record is not None else None) or []
    if noted:
        return [SlowHost(int(h["host"]), float(h["host_s"]), float(h["peers_s"]), float(h["step_s"]),
                         h.get("process")) for h in noted]
    return slow_hosts(paces(await read_beats(session.storage, run_id)))


async def run_goodput(session: Session, run_id: str, *, price: float | None = None,
                      bill: RunBill | None = None) -> Goodput:
    """RUN_ID's chip-hours by bucket; PRICE (USD per chip-hour) overrides the table."""
    bill = bill or await run_cost(session, run_id, price=price)
    ended = bill.ended or time.time()
    attempts = await _attempts(session, run_id, ended)
    total = bill.billed_seconds
    usd_per_chip_hour = bill.usd_per_hour / bill.chips if bill.usd_per_hour and bill.chips else None
    buckets = tuple(
        Bucket(name, s, s / 3600 * bill.chips,
               None if usd_per_chip_hour is None else s / 3600 * bill.chips * usd_per_chip_hour)
        for name, s in split(total, attempts).items())
    slow = [(a.run_id, h) for a in attempts for h in await _slow_hosts(session, a.run_id)]
    return Goodput(run_id, total, bill.chips, usd_per_chip_hour, buckets, len(attempts), tuple(slow))


async def goodput_buckets(session: Session, run_ids: list[str]) -> dict[str, dict[str, float]]:
    """{run_id: {bucket: seconds}} for `podctl plot`'s bars; a run whose account cannot
    be had (no price for its zone is fine; its record gone is not) is left out."""
    out = {}
    for run_id in run_ids:
        try:
            report = await run_goodput(session, run_id)
        except PodctlError:
            continue
        out[run_id] = {b.name: b.seconds for b in report.buckets}
    return out
