"""CPU of every process a command starts, daemons included.

`/usr/bin/time` around pytest misses the daemonized fake clouds and every fake host's
processes (they are reparented away from it); this makes itself a child subreaper, so
orphans are reaped here and their CPU is summed into RUSAGE_CHILDREN.

    python tools/cpu.py python -m pytest -q tests/e2e/test_template.py
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def run_reaping(argv: list[str]) -> tuple[int, float]:
    """ARGV run to its end as this subreaper's child, then up to 60 s for the daemons it
    left to stop (each reaped here) -> (its exit code, its wall seconds)."""
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    started = time.monotonic()
    code = subprocess.Popen(argv).wait()
    wall = time.monotonic() - started
    deadline = time.monotonic() + 60  # daemons the command left stop within this
    while time.monotonic() < deadline:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.2)
        except ChildProcessError:
            break
    return code, wall


def main() -> int:
    code, wall = run_reaping(sys.argv[1:])
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"CPU {usage.ru_utime:.1f} user {usage.ru_stime:.1f} sys, {wall:.1f} s wall", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
