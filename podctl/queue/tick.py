"""`podctl queue tick`: one reconcile pass over the queue, never waiting on anything
slow (no slice wait, no log follow), so cron can run it every minute.

    lock (non-blocking) -> read entries -> list the world once per zone that needs
    a look -> one state-machine step per entry (machine.py) -> delete what ended
    attempts left -> unlock

Two ticks never work at once: the second finds the lock held, logs "another tick
is running" and exits 0. Deterministic slice names and run ids (names.py) are the
second guard: a create that finds its name taken adopts the slice.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterator

from podctl.vocabulary import LIVE_RUN_STATES
from podctl.errors import CloudError, JobError, StorageError
from podctl.queue.lock import QueueLock
from podctl.queue.machine import Machine, needs_cleanup
from podctl.queue.provision import parent_of
from podctl.queue.store import TERMINAL, Entry, Store, db_path
from podctl.queue.cloud_view import observe
from podctl._sync import run_sync
from podctl.signals import on_stop
from podctl.queue.context import TickContext

CANCEL_LOCK_WAIT = 60.0  # seconds `queue cancel` waits for a running tick
# What a pass may meet that passes by itself (GCS or the TPU API down, a host not
# answering): `--loop` logs it and keeps watching; the intents in the store make the
# next pass finish what this one began. A broken queue (QueueError) still stops it.
PASSING = (StorageError, CloudError, JobError)


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


async def run_pass(ctx: TickContext, store: Store) -> PassResult:
    """One pass with the lock already held."""
    calls_before = ctx.api.total_calls
    active = [e for e in store.entries() if not e.terminal or needs_cleanup(e)]
    world = await observe(ctx.session, {parent_of(e) for e in active if _needs_world(e)})
    machine = Machine(ctx, store, world)
    for e in active:
        if needs_cleanup(e):  # attempts that ended in earlier passes
            await machine.cleanup(e)
        await machine.step(e)
    from podctl.gc import reap_queue_leftovers  # this queue's dead slices no entry owns
    await reap_queue_leftovers(ctx.api, store.token, store.entries(), world.slices, ctx.log)
    return PassResult(True, len(active), machine.changed, ctx.api.total_calls - calls_before)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[threading.Event]:
    """SIGINT, SIGTERM, SIGHUP: finish the pass in flight (each step is short), then
    stop, so a signal never leaves a half-written intent or an unrecorded slice. One
    the parent ignored (SIGINT in a background job, SIGHUP under nohup) stays ignored."""
    stop = threading.Event()
    with on_stop(lambda signum: stop.set()):
        yield stop


def tick(ctx: TickContext, state_dir: Path) -> PassResult:
    """One pass, if no other tick is running; a stop signal lets the pass finish."""
    with _signals_deferred():
        return _tick(ctx, state_dir)


def _tick(ctx: TickContext, state_dir: Path) -> PassResult:
    lock = QueueLock(state_dir)
    if not lock.acquire():
        ctx.log.info("another tick is running", lock=str(lock.path))
        return PassResult(False)
    try:
        with Store(db_path(state_dir)) as store:
            ctx.log.debug("tick_start", db=str(store.path))
            result = run_sync(run_pass(ctx, store))
        ctx.log.info("tick_done", entries=result.entries, changed=result.changed,
                     api_calls=result.api_calls)
        return result
    finally:
        lock.release()


def loop(ctx: TickContext, state_dir: Path, interval: float) -> None:
    """Passes every INTERVAL seconds until SIGINT, SIGTERM or SIGHUP; a pass in flight
    ends first (each step is short), so a signal never leaves a half-written intent."""
    with _signals_deferred() as stop:
        while not stop.is_set():
            try:
                _tick(ctx, state_dir)
            except PASSING as e:  # an outage: the next pass picks up where this one stopped
                ctx.log.warning("tick_failed", error=str(e), retry_in=interval)
            stop.wait(interval)
        ctx.log.info("loop_stopped")


async def _cancel(ctx: TickContext, store: Store, e: Entry) -> Entry:
    world = await observe(ctx.session, [parent_of(e)])
    machine = Machine(ctx, store, world)
    info = world.get(parent_of(e), e.slice_name)
    if e.state in TERMINAL:
        await machine.cleanup(e)
        return e
    await machine.finish(e, info, "cancelled", "cancelled by `podctl queue cancel`",
                         stop=e.state in LIVE_RUN_STATES)
    return e


def cancel(ctx: TickContext, state_dir: Path, entry_id: int) -> Entry:
    """Cancel an entry: stop its run if it has one, delete its slice. Waits for a tick
    that holds the lock (ticks are short) so that the two never race."""
    with QueueLock(state_dir).hold(CANCEL_LOCK_WAIT, "`podctl queue cancel`"), Store(db_path(state_dir)) as store:
        e = store.get(entry_id)
        return run_sync(_cancel(ctx, store, e))
