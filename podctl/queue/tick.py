"""`podctl queue tick`: one reconcile pass over the queue, never waiting on anything
slow (no slice wait, no log follow), so cron can run it every minute.

    lock (non-blocking) -> read entries -> list the world once per zone that needs
    a look -> order the due entries (shares.py: priority, fair share) -> one
    state-machine step per entry (machine.py), a due one only within its owner's
    quotas -> delete what ended attempts left -> unlock

Two ticks never work at once, on one machine or (a PostgreSQL queue) on many: the
second finds the store's tick lock held, logs "another tick is running" and exits 0.
Compare-and-set updates and deterministic slice names and run ids (entry_names.py)
are the second guard: a create that finds its name taken adopts the slice.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from podctl.base._sync import run_sync
from podctl.base.errors import CloudError, JobError, QueueUnreachableError, StorageError
from podctl.base.signals import on_stop
from podctl.base.vocabulary import LIVE_RUN_STATES
from podctl.queue.cloud_view import observe
from podctl.queue.context import TickContext
from podctl.queue.entry import TERMINAL, Entry
from podctl.queue.interface import QueueStore
from podctl.queue.machine import Machine, needs_cleanup
from podctl.queue.provision import parent_of
from podctl.queue.shares import Ledger, Shares
from podctl.steps.collect import QueueOwners, reap_queue_leftovers

CANCEL_LOCK_WAIT = 60.0  # seconds `queue cancel` waits for a running tick
# What a pass may meet that passes by itself (GCS or the TPU API down, a host not
# answering): `--loop` logs it and keeps watching; the intents in the store make the
# next pass finish what this one began; so does a PostgreSQL queue out of reach for a
# while (the next pass connects afresh). A broken queue (QueueDatabaseError) stops it.
PASSING = (StorageError, CloudError, JobError, QueueUnreachableError)
Opener = Callable[[], QueueStore]  # opens the queue's store (SQLite or PostgreSQL)


@dataclass(frozen=True)
class PassResult:
    ran: bool  # False: another tick held the lock
    entries: int = 0
    changed: int = 0
    api_calls: int = 0


def _needs_world(e: Entry) -> bool:
    if needs_cleanup(e):
        return True
    # a due pending entry creates without looking first: AlreadyExists means adopt
    return not e.terminal and e.state != "pending"


async def _preempt_for(ctx: TickContext, machine: Machine, ledger: Ledger, e: Entry,
                       active: list[Entry]) -> None:
    """With `[queue] preempt = true`: make room for E, which its quota holds back, by
    preempting running entries of lower priority under that quota (shares.victims)."""
    for victim in ledger.victims(e, active):
        info = machine.world.get(parent_of(victim), victim.slice_name)
        if info is not None and info.ready:
            await machine.preempt(victim, info, e)


def _admitted(ctx: TickContext, store: QueueStore, ledger: Ledger, e: Entry) -> bool:
    """A due pending entry may start only within its owner's (and team's) quotas; one
    that may not says why in its `waiting`, which `queue ls` shows."""
    if e.state != "pending" or e.next_try_at > ctx.now():
        return True
    why = ledger.admit(e)
    if why != e.waiting and store.update(e, waiting=why):
        ctx.log.info("waiting" if why else "admitted", entry=e.id, owner=e.owner,
                     **({"reason": why} if why else {}))
    return why is None


async def run_pass(ctx: TickContext, store: QueueStore) -> PassResult:
    """One pass with the lock already held."""
    calls_before = ctx.session.api.total_calls
    entries = store.entries()
    active = [e for e in entries if not e.terminal or needs_cleanup(e)]
    world = await observe(ctx.session, {parent_of(e) for e in active if _needs_world(e)})
    machine = Machine(ctx, store, world)
    toml_quotas, toml_teams = ctx.toml_shares
    ledger = Ledger(entries, Shares.combine(store.quotas(), store.teams(), toml_quotas, toml_teams),
                    ctx.now())
    for e in ledger.order(active):
        if needs_cleanup(e):  # attempts that ended in earlier passes
            await machine.cleanup(e)
        if _admitted(ctx, store, ledger, e):
            await machine.step(e)
        elif ctx.preempt:
            await _preempt_for(ctx, machine, ledger, e, active)
    # this queue's dead slices that no entry owns
    await reap_queue_leftovers(ctx.session, QueueOwners(store.token, store.entries()), world.slices, ctx.log)
    return PassResult(True, len(active), machine.changed, ctx.session.api.total_calls - calls_before)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[threading.Event]:
    """SIGINT, SIGTERM, SIGHUP: finish the pass in flight (each step is short), then
    stop, so a signal never leaves a half-written intent or an unrecorded slice. One
    the parent ignored (SIGINT in a background job, SIGHUP under nohup) stays ignored."""
    stop = threading.Event()
    with on_stop(lambda signum: stop.set()):
        yield stop


def tick(ctx: TickContext, opener: Opener) -> PassResult:
    """One pass, if no other tick is running; a stop signal lets the pass finish."""
    with _signals_deferred():
        return _tick(ctx, opener)


def _tick(ctx: TickContext, opener: Opener) -> PassResult:
    with opener() as store:
        lock = store.tick_lock()
        if not lock.acquire():
            ctx.log.info("another tick is running", lock=str(lock.path))
            return PassResult(False)
        try:
            ctx.log.debug("tick_start", db=store.where)
            result = run_sync(run_pass(ctx, store))
        finally:
            lock.release()
    ctx.log.info("tick_done", entries=result.entries, changed=result.changed,
                 api_calls=result.api_calls)
    return result


def loop(ctx: TickContext, opener: Opener, interval: float) -> None:
    """Passes every INTERVAL seconds until SIGINT, SIGTERM or SIGHUP; a pass in flight
    ends first (each step is short), so a signal never leaves a half-written intent."""
    with _signals_deferred() as stop:
        while not stop.is_set():
            try:
                _tick(ctx, opener)
            except PASSING as e:  # an outage: the next pass picks up where this one stopped
                ctx.log.warning("tick_failed", error=str(e), retry_in=interval)
            stop.wait(interval)
        ctx.log.info("loop_stopped")


async def _cancel(ctx: TickContext, store: QueueStore, e: Entry) -> Entry:
    world = await observe(ctx.session, [parent_of(e)])
    machine = Machine(ctx, store, world)
    info = world.get(parent_of(e), e.slice_name)
    if e.state in TERMINAL:
        await machine.cleanup(e)
        return e
    await machine.finish(e, info, "cancelled", "cancelled by `podctl queue cancel`",
                         stop=e.state in LIVE_RUN_STATES)
    return e


def cancel(ctx: TickContext, opener: Opener, entry_id: int) -> Entry:
    """Cancel an entry: stop its run if it has one, delete its slice. Waits for a tick
    that holds the lock (ticks are short) so that the two never race."""
    with opener() as store, store.tick_lock().hold(CANCEL_LOCK_WAIT, "`podctl queue cancel`"):
        e = store.get(entry_id)
        return run_sync(_cancel(ctx, store, e))
