"""The script's processes, for the host agent (stdlib only: shipped with agent.py, run
by a bare host's python3): the agent becomes their subreaper, finds every process the
script left behind (its session, and orphans re-parented to the agent), and reaps them."""

from __future__ import annotations

import os
import sys


def become_subreaper() -> None:
    """Orphans of the script (a daemon it double-forked, a loader whose parent died)
    come back to the agent instead of init, so the agent can still find and end them.
    Linux only; elsewhere the script's session is what the agent ends."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        except (OSError, AttributeError):
            pass


def _processes() -> dict[int, tuple[int, int, str]] | None:
    """pid -> (ppid, session, state) of every process, from /proc; None without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()  # the name in () may hold spaces
            table[int(name)] = (int(fields[1]), int(fields[3]), fields[0].decode())
        except (OSError, ValueError, IndexError):
            continue  # gone while we looked
    return table


def leftovers(session: int) -> list[int]:
    """The live processes the script started: those in its session, and every
    descendant of this agent wherever it moved (orphans come back to the agent)."""
    table = _processes()
    if table is None:
        return []
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [me]
    while stack:
        for pid in children.get(stack.pop(), []):
            if pid not in found:
                found.add(pid)
                stack.append(pid)
    found |= {pid for pid, (_, sid, _) in table.items() if sid == session}
    found.discard(me)
    return sorted(pid for pid in found if table[pid][2] not in ("Z", "X"))


def _reap() -> None:
    """Collect the agent's dead children (the script's orphans come back to it)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class _quiet:
    """Signalling a process that is already gone is no error."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, tb: object) -> bool:
        return kind is not None and issubclass(kind, (ProcessLookupError, PermissionError))  # type: ignore[arg-type]


