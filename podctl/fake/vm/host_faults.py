"""A sick host, in the fake: slow (its processes stopped and continued every 2 ms by a
helper process, throttle.py: a CPU FACTOR times slower) or crash-looping (its script
crashed, SIGSEGV, a few seconds after each start). Each is a loop in the fake's event
loop, one per host, that ends when the fault is cleared or the host goes (deleted,
preempted, dropped, a reset).

Approximate: a real slow host is slow in its chips or its network, not stopped by the
kernel; what the script sees (steps taking longer on that host, so on every host, as
collectives wait for it) is the same. "The script" is a process whose parent is
podctl's agent (the agent runs the script as its child); commands run over SSH without
the agent are left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from podctl.fake.vm.hosts import TOKEN_VAR, HostManager
from podctl.fake.vm.throttle import signal_all

SLOW_RESCAN = 1.0  # how often the host's processes are looked for again (/proc is slow)
CRASH_POLL = 0.2


def _tagged(token: str) -> dict[int, int]:
    """pid -> parent pid of every process host TOKEN started (its environment says so)."""
    needle, found = f"{TOKEN_VAR}={token}".encode(), {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if needle not in Path(entry.path, "environ").read_bytes().split(b"\0"):
                continue
            stat = Path(entry.path, "stat").read_text()
            found[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return found


def _is_agent(pid: int) -> bool:
    try:
        return b"agent" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class HostFaults:
    """The slow and crash-looping hosts of one HostManager, by (node name, worker)."""

    def __init__(self, manager: HostManager):
        self.manager = manager
        self.loops: dict[tuple[str, int, str], asyncio.Task[None]] = {}

    def _token(self, node: str, worker: int) -> str | None:
        try:
            return self.manager.host(node, worker).token
        except LookupError:
            return None

    def _start(self, kind: str, node: str, worker: int, loop: Any) -> None:
        self.clear(kind, node, worker)
        self.manager.host(node, worker)  # LookupError (saying why) when there is none
        task = asyncio.ensure_future(loop())
        self.loops[(node, worker, kind)] = task
        task.add_done_callback(lambda t: self.loops.pop((node, worker, kind), None)
                               if self.loops.get((node, worker, kind)) is t else None)

    def clear(self, kind: str, node: str, worker: int) -> bool:
        task = self.loops.pop((node, worker, kind), None)
        if task is not None:
            task.cancel()
        return task is not None

    def slow(self, node: str, worker: int, factor: float) -> None:
        """Host WORKER's processes run 1/FACTOR of the time (FACTOR 1: full speed again)."""
        if factor <= 1:
            self.clear("slow", node, worker)
            return
        self._start("slow", node, worker, lambda: self._slow(node, worker, factor))

    async def _slow(self, node: str, worker: int, factor: float) -> None:
        # throttle.py stops and continues the host's processes every 2 ms; here only
        # the host's processes are looked up (new ones come as the run goes on)
        helper = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podctl.fake.vm.throttle", str(factor),
            stdin=asyncio.subprocess.PIPE, start_new_session=True)
        feed = helper.stdin
        assert feed is not None  # asked for above (PIPE)
        pids: set[int] = set()
        try:
            while (token := self._token(node, worker)) is not None:
                if helper.returncode is not None:  # killed by someone: the fault ends
                    break
                found = set(_tagged(token))
                if found != pids:
                    pids = found
                    with contextlib.suppress(ConnectionError):  # it ended: seen above next time
                        feed.write((" ".join(map(str, sorted(pids))) + "\n").encode())
                        await feed.drain()
                await asyncio.sleep(SLOW_RESCAN)
        finally:
            with contextlib.suppress(Exception):
                feed.close()  # the helper ends at the end of its input
                await asyncio.wait_for(helper.wait(), 2)
            with contextlib.suppress(ProcessLookupError):
                helper.kill()
            signal_all(pids, signal.SIGCONT)  # never leave a process stopped

    def crash_loop(self, node: str, worker: int, after: float, sig: int = signal.SIGSEGV) -> None:
        """Host WORKER's script gets SIG (a crash) AFTER wall-clock seconds of each start."""
        self._start("crash-loop", node, worker, lambda: self._crash(node, worker, after, sig))

    async def _crash(self, node: str, worker: int, after: float, sig: int) -> None:
        seen: dict[int, float] = {}
        while (token := self._token(node, worker)) is not None:
            now = time.monotonic()
            procs = _tagged(token)
            scripts = [pid for pid, parent in procs.items() if _is_agent(parent) and not _is_agent(pid)]
            seen = {pid: seen.get(pid, now) for pid in scripts}
            signal_all([pid for pid, first in seen.items() if now - first >= after], sig)
            await asyncio.sleep(CRASH_POLL)

    def describe(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for node, worker, kind in self.loops:
            out.setdefault(node, []).append(f"{kind} worker {worker}")
        return out

    def close(self) -> None:
        for task in list(self.loops.values()):
            task.cancel()
        self.loops.clear()
