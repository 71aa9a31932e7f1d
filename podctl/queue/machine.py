"""One entry, one step: the queue's state machine.

    pending ──(due: intent, then create)──> provisioning ──(READY)──> starting
       ^  ^                                    │    │                    │
       │  └──── stockout / quota: backoff ─────┘    │         (intent, then start
       │                                            │          detached on the hosts)
       └──── infrastructure lost (PREEMPTED, FAILED,  │                    v
             SUSPENDED, expired), attempts left ─────┴────────────── running
                                                                         │
          succeeded (every host exit 0) / failed (a script's own exit, a limit,
          no attempts left) / cancelled  ── every one deletes its slice

Every side effect comes after its intent is in the database (state, slice name,
run id: all deterministic), and every step starts from what the world shows, so a
tick killed anywhere leaves a state that the next tick finishes: a slice that was
asked for is found by name and adopted, a run that was started is found in GCS,
and the hosts refuse to start a fixed run id twice. Each attempt's slice is
deleted when the attempt ends; `cleanup` retries that until the world shows it gone.
"""

from __future__ import annotations

import random
from typing import Any

from podctl.base.errors import (
    AlreadyExistsError,
    CloudError,
    ConfigError,
    JobError,
    PermissionDeniedError,
    PodctlError,
    QuotaExceededError,
    StockoutError,
    StorageError,
    StoragePermissionError,
    TransientError,
)
from podctl.base.failures import dead_state, infrastructure_reason
from podctl.queue import elastic_entry, entry_names, execution, provision
from podctl.queue.cloud_view import World, lost_reason
from podctl.queue.context import TickContext
from podctl.queue.entry import Entry
from podctl.queue.interface import QueueStore
from podctl.queue.provision import parent_of
from podctl.steps import SliceInfo, slice_hourly_cost

BACKOFF_BASE = 60.0  # seconds after the first stockout; doubles, capped, with 10 % jitter
BACKOFF_MAX = 3600.0
# A preempted run's time to checkpoint and exit after its SIGTERM, as `budget`'s grace:
# past it the attempt ends all the same (its slice's deletion stops what is left).
PREEMPT_GRACE = 300.0
START_TRIES = 3  # a slice whose hosts refuse the run this many ticks in a row is given up


def backoff_delay(count: int) -> float:
    doubled: float = 2 ** max(0, count - 1)  # int ** int is typed Any (a negative power is a float)
    return min(BACKOFF_BASE * doubled, BACKOFF_MAX) * (1 + 0.1 * random.random())


def needs_cleanup(e: Entry) -> bool:
    """An ended attempt whose slice is not yet seen gone."""
    return any(a.get("outcome") and not a.get("cleaned") for a in e.attempts)


def hourly_cost(entry: Entry) -> float | None:
    """The entry's slices' price per hour (K of them: --num-slices); None without a price
    (max_cost is then not enforced: `queue add` refuses a --max-cost it cannot price)."""
    try:
        rate = slice_hourly_cost(entry.accelerator_type, entry.zone, spot=entry.tier == "spot")
    except PodctlError:
        return None
    return None if rate is None else rate * entry.num_slices


class Machine:
    def __init__(self, ctx: TickContext, store: QueueStore, world: World):
        self.ctx, self.store, self.world, self.log = ctx, store, world, ctx.log
        self.changed = 0  # entries that changed state in this pass

    # ---- bookkeeping ------------------------------------------------------------

    def move(self, e: Entry, to: str, reason: str | None = None, **changes: Any) -> bool:
        """Write the transition (only if no other process moved the entry first)."""
        was = e.state
        if not self.store.update(e, expect_state=was, state=to, **changes):
            self.log.info("entry_moved_elsewhere", entry=e.id, expected=was)
            return False
        self.changed += 1
        self.log.info("transition", entry=e.id, name=e.name, **{"from": was, "to": to},
                      attempt=e.attempt, slice=e.slice_name, run_id=e.run_id,
                      **({"reason": reason} if reason else {}))
        return True

    def cost(self, e: Entry) -> float | None:
        rate = hourly_cost(e)
        if rate is None:
            return None
        now = self.ctx.now()
        hours = sum(((a.get("ended") or now) - a["ready_at"]) / 3600
                    for a in e.attempts if a.get("ready_at"))
        cost: float = round(rate * hours, 4)
        return cost

    def end_attempt(self, e: Entry, outcome: str, error: str | None = None) -> list[dict[str, Any]]:
        attempts = [dict(a) for a in e.attempts]
        if attempts and attempts[-1]["attempt"] == e.attempt and not attempts[-1].get("outcome"):
            attempts[-1].update(outcome=outcome, ended=self.ctx.now(), error=error)
        return attempts

    # ---- one step ---------------------------------------------------------------

    async def step(self, e: Entry) -> None:
        if e.terminal:
            return
        parent = parent_of(e)
        if e.state == "pending":
            if e.next_try_at <= self.ctx.now():
                await self.provision(e)
            return
        if not self.world.seen(parent):
            return
        info = self.world.get(parent, e.slice_name)
        if info is not None and not entry_names.is_ours(info.labels, self.store.token, e.id):
            attempts = self.end_attempt(e, "failed", "name taken")
            attempts[-1]["cleaned"] = True  # not ours: never delete it
            self.move(e, "failed", f"a slice named {info.name} exists that this queue did not create",
                      attempts=attempts, ended=self.ctx.now(),
                      last_error=f"slice name {info.name} is taken by a slice this queue did not create")
            return
        if e.state == "provisioning":
            await self.provisioning(e, info)
        elif e.elastic and info is not None and info.members:  # a lost slice is lost alone
            await elastic_entry.step(self, e, info)
        elif info is None or lost_reason(info):
            if e.state == "running" and await self.stopped_by_owner(e, info, None):
                return
            await self.lost(e, info, (lost_reason(info) if info else None) or f"{e.slice_name} disappeared")
        elif e.state == "starting":
            await self.start(e, info)
        elif e.state == "running":
            await self.watch(e, info)

    async def provision(self, e: Entry) -> None:
        attempt = max(1, e.attempt)
        name = entry_names.slice_name(self.store.token, e.id, attempt)
        attempts = [dict(a) for a in e.attempts]
        if not attempts or attempts[-1]["attempt"] != attempt:
            attempts.append({"attempt": attempt, "slice": name, "run_id": None,
                             "requested": self.ctx.now()})
        if e.state != "provisioning" and not self.move(
                e, "provisioning", attempt=attempt, slice_name=name, operation=None,
                attempts=attempts):
            return
        self.ctx.phase("provisioning-intent")
        try:
            operation = await provision.ask(self.ctx.session_for(e), e, self.store.token)
        except AlreadyExistsError:
            self.log.info("slice_adopted", entry=e.id, slice=name)  # the next tick looks at it
            return
        except (StockoutError, QuotaExceededError, TransientError) as err:
            await self.back_off(e, str(err))
            return
        except CloudError as err:
            attempts = self.end_attempt(e, "failed", str(err))
            self.move(e, "failed", str(err), attempts=attempts, ended=self.ctx.now(), last_error=str(err))
            return
        if operation:
            self.store.update(e, operation=operation)
        self.ctx.phase("provisioning-sent")
        self.log.info("slice_requested", entry=e.id, slice=name, kind="queued-resource"
                      if e.queued else "node")

    async def back_off(self, e: Entry, why: str) -> None:
        count = e.backoff + 1
        delay = backoff_delay(count)
        self.move(e, "pending", why, backoff=count, next_try_at=self.ctx.now() + delay,
                  last_error=why, operation=None)
        self.log.info("backoff", entry=e.id, seconds=round(delay), tries=count)

    async def provisioning(self, e: Entry, info: SliceInfo | None) -> None:
        if info is None:
            outcome = (await provision.creation_outcome(self.ctx.session_for(e), e.operation)
                       if e.operation else None)
            if outcome is None:  # never asked for (a tick died first), or forgotten: ask
                await self.provision(e)
            elif not outcome.done:
                return
            elif outcome.stockout:
                await self.back_off(e, f"stockout: no {e.accelerator_type} capacity in {e.zone}")
            else:
                await self.lost(e, None, f"creating {e.slice_name} failed ({outcome.error or 'it vanished'})")
            return
        reason = lost_reason(info)
        if reason:
            await self.lost(e, info, reason)
        elif info.ready:
            await self.start(e, info)
        else:
            current = e.current()
            if current is not None and current.get("slice_state") != info.state:
                attempts = [dict(a) for a in e.attempts]
                attempts[-1]["slice_state"] = info.state  # e.g. WAITING_FOR_RESOURCES, for `ls`
                self.store.update(e, attempts=attempts)
                self.log.info("slice_state", entry=e.id, slice=info.name, state=info.state)

    async def start(self, e: Entry, info: SliceInfo) -> None:
        if e.state == "provisioning":
            run_id = entry_names.run_id(self.store.token, e.id, e.attempt, e.created)
            attempts = [dict(a) for a in e.attempts]
            attempts[-1].update(run_id=run_id, ready_at=self.ctx.now(), slice_state=info.state)
            if not self.move(e, "starting", run_id=run_id, attempts=attempts, backoff=0,
                             last_error=None):
                return
            self.ctx.phase("starting-intent")
        try:
            started = await execution.start(self.ctx, e, info)
        except StoragePermissionError as err:  # the nodes' identity: every attempt would fail alike
            # its slice is deleted as the entry ends: the line must not say it is still up
            await self.finish(e, info, "failed", f"the run cannot start: {err.without_slice}")
            return
        except (PermissionDeniedError, ConfigError) as err:
            # OS Login refused podctl's key, or cannot tell the account: so would every
            # attempt, and a tick that raised would stop every other entry's pass with it
            await self.finish(e, info, "failed", f"the run cannot start: {err}")
            return
        except (JobError, StorageError, CloudError) as err:  # CloudError: the OS Login API, for a moment
            tries = int((e.current() or {}).get("start_failures", 0)) + 1
            if tries >= START_TRIES:
                await self.lost(e, info, f"the run would not start: {err}")
                return
            attempts = [dict(a) for a in e.attempts]
            attempts[-1]["start_failures"] = tries
            self.store.update(e, attempts=attempts, last_error=str(err))
            self.log.warning("start_failed", entry=e.id, run_id=e.run_id, error=str(err), tries=tries)
            return
        self.ctx.phase("starting-sent")
        self.move(e, "running", None if started else "adopted a run started earlier",
                  started=self.ctx.now())

    async def stopped_by_owner(self, e: Entry, info: SliceInfo | None, exit_code: int | None) -> bool:
        """The run's owner stopped it (`podctl stop`, `Run.stop()`): the entry ends as
        cancelled, never retried (a stop is final). Read only when the run has ended or
        is lost, so a tick costs no more while runs go."""
        session = self.ctx.session_for(e)
        stop = await execution.stop_request(session, e)
        if stop is None:
            return False
        why = f"stopped by `{stop.by}`"
        await execution.close_record(session, e, "stopped", exit_code, why)
        await self.finish(e, info, "cancelled", why, exit_code=exit_code)
        return True

    async def watch(self, e: Entry, info: SliceInfo) -> None:
        session = self.ctx.session_for(e)
        state = await execution.read(session, e, len(info.hosts))
        if (e.current() or {}).get("preempting"):
            await self.preempting(e, info, state)
            return
        if ((state.done and state.exit_code) or state.lost) and await self.stopped_by_owner(
                e, info, state.exit_code):
            return
        infra = None
        if state.done and state.exit_code and not state.failed_stopped:
            infra = state.cause or infrastructure_reason(state.exit_code, dead_state(info),
                                                         state.failed_error)
        if infra is not None:  # the machine ended it, not the script: as --recover would
            await execution.close_record(session, e, "lost", state.exit_code, infra)
            await self.lost(e, info, infra if state.cause else f"host {state.failed_host:04d}: {infra}")
            return
        if state.done:
            outcome = "succeeded" if state.exit_code == 0 else "failed"
            why = None if outcome == "succeeded" else f"host {state.failed_host:04d} exited {state.exit_code}"
            await execution.close_record(session, e, outcome, state.exit_code, why)
            await self.finish(e, info, outcome, why, exit_code=state.exit_code, stop=outcome == "failed")
            return
        if state.lost:
            await self.lost(e, info, state.lost)
            return
        now = self.ctx.now()
        if e.max_hours is not None and e.started and now - e.started > e.max_hours * 3600:
            await self.finish(e, info, "failed", f"ran past --max-hours {e.max_hours:g}", stop=True)
            return
        cost = self.cost(e)
        if cost is not None and e.max_cost is not None and cost > e.max_cost:
            await self.finish(e, info, "failed", f"cost ${cost:.2f} passed --max-cost {e.max_cost:g}",
                              stop=True)
        elif cost is not None and cost != e.cost:
            self.store.update(e, cost=cost)

    # ---- preemption (shares.py chooses; off unless [queue] preempt = true) --------------

    async def preempt(self, e: Entry, info: SliceInfo, for_entry: Entry) -> None:
        """Begin preempting running E for FOR_ENTRY: the intent first, then the SIGTERM
        that makes it checkpoint; `preempting` ends it on a later pass."""
        attempts = [dict(a) for a in e.attempts]
        attempts[-1].update(preempting=self.ctx.now(), preempted_for=for_entry.id)
        if not self.store.update(e, expect_state="running", attempts=attempts):
            return
        self.log.info("preempting", entry=e.id, run_id=e.run_id, priority=e.priority,
                      for_entry=for_entry.id, for_priority=for_entry.priority)
        self.ctx.phase("preempting-intent")
        await self.signal_checkpoint(e, info)

    async def signal_checkpoint(self, e: Entry, info: SliceInfo) -> None:
        try:
            await execution.ask_to_checkpoint(self.ctx, e, info)
        except (JobError, CloudError, PermissionDeniedError) as err:  # next pass tries again
            self.log.warning("preempt_signal_failed", entry=e.id, run_id=e.run_id, error=str(err))
            return
        attempts = [dict(a) for a in e.attempts]
        attempts[-1]["signalled"] = True
        self.store.update(e, expect_state="running", attempts=attempts)

    async def preempting(self, e: Entry, info: SliceInfo, state: Any) -> None:
        """E was asked to checkpoint: once its hosts have ended (or the grace is over),
        the attempt ends `preempted` and E goes back to pending at its place (its id and
        priority), its next attempt resuming from its checkpoints. A preemption never
        uses up one of E's --max-attempts."""
        current = e.current() or {}
        if not current.get("signalled"):  # a tick died between the intent and the signal
            await self.signal_checkpoint(e, info)
        over = self.ctx.now() - float(current["preempting"]) > PREEMPT_GRACE
        if not (state.done or state.lost or over):
            return
        why = f"preempted for entry {current.get('preempted_for')} (higher priority)"
        await execution.close_record(self.ctx.session_for(e), e, "stopped", state.exit_code, why)
        attempts = self.end_attempt(e, "preempted", why)
        if self.move(e, "pending", why, attempts=attempts, attempt=e.attempt + 1,
                     max_attempts=e.max_attempts + 1, slice_name=None, run_id=None,
                     operation=None, started=None, next_try_at=self.ctx.now(), backoff=0,
                     last_error=None):
            await self.cleanup(e)

    async def finish(self, e: Entry, info: SliceInfo | None, outcome: str, why: str | None, *,
                     exit_code: int | None = None, stop: bool = False) -> None:
        attempts = self.end_attempt(e, outcome, why)
        e_cost = self.cost(Entry(**{**e.__dict__, "attempts": attempts}))
        if not self.move(e, outcome, why, attempts=attempts, ended=self.ctx.now(),
                         exit_code=exit_code, last_error=why if outcome != "succeeded" else None,
                         cost=e_cost):
            return
        self.ctx.phase("ending-intent")
        if stop:
            await execution.stop(self.ctx, e, info, why or outcome)
        await self.cleanup(e)
        self.ctx.phase("ending-sent")

    async def lost(self, e: Entry, info: SliceInfo | None, reason: str) -> None:
        """An infrastructure failure: this attempt is over; retry while attempts are left."""
        attempts = self.end_attempt(e, "lost", reason)
        if e.attempt < e.max_attempts:
            moved = self.move(e, "pending", reason, attempts=attempts, attempt=e.attempt + 1,
                              slice_name=None, run_id=None, operation=None, started=None,
                              next_try_at=self.ctx.now(), backoff=0, last_error=reason)
        else:
            why = f"gave up after {e.attempt} attempts: {reason}"
            moved = self.move(e, "failed", why, attempts=attempts, ended=self.ctx.now(), last_error=why,
                              cost=self.cost(Entry(**{**e.__dict__, "attempts": attempts})))
        if moved:
            await self.cleanup(e)

    # ---- deleting what ended attempts left -----------------------------------------

    async def cleanup(self, e: Entry) -> None:
        """Delete the slice of every ended attempt; mark it cleaned once the world (as
        listed at the start of this pass) no longer shows it."""
        parent = parent_of(e)
        attempts = [dict(a) for a in e.attempts]
        changed = False
        for a in attempts:
            if not a.get("outcome") or a.get("cleaned"):
                continue
            info = self.world.get(parent, a["slice"])
            if info is not None and not entry_names.is_ours(info.labels, self.store.token, e.id):
                info = None  # someone else's: never touched
            if info is None and self.world.seen(parent):
                a["cleaned"], changed = True, True
                self.log.info("slice_gone", entry=e.id, slice=a["slice"])
                continue
            if info is not None and info.state != "DELETING":
                await provision.delete(self.ctx.session_for(e), info)
                self.log.info("slice_deleting", entry=e.id, slice=a["slice"])
        if changed:
            self.store.update(e, attempts=attempts)
