"""One TPU owner per host: a run starts only where no other run holds the chips.

On a TPU VM only one process can hold the chips (libtpu takes /tmp/libtpu_lockfile;
a second one fails at JAX start). So before its agents start, a run asks every host
which other runs' agents are alive there, whoever started them: a run through the
slice's watchers is root's, one over SSH the login user's, so the rule is host-wide,
one file per run in the host's /tmp (`podctl-chips/RUN_ID`, "PID STATE", written by the
run's agent: agent_chips.py; the watchers read the same, host_watch.others):
- one that was not asked to stop is a live run: the new one is refused, naming it
  and `podctl stop`, before anything starts anywhere;
- one that was asked to stop (`stopping`) is letting go: a relaunch in place
  waits for it to end, then starts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from podctl.base.errors import SliceBusyError
from podctl.host import run_layout
from podctl.host.agent import STOP_GRACE_SECONDS
from podctl.jobs.ssh import Fleet, Target

# How long a relaunch waits for the old run to let go: the agent's own stop grace, then
# its SIGKILL, with slack for the leftovers' end.
LET_GO_SECONDS = STOP_GRACE_SECONDS + 30.0
_POLL_SECONDS = 1.0

# Prints "live ID" or "stopping ID" for each other run whose agent is alive on this host
# (the host's /tmp: TMPDIR where set, as agent_chips.host_tmp). Alive means: the pid's
# process exists, is not a zombie (a killed agent is reparented to PID 1, and a container's
# PID 1 may never reap it: `kill -0` would call it alive forever) and its command line is
# that run's agent (started in its run directory), not a later process that reused the pid;
# /proc/PID/status and cmdline are readable for another user's processes too.
_OTHERS = r"""
for p in "${TMPDIR:-/tmp}"/{chips}/*; do
  [ -f "$p" ] || continue
  id=$(basename "$p")
  [ "$id" = {run_id} ] && continue
  { read -r pid state < "$p"; } 2>/dev/null || continue  # gone meanwhile: its run ended
  case "$pid" in ""|*[!0-9]*) continue;; esac
  st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
  case "$st" in ""|Z|X) continue;; esac
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "/$id" || continue
  if [ "$state" = {stopping} ]; then echo "stopping $id"; else echo "live $id"; fi
done
true
""".replace("{chips}", run_layout.CHIPS_DIR).replace("{stopping}", run_layout.CHIPS_STOPPING)


def others_command(run_id: str) -> str:
    import shlex

    return _OTHERS.replace("{run_id}", shlex.quote(run_id))


async def _others(fleet: Fleet, run_id: str) -> dict[str, set[str]]:
    """{"live": run ids, "stopping": run ids} over every host."""
    command = others_command(run_id)

    async def ask(conn: Any, target: Target) -> str:
        result = await conn.run(command, check=False)
        return str(result.stdout or "")

    found: dict[str, set[str]] = {"live": set(), "stopping": set()}
    for text in await fleet.each(ask):
        for line in text.splitlines():
            state, _, other = line.partition(" ")
            if state in found and other:
                found[state].add(other)
    return found


def busy_line(slice_name: str, other: str) -> str:
    """The refusal of a run on a slice whose chips run OTHER holds (said the same through
    the watchers, whose host says `busy OTHER`)."""
    return (f"slice {slice_name} is busy with run {other} (one TPU owner per host): "
            f"wait for it, or `podctl stop {other}` first.")


async def wait_for_the_chips(fleet: Fleet, run_id: str, slice_name: str,
                             let_go_seconds: float = LET_GO_SECONDS) -> None:
    """Return once no other run holds any host of FLEET; SliceBusyError if one is live, or if
    a stopping one has not let go within LET_GO_SECONDS."""
    deadline = time.monotonic() + let_go_seconds
    while True:
        found = await _others(fleet, run_id)
        if found["live"]:
            raise SliceBusyError(busy_line(slice_name, sorted(found["live"])[0]))
        if not found["stopping"]:
            return
        if time.monotonic() > deadline:
            other = sorted(found["stopping"])[0]
            raise SliceBusyError(f"run {other} still holds {slice_name}'s chips {let_go_seconds:.0f} s after "
                           f"it was asked to stop; `podctl stop {other}` again, or retry later.")
        await asyncio.sleep(_POLL_SECONDS)
