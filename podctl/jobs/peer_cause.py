"""Who a run's end was about, when the host that exited only carried the news.

JAX's coordination service (in host 0's process) ends every process of a job once one
of them stops sending it heartbeats: a host frozen mid-run (its script stopped, state T;
the host hung) makes host 0 abort (SIGABRT, exit 134) with "The following tasks are
unhealthy (stopped sending heartbeats): 1" long before podctl's stall watch would speak,
and that abort is the run's first failure. podctl then looks at the peers, as the stall
watch does: what the coordination service named (failures.coordination_abort), the
agents' heartbeats read when the abort landed (the script's process state, the agent's
own silence), and the frozen host's own status (its agent had to SIGKILL a stopped
script: `killed_state` T). The host so found is the run's failed host, and the reason
says both: who stopped answering, and who JAX ended for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podctl.base.failures import coordination_abort
from podctl.jobs.host_label import host_name
from podctl.jobs.run_record import HostStatus, job_exit_code

SILENT_BEAT_SECONDS = 35.0  # an agent beats every 10 s: three missed beats is silence
# A script's process state that says it is not answering (stall.name_hosts says the same)
NOT_ANSWERING = {"T": "stopped (process state T)", "D": "blocked in I/O (process state D)"}


@dataclass(frozen=True)
class PeerCause:
    host: int  # the host that stopped answering
    process: int | None  # its JAX process index, when known
    evidence: str | None  # what podctl saw of it; None: the coordination service named it alone
    messenger: HostStatus  # the host JAX's coordination service ended for it

    def describe(self) -> str:
        """One line: who stopped answering (and how podctl knows), and who JAX ended."""
        seen = f" ({self.evidence})" if self.evidence else " (JAX's coordination service named it)"
        ended = host_name(self.messenger.host, self.messenger.process)
        return (f"{host_name(self.host, self.process)} stopped answering{seen}; JAX's "
                f"coordination service then ended {ended} (exit {self.messenger.exit_code})")

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "process": self.process, "evidence": self.evidence,
                "ended": self.messenger.host, "ended_exit_code": self.messenger.exit_code}


def evidence(status: HostStatus | None, beat: dict[str, Any] | None, now: float) -> str | None:
    """What says a host stopped answering: its status (its agent killed a stopped script),
    else its heartbeat (read when the abort landed, NOW): the script's state, or none."""
    if status is not None and status.killed_state in NOT_ANSWERING:
        return f"its script was {NOT_ANSWERING[status.killed_state]}"
    if beat is None:
        return None if status is not None else "no heartbeat from its agent"
    try:
        age = now - float(beat.get("time", 0))
    except (TypeError, ValueError):
        age = float("inf")
    if status is None and age > SILENT_BEAT_SECONDS:
        return f"its agent silent: no heartbeat for {age:.0f} s"
    state = (beat.get("process") or {}).get("state") if isinstance(beat.get("process"), dict) else None
    if state in NOT_ANSWERING:
        return f"its script was {NOT_ANSWERING[state]}"
    return None


def peer_cause(statuses: dict[int, HostStatus], beats: dict[int, dict[str, Any]] | None, num_hosts: int,
               now: float) -> PeerCause | None:
    """The host that stopped answering, when the run's first failure (job_exit_code's) is
    JAX's coordination service giving up on a peer; None otherwise, or when no peer can be
    told (nothing named, nothing seen). BEATS: the agents' heartbeats as read when the
    abort landed, at NOW (None: not read)."""
    _, first = job_exit_code(statuses)
    if first is None or first.stopped:
        return None
    named = coordination_abort(first.explanation())
    if named is None:
        return None
    beats = beats or {}
    # Tasks are JAX process indices: a host's comes from its status or its heartbeat.
    process_of = {h: s.process for h, s in statuses.items() if s.process is not None}
    for h, beat in beats.items():
        index = beat.get("process_index")
        if h not in process_of and isinstance(index, int) and not isinstance(index, bool):
            process_of[h] = index
    host_of = {p: h for h, p in process_of.items()}
    named_hosts = [host_of.get(t, t) for t in named if 0 <= host_of.get(t, t) < num_hosts]
    aborted = {h for h, s in statuses.items()
               if not s.stopped and s.exit_code != 0 and coordination_abort(s.explanation()) is not None}
    finished = {h for h, s in statuses.items() if s.exit_code == 0}  # it did its work: it answered
    peers = [h for h in range(num_hosts) if h not in aborted and h not in finished]
    seen = {h: evidence(statuses.get(h), beats.get(h), now) for h in peers}
    # Named and seen, else seen (the service may name a host that was answering: its
    # heartbeats delayed), else named alone.
    chosen = next((h for h in named_hosts if seen.get(h)), None)
    if chosen is None:
        chosen = next((h for h in peers if seen[h]), None)
    if chosen is None:
        chosen = next((h for h in named_hosts if h in seen), None)
    if chosen is None:
        return None
    return PeerCause(chosen, process_of.get(chosen), seen.get(chosen), first)
