"""The run side of a tick: start an entry's run detached on its READY slice (with
the bundle uploaded at `queue add` and the entry's fixed run id, through the one run
step, steps.start_run, as `podctl run --detach` starts one), look at how it is doing
(steps.run_progress: from GCS, the Cloud TPU API not asked), and stop it
(steps.signal_stop).
"""

from __future__ import annotations

import time
from pathlib import Path

from podctl import steps
from podctl.base.errors import ConfigError
from podctl.queue.context import TickContext
from podctl.queue.entry import Entry
from podctl.queue.sealing import SealedEnv
from podctl.steps import SliceInfo
from podctl.steps.elastic import ElasticPolicy


def run_options(entry: Entry) -> steps.RunOptions:
    """The entry's run as `start_run` takes it: the bundle uploaded at `queue add` (the
    script is its path inside it), the entry's fixed run id, detached and once-only, through
    the channel its `queue add --via` named (None: the ticker's settings)."""
    assert entry.run_id
    # A retry after the infrastructure failed goes on from the first attempt's
    # checkpoints (the template resumes from the latest complete one), as --recover does.
    first = next((a["run_id"] for a in entry.attempts if a.get("run_id")), None)
    resumed = first if first and first != entry.run_id else None
    if isinstance(entry.env, SealedEnv):  # a ConfigError: the entry fails, saying why
        raise ConfigError(f"entry {entry.id}'s --env values are sealed to the tickers registered "
                          "when it was added, and this ticker's key is not one of them: copy a "
                          "registered ticker's state-dir queue-ticker.key here, or add it again.")
    env = dict(entry.env)
    if entry.elastic:  # what the template reads of an elastic run: K, the batch kept
        env.update(ElasticPolicy().env(entry.num_slices))
    spec = steps.RunSpec(script=Path(entry.script), args=tuple(entry.args), env=env)
    return steps.RunOptions(spec, hosts="all", bundle_hash=entry.bundle_hash, resume=resumed,
                            extra={"parent": resumed, "attempt": entry.attempt} if resumed else {},
                            detach=True, once=True, run_id=entry.run_id, via=entry.via)


async def start(ctx: TickContext, entry: Entry, info: SliceInfo) -> bool:
    """Start the run unless a tick before this one did; True if this call started it.
    On the hosts the start is once-only for a fixed run id, so a start repeated after
    a tick died in the middle of it runs nothing twice."""
    session = ctx.session_for(entry)
    assert entry.run_id
    if await steps.run_started(session, entry.run_id):
        return False  # started (and recorded) by an earlier tick: adopt it
    await steps.start_run(session, info, run_options(entry), sink=lambda host, line: None,
                          notice=lambda text: ctx.log.debug("job", entry=entry.id, run_id=entry.run_id,
                                                            note=text))
    return True


async def read(session: steps.Session, entry: Entry, num_hosts: int) -> steps.RunProgress:
    assert entry.run_id
    return await steps.run_progress(session, entry.run_id, num_hosts, since=entry.started or time.time())


async def stop_request(session: steps.Session, entry: Entry) -> steps.StopRequest | None:
    """The owner's stop of the entry's run (`podctl stop RUN_ID`), if one was asked."""
    return await steps.owner_stop(session, entry.run_id) if entry.run_id else None


async def stop(ctx: TickContext, entry: Entry, info: SliceInfo | None, why: str) -> None:
    """Ask every host to stop the run and record it as stopped; best effort and without
    waiting, since the slice is deleted right after (which stops everything on it)."""
    session = ctx.session_for(entry)
    if info is not None and info.hosts and entry.run_id:
        try:
            await steps.signal_stop(session, info, entry.run_id)
        except Exception as e:  # unreachable hosts: the deletion stops them
            ctx.log.warning("stop_failed", entry=entry.id, run_id=entry.run_id, error=str(e))
    await close_record(session, entry, "stopped", None, why)


async def ask_to_checkpoint(ctx: TickContext, entry: Entry, info: SliceInfo) -> None:
    """SIGTERM the run's script on every host, as podctl's stop does: the training
    template saves a checkpoint and exits. No wait and no record change: the tick
    looks again next pass (the queue's preemption)."""
    assert entry.run_id
    await steps.signal_stop(ctx.session_for(entry), info, entry.run_id)


async def close_record(session: steps.Session, entry: Entry, state: str, exit_code: int | None,
                       why: str | None = None) -> None:
    """Write the run's end into its record (`podctl runs` reads it), unless an earlier
    tick did."""
    if entry.run_id:  # a stop's why is who stopped it; a failure's or a loss's, its reason
        said = {"stopped_by": why} if state == "stopped" else {"reason": why}
        await steps.close_run(session, entry.run_id, state, exit_code=exit_code,
                              queue_entry=entry.id, **said)
