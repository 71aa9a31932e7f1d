"""Runs stopped for host maintenance: how podctl tells, waits it out, and says so.

The host agent (host/agent_maintenance.py) watches each TPU VM's metadata server; when
maintenance is near it stops the script (the template checkpoints at the next step on
every host and exits 143) and writes in its host's status what it saw:
`"maintenance": {window_start, window_end, type, status, event}` (epoch seconds).
Here:
  - `stopped_for(storage, run_id)`: that record, if any host wrote one;
  - `wait_out(...)`: for `--recover`, wait until the window has passed and the slice is
    READY and not UNHEALTHY_MAINTENANCE again (then the run resumes in place from the
    checkpoint it just saved: no steps lost), or False when making the slice again is
    faster (a window longer than RECREATE_AFTER_SECONDS, or one that never ends) or
    the maintenance overran its window by OVERRUN_SECONDS (every wait has a bound);
  - `stop_message(...)`: without `--recover`, the one line that says how to resume.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from podctl.base.durations import format_duration
from podctl.base.errors import NotFoundError, PodctlError
from podctl.base.vocabulary import SERVING_STATES
from podctl.cloud.storage import Storage

# A window longer than this: recreating the slice (minutes) beats waiting (approximate:
# a v5p slice takes a few minutes to create; a maintenance window is up to hours).
RECREATE_AFTER_SECONDS = 30 * 60.0
# A maintenance still on this long after its window's end is not waited for any more:
# the slice is made again (a slice that stays UNHEALTHY_MAINTENANCE bills while
# nobody trains). docs/guides/recovery.md, "Host maintenance", states it.
OVERRUN_SECONDS = 5 * 60.0
MAINTENANCE_HEALTH = "UNHEALTHY_MAINTENANCE"
POLL_SECONDS = 2.0


async def stopped_for(storage: Storage, run_id: str) -> dict[str, Any] | None:
    """The maintenance a host's agent stopped run RUN_ID for, or None (also when GCS
    cannot say: this only refines why a run ended, it never fails the run's ending)."""
    from podctl.host import run_layout

    try:
        found = await storage.list(run_layout.status_prefix(run_id))
    except PodctlError:
        return None
    for obj in found:
        try:
            status = json.loads(await storage.download_bytes(obj.name))
        except (ValueError, PodctlError):
            continue
        if isinstance(status, dict) and isinstance(status.get("maintenance"), dict):
            plan: dict[str, Any] = status["maintenance"]
            return plan
    return None


def _when(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)):
        return "?"
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch))


def describe(plan: dict[str, Any]) -> str:
    """'maintenance 16:50:00 UTC to 17:00:00 UTC' (what is known of the window)."""
    start, end = plan.get("window_start"), plan.get("window_end")
    if start is None:
        return f"maintenance ({plan.get('event') or 'announced'})"
    return f"maintenance {_when(start)}" + (f" to {_when(end)}" if end is not None else "")


def reason(plan: dict[str, Any]) -> str:
    return f"stopped for {describe(plan)}"


def stop_message(run_id: str, name: str, script: str, plan: dict[str, Any]) -> str:
    return (f"run {run_id} checkpointed and stopped for {describe(plan)} on slice {name}; "
            f"after it, resume with `podctl run {name} {script} --resume {run_id}` "
            f"(or run with --recover N to wait it out)")


async def wait_out(describe_slice: Callable[[], Any], plan: dict[str, Any], notice: Callable[[str], None],
                   *, poll: float = POLL_SECONDS, now: Callable[[], float] = time.time,
                   sleep: Callable[[float], Any] = asyncio.sleep,
                   overrun: float = OVERRUN_SECONDS) -> bool:
    """Wait until PLAN's window has passed and the slice (DESCRIBE_SLICE() -> SliceInfo)
    is READY and out of maintenance -> True; False when recreating is the faster way
    (the window is long or unknown, the slice is gone or dead, or it is still in
    maintenance OVERRUN seconds after the window's end)."""
    start, end = plan.get("window_start"), plan.get("window_end")
    if end is None or end - now() > RECREATE_AFTER_SECONDS:
        notice(f"{describe(plan)}: making the slice again is faster than waiting")
        return False
    notice(f"waiting out {describe(plan)}, then resuming in place")
    seen_maintenance = False
    while True:
        try:
            info = await describe_slice()
        except NotFoundError:
            return False
        if info.state not in SERVING_STATES:
            return False
        seen_maintenance |= info.health == MAINTENANCE_HEALTH
        over = now() >= end or (seen_maintenance and start is not None and now() >= start)
        if over and info.health != MAINTENANCE_HEALTH:
            return True
        late = now() - end
        if late > overrun:
            notice(f"{describe(plan)} is not over {format_duration(late)} after its window's "
                   f"end (health {info.health or 'unknown'}; podctl waits {format_duration(overrun)} "
                   "past a window): making the slice again rather than waiting longer")
            return False
        await sleep(poll)
