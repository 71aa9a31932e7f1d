"""A slow host's CPU, in the fake: a process of its own that stops the host's processes
(SIGSTOP) for 1 - 1/FACTOR of every PERIOD and lets them run (SIGCONT) for the rest.

Why a process of its own, with a period of 2 ms: a slow host's own part of a step may be
a millisecond of work, and only a cycle finer than that stretches every such millisecond
about FACTOR times, step after step, as a slow CPU would. A cycle sent from the fake's
event loop (which also serves the API, SSH and the metadata servers) can't keep 2 ms on a
loaded machine; this process does little else, and takes a real-time priority where the
machine allows (root), so the kernel wakes it on time whatever else runs. (A cgroup's
CPU quota was tried first: the kernel's smallest quota is 1 ms of CPU, so a shorter burst
that starts with a fresh quota is not slowed at all.)

    python -m podctl.fake.vm.throttle FACTOR

reads the pids to throttle from standard input, one line of space-separated pids each
time the set changes (host_faults.py looks them up once a second), and ends at the end
of its input or on SIGTERM, SIGINT or SIGHUP, letting every process it stopped run again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable

PERIOD = 0.002  # seconds of one stop/run cycle
MIN_RUN = 0.0002  # the shortest run phase (a sleep shorter than this is not kept)


def signal_all(pids: Iterable[int], sig: int) -> None:
    """SIG to each of PIDS that is still there (host_faults.py's faults use it too)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _real_time_priority() -> None:
    """Woken on time on a loaded machine: SCHED_FIFO where allowed (root), else as is."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))


def main(argv: list[str]) -> int:
    factor = float(argv[0])
    run = max(MIN_RUN, PERIOD / factor)
    stop = run * (factor - 1)
    state: dict[str, frozenset[int]] = {"pids": frozenset()}
    done = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            with contextlib.suppress(ValueError):
                state["pids"] = frozenset(int(p) for p in line.split())
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: done.set())
    threading.Thread(target=read, daemon=True).start()
    _real_time_priority()
    stopped: frozenset[int] = frozenset()
    try:
        while not done.is_set():
            stopped = state["pids"]
            signal_all(stopped, signal.SIGSTOP)
            time.sleep(stop)
            signal_all(stopped, signal.SIGCONT)
            stopped = frozenset()
            time.sleep(run)
    finally:
        signal_all(stopped, signal.SIGCONT)  # never leave a process stopped
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
