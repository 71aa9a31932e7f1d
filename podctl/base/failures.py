"""One classification of what ends a run: the slice's state and the script's exit code.

`podctl up` (may a slice be reused?), `run --recover` (recover, or is this the script's
own failure?) and the queue's tick (retry the entry, or fail it?) all ask here, so the
three never disagree about whether a slice is lost or an exit was the machine's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from podctl.base.vocabulary import EXIT_HOST_LOST as EXIT_HOST_LOST  # base/vocabulary.py owns it; re-exported
from podctl.base.vocabulary import EXIT_KILLED, EXIT_TERMINATED

if TYPE_CHECKING:  # a type only: cloud/ asks here (up's reuse), so no import back at run time
    from podctl.cloud.types import SliceInfo

# Slice (node or queued resource) states in which its hosts are gone or going: a run
# on it cannot go on. (HIDDEN/HIDING: a multislice queued resource's nodes taken away.)
DEAD_STATES = frozenset({"PREEMPTED", "SUSPENDING", "SUSPENDED", "TERMINATED", "FAILED",
                         "STOPPING", "STOPPED", "DELETING", "HIDDEN", "HIDING"})
# Of those, the states a deletion shows (a preemption shows PREEMPTED or SUSPENDED first,
# and keeps it until someone deletes the slice). "GONE": the slice no longer exists.
DELETED_STATES = frozenset({"DELETING", "GONE"})

# Exit codes that mean the machine, not the script: SIGTERM podctl did not send (a
# preemption or maintenance notice), SIGKILL (the VM going away), a host lost.
INFRA_EXIT_CODES = frozenset({EXIT_TERMINATED, EXIT_KILLED, EXIT_HOST_LOST})
# A process killed by one of these crashed in native code: on a TPU VM most often the
# runtime meeting bad hardware (a chip, its HBM, the host); 128 + the signal's number.
CRASH_SIGNALS = {132: "SIGILL", 134: "SIGABRT", 135: "SIGBUS", 139: "SIGSEGV"}
# A JAX / TPU runtime error that names the hardware (a failed host's last lines).
CHIP_ERROR = re.compile(r"(TPU|chip|HBM|ICI|accelerator|device)\b[^\n]{0,80}?"
                        r"(halted|unhealthy|hardware|uncorrectable|failed to initialize|"
                        r"timed out|not responding|DATA_LOSS|INTERNAL)", re.IGNORECASE)


# JAX's coordination service ending a process because a PEER stopped answering (its
# heartbeats stopped): the process that exits (SIGABRT, 134) is the messenger, not the
# cause. The words are XLA's (coordination_service.cc CheckHeartbeatTimeout, the agent's
# RPC error, pjrt/distributed/client.h), as a fake v5p-16 with one host SIGSTOPped
# printed them under jax 0.11: the stale tasks are listed one a line, by task id
# ("1") or, in older XLA, by name ("/job:jax_worker/replica:0/task:1").
COORDINATION_ABORT = re.compile(
    r"Terminating process because the JAX distributed service detected fatal errors"
    r"|stopped sending heartbeats\)|heartbeat timeout\. This indicates"
    r"|Failed to send RPC to coordination service")
_STALE_LIST = re.compile(r"stopped sending heartbeats\):\s*\n((?:[^\n]*\n?)*?)[^\n]*The tasks have crashed")
_TASK = re.compile(r"^\s*(?:/job:[\w-]+/replica:\d+/task:)?(\d+)\s*$")
_TIMED_OUT_TASK = re.compile(r"Task (?:/job:[\w-]+/replica:\d+/task:)?(\d+) heartbeat timeout")
# The agent's side: it lost the service itself, which lives in the leader, task 0.
_LEADER_LOST = re.compile(r"Failed to send RPC to coordination service\. Either the leader task")


def coordination_abort(text: str | None) -> tuple[int, ...] | None:
    """The JAX process indices (task ids) that JAX's coordination service says stopped
    answering, when TEXT (a failed host's error and last lines) is its abort; () when it
    names none; None when TEXT is no such abort."""
    if not text or not COORDINATION_ABORT.search(text):
        return None
    named: list[int] = []
    for listed in _STALE_LIST.finditer(text):
        named += [int(m.group(1)) for line in listed.group(1).splitlines()
                  if (m := _TASK.match(line))]
    named += [int(m.group(1)) for m in _TIMED_OUT_TASK.finditer(text)]
    if not named and _LEADER_LOST.search(text):
        named.append(0)
    return tuple(dict.fromkeys(named))


# Node health (tpu.v2 Node.Health) that says its hosts are not fit to run on: a relaunch
# goes to new hardware. (UNHEALTHY_MAINTENANCE passes: podctl/policy/maintenance.py waits it out.)
UNFIT_HEALTH = frozenset({"TIMEOUT", "UNHEALTHY_TENSORFLOW"})


def unfit(info: SliceInfo) -> str | None:
    """Why INFO's hardware is not to be run on again (a node's health, its symptoms), or None."""
    for node in info.nodes:
        if node.health in UNFIT_HEALTH:
            said = "; ".join(node.symptoms)
            return f"node {node.name} is {node.health}" + (f" ({said})" if said else "")
    return None


def dead_state(info: SliceInfo) -> str | None:
    """The state that says INFO's hosts are gone or going (its own, or a node's), or None."""
    for node in info.nodes:
        if node.state in DEAD_STATES:
            return node.state
    return info.state if info.state in DEAD_STATES else None


def is_dead(state: str | None) -> bool:
    """STATE (a slice's, "GONE" when it no longer exists) can no longer run anything."""
    return state in DEAD_STATES or state == "GONE"


def slice_lost_reason(info: SliceInfo) -> str | None:
    """Why INFO can no longer run a run (an infrastructure failure), or None."""
    if any(n.state == "PREEMPTED" for n in info.nodes):
        return f"{info.name} was PREEMPTED"
    state = dead_state(info)
    if state is not None:
        why = f": {info.error}" if info.error else ""
        return f"{info.kind} {info.name} is {state}{why}"
    if info.kind == "queued-resource" and info.state == "ACTIVE" and len(info.nodes) < info.num_slices:
        return f"queued resource {info.name} is ACTIVE but lost its nodes"
    return None


def infrastructure_reason(exit_code: int | None, state: str | None = None,
                          error: str | None = None) -> str | None:
    """Why the infrastructure, not the script, ended a run that exited EXIT_CODE while
    its slice was in STATE (None: not seen dead); None if it was the script's own end.
    ERROR: what the failed host's status says."""
    if is_dead(state):
        return f"slice {state.lower()}"  # type: ignore[union-attr]
    if exit_code == EXIT_HOST_LOST:
        return "host lost" + (f" ({error})" if error else "")
    if exit_code in INFRA_EXIT_CODES:
        return f"exit code {exit_code} (killed from outside the script)"
    tasks = coordination_abort(error)
    if tasks is not None:  # the host is the messenger: a peer stopped answering
        peers = f"JAX process {', '.join(str(t) for t in tasks)}" if tasks else "a peer"
        return f"JAX's coordination service ended it ({peers} stopped answering)"
    if exit_code in CRASH_SIGNALS:
        return f"crashed ({CRASH_SIGNALS[exit_code]})"
    named = CHIP_ERROR.search(error) if error else None
    if named is not None:
        return f"a runtime error naming the hardware ({named.group(0)[:80]})"
    return None


def hardware_cause(exit_code: int | None, error: str | None = None) -> str | None:
    """The failure looks like the host's hardware, not the script or a preemption: a
    crash signal, a host lost, a runtime error naming the chip -> which, or None. Twice
    on the same worker, it is a bad host: recovery makes the slice again rather than
    relaunching on the same hardware."""
    if exit_code == EXIT_HOST_LOST:
        return "host lost"
    if coordination_abort(error) is not None:  # ended for a peer: not this host's fault
        return None
    if exit_code in CRASH_SIGNALS:
        return f"crashed ({CRASH_SIGNALS[exit_code]})"
    if error and CHIP_ERROR.search(error):
        return "a runtime error naming the hardware"
    return None


def bad_host(failures: list[tuple[int | None, str | None]]) -> int | None:
    """FAILURES: each attempt's (failed worker, hardware cause or None), oldest first.
    The worker whose failures with a hardware cause are two or more, if the last
    attempt's failure is one of them; else None."""
    if not failures or failures[-1][0] is None or failures[-1][1] is None:
        return None
    worker = failures[-1][0]
    return worker if sum(1 for w, cause in failures if w == worker and cause) >= 2 else None
