"""An elastic entry's tick (`queue add --num-slices K --elastic`): its K slices are K
queued resources, one per slice (`up --elastic`), so a preempted one is lost alone. The
tick asks no host (steps.elastic.serving_slices: the nodes the cloud calls READY) and acts
through steps/elastic.py, as `run --recover --elastic` does:

    a slice the attempt runs on is lost
        none serves                     -> today's loss: made again whole (Machine.lost)
        fewer than --min-slices serve   -> the run stopped; a new attempt `waiting` (no
                                           step) while the lost ones are asked for again;
                                           past --grow-deadline: made again whole
        else                            -> the run stopped; a new attempt on the survivors
    while on fewer than K               -> the lost slices asked for again (Requests.ask:
                                           SUSPENDED -> `:reset`; FAILED -> deleted, said
                                           in one line); past --grow-deadline their
                                           requests deleted, the run goes on on the rest
    a lost slice serves again           -> the run stopped (SIGTERM: it checkpoints) and a
                                           new attempt on every slice that serves

Each relaunch is a new attempt (its own run id, resuming from the first attempt's
checkpoints) that uses none of --max-attempts; the attempt it follows hands its slice on
(`kept`), so that cleanup deletes the slice only with the entry's last attempt.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from podctl import steps
from podctl.queue import entry_names, execution
from podctl.queue.cloud_view import lost_reason
from podctl.queue.entry import Entry
from podctl.steps import SliceInfo
from podctl.steps.elastic import ElasticPolicy, Requests, never_back, on_slices, serving_slices

if TYPE_CHECKING:
    from podctl.queue.machine import Machine


def policy_of(e: Entry) -> ElasticPolicy:
    """The entry's --min-slices and --grow-deadline as the step's policy."""
    deadline = ElasticPolicy.grow_deadline if e.grow_deadline is None else e.grow_deadline
    return ElasticPolicy(min_slices=e.min_slices or 1, grow_deadline=deadline)


def attempt_slices(e: Entry) -> set[int]:
    """The slices the entry's present attempt runs on (all K but after a loss)."""
    on = (e.current() or {}).get("slices")
    return set(range(e.num_slices)) if on is None else set(on)


def narrowed(info: SliceInfo, ids: set[int]) -> SliceInfo:
    """INFO on slices IDS, every one READY: a slice the run may start on, judged by its
    own nodes (the group's state is a lost member's)."""
    return replace(on_slices(info, ids), state="ACTIVE", error=None)


def _named(ids: set[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


def _requests(m: Machine, e: Entry) -> Requests:
    """steps/elastic's requests, saying what they do in the tick's log."""
    return Requests(m.ctx.session_for(e), lambda text: m.log.info("elastic", entry=e.id, note=text))


async def step(m: Machine, e: Entry, info: SliceInfo) -> None:
    """One look at elastic E (starting or running) on its slice INFO, ours and listed."""
    current = e.current() or {}
    live = serving_slices(info)
    if current.get("waiting"):
        await _waiting(m, e, info, live)
        return
    on = attempt_slices(e)
    if on - live:
        await _shrink(m, e, info, live, on - live)
        return
    missing = set(range(e.num_slices)) - on
    if missing and not current.get("given_up"):
        if await _past_deadline(m, e, info, missing - live):
            return
        await _requests(m, e).ask(info, missing - live)
        if e.state == "running" and missing & live:
            await _relaunch(m, e, info, live, "grown", f"slice {_named(missing & live)} of "
                            f"{e.slice_name} serves again: growing back to {len(live)} of "
                            f"{e.num_slices} slices from the survivors' checkpoint")
            return
    if e.state == "starting":
        await m.start(e, narrowed(info, on))
    else:
        await m.watch(e, narrowed(info, on))


async def _past_deadline(m: Machine, e: Entry, info: SliceInfo, lost: set[int]) -> bool:
    """Past --grow-deadline (from the loss): the lost slices' requests deleted, the run
    left on the rest; True when that was done now."""
    current = e.current() or {}
    since = float(current.get("lost_at") or m.ctx.now())
    if m.ctx.now() - since <= policy_of(e).grow_deadline:
        return False
    await _requests(m, e).withdraw("past --grow-deadline", info, lost)
    attempts = [dict(a) for a in e.attempts]
    attempts[-1]["given_up"] = True
    m.store.update(e, attempts=attempts)
    m.log.info("elastic", entry=e.id, note=f"slice {_named(lost)} of {e.slice_name} not back "
               f"within --grow-deadline: no longer asked for; going on on {len(attempt_slices(e))}")
    return True


async def _shrink(m: Machine, e: Entry, info: SliceInfo, live: set[int], gone: set[int]) -> None:
    """Slices GONE of the attempt's are lost: go on on LIVE, wait, or make all again."""
    why = f"slice {_named(gone)} of {e.slice_name} lost ({lost_reason(info) or 'not READY'})"
    if not live:
        await m.lost(e, info, f"{why}; no slice serves: making all {e.num_slices} again")
        return
    await _requests(m, e).ask(info, set(range(e.num_slices)) - live)
    floor = policy_of(e).min_slices
    if len(live) < floor:
        why += (f"; {len(live)} of {e.num_slices} serve, below --min-slices {floor}: waiting, "
                "no step, for a lost slice to come back")
    else:
        why += f"; going on on the {len(live)} that serve (slice {_named(live)})"
    lost_at = (e.current() or {}).get("lost_at") or m.ctx.now()
    await _relaunch(m, e, info, live, "shrunk", why, lost_at=lost_at, waiting=len(live) < floor)


async def _waiting(m: Machine, e: Entry, info: SliceInfo, live: set[int]) -> None:
    """Below --min-slices: start once enough slices serve; past the deadline (or with
    none serving) make all K again, as `run --elastic` does."""
    floor, k = policy_of(e).min_slices, e.num_slices
    current = e.current() or {}
    if len(live) >= floor:
        attempts = [dict(a) for a in e.attempts]
        attempts[-1].update(slices=sorted(live), waiting=False)
        m.store.update(e, attempts=attempts)
        m.log.info("elastic", entry=e.id, note=f"{len(live)} of {k} slices of {e.slice_name} serve "
                   f"again: going on on slice {_named(live)}")
        await m.start(e, narrowed(info, live))
        return
    since = float(current.get("lost_at") or m.ctx.now())
    never = never_back(info, set(range(k)) - live)
    hopeless = k - len(never) < floor  # too many requests failed for the floor ever to be met
    if not live or hopeless or m.ctx.now() - since > policy_of(e).grow_deadline:
        why = ("no slice serves" if not live else f"the request for slice {_named(never)} failed"
               if hopeless else "past --grow-deadline")
        await _requests(m, e).withdraw(why, info, set(range(k)) - live)
        await m.lost(e, info, f"{len(live)} of {k} slices serve, below --min-slices {floor}, "
                     f"{why}: making all {k} again")
        return
    await _requests(m, e).ask(info, set(range(k)) - live)


async def _relaunch(m: Machine, e: Entry, info: SliceInfo, live: set[int], outcome: str, why: str,
                    **record: Any) -> None:
    """End the attempt (OUTCOME: its run stopped, its slice handed on) and begin the next
    on LIVE, started in this pass unless it waits (RECORD: the new attempt's own)."""
    m.log.info("elastic", entry=e.id, note=why)
    session = m.ctx.session_for(e)
    if e.state == "running" and e.run_id:
        survivors = attempt_slices(e) & live
        if survivors:  # asked to stop first: the next run's start waits for it to let go
            try:
                await steps.signal_stop(session, on_slices(info, survivors), e.run_id)
            except Exception as err:  # noqa: BLE001 - its hosts' start then says who holds them
                m.log.warning("stop_failed", entry=e.id, run_id=e.run_id, error=str(err))
        await execution.close_record(session, e, "lost" if outcome == "shrunk" else "stopped",
                                     None, why)
    attempts = m.end_attempt(e, outcome, why)
    attempts[-1].update(kept=True, cleaned=True)  # the slice goes on to the next attempt
    attempt = e.attempt + 1
    run_id = entry_names.run_id(m.store.token, e.id, attempt, e.created)
    now = m.ctx.now()
    attempts.append({"attempt": attempt, "slice": e.slice_name, "run_id": run_id, "requested": now,
                     "ready_at": now, "slices": sorted(live), **record})
    if not m.move(e, "starting", why, attempts=attempts, attempt=attempt, run_id=run_id,
                  max_attempts=e.max_attempts + 1, started=None, operation=None):
        return
    if not record.get("waiting"):
        await m.start(e, narrowed(info, live))
