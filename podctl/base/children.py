"""Helper processes (uv, the preflight's compile worker, an interpreter probe) that end
with the podctl that started them, however it ends.

subprocess.run kills its child when podctl raises (Ctrl-C, a routed SIGTERM, a
timeout), but a SIGKILLed podctl runs no code: its child was re-parented to init and
went on (a `uv pip sync` writing into STATE_DIR for minutes). So each child:
- asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG, Linux), set
  between fork and exec, and checks that the parent did not die before that;
- runs in its own process group, so that a terminal's Ctrl-C reaches podctl alone
  (which then ends the child itself, and says it was interrupted, not that uv failed),
  and so that on the way out podctl can end the child's own children with it.

PDEATHSIG follows the *thread* that started the child: `run` waits for the child in
that same thread, so the thread outlives it (plan()'s pool threads included).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from podctl.base.vocabulary import EXIT_KILLED

_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's prctl, looked up before any fork (the child only calls it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def _dies_with(parent: int) -> Callable[[], None]:
    def preexec() -> None:  # in the child, between fork and exec: system calls only
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the line above took
            os._exit(EXIT_KILLED)

    return preexec


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(argv: Sequence[str], *, timeout: float | None = None, text: bool = True,
        **popen: Any) -> subprocess.CompletedProcess[Any]:
    """subprocess.run(ARGV, capture_output=True, ...) for a child that ends with podctl:
    on a timeout (TimeoutExpired, as subprocess.run raises it) or any exception in
    podctl, its whole process group is SIGKILLed before the exception goes on."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text,
                          process_group=0, preexec_fn=_dies_with(os.getpid()), **popen) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            _kill_group(proc.pid)  # the leader is not reaped yet: its group id is still its own
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
