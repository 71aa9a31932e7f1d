"""The host agent's view of its script for podctl's stall watch (stdlib only: shipped
with agent.py and run by a bare host's python3).

  - progress: the step the script last finished, which the template (or any script)
    writes to $PODCTL_PROGRESS_FILE as {"step": N, "t": UNIX_SECONDS};
  - the script's JAX process index, which it writes to the same file as {"process": N}
    (jax.process_index(), which the TPU runtime assigns: not always the host's number);
  - the script's process: its state (R running, S sleeping, D in I/O, T stopped, Z)
    and the CPU seconds it has used, from /proc;
  - stacks on request (`podctl` sends the agent SIGUSR1), taken in ways that cannot
    kill the script: SIGUSR1 goes to the script only when it has said that it handles
    it (SIGUSR1's default action ends a process: a script without a handler would die
    of the evidence-taking). A script says so by writing its pid to
    $PODCTL_STACKS_HANDLER_FILE once its handler is registered (the template registers
    faulthandler, which writes every thread's Python stack to $PODCTL_STACKS_FILE);
    py-spy dumps it too where installed, and /proc gives every thread's state and
    kernel wait channel either way. What was found is written to one text file for the
    agent to upload.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

try:  # on a host: the agent's zip holds its sibling modules at the top level
    import metric_line
except ImportError:  # imported by podctl itself
    from podctl.host import metric_line

PROGRESS_FILE = "progress.json"
STACKS_FILE = "stacks.txt"
STACKS_HANDLER_FILE = "stacks-handler"  # the script's pid, once it handles SIGUSR1
STACKS_WAIT_SECONDS = 5.0  # for the script's faulthandler to write its stacks
PY_SPY_SECONDS = 20.0


def _progress(run_dir: Path) -> object:
    """The progress file's JSON, or None. The script writes it: it is read as any JSON a
    script wrote (bounded in size and depth), so no content can break the heartbeats."""
    try:
        with open(run_dir / PROGRESS_FILE, encoding="utf-8", errors="replace") as f:
            return metric_line.loads_bounded(f.read(metric_line.MAX_CHARS + 1))
    except (OSError, ValueError):
        return None


def read_progress(run_dir: Path) -> dict[str, Any] | None:
    """{"step": N, "t": ...} as the script last wrote it, or None."""
    data = _progress(run_dir)
    return data if isinstance(data, dict) and isinstance(data.get("step"), int) else None


class ProcessIndex:
    """The script's JAX process index, once its progress file names it. Cheap to ask
    often (the agent asks before it logs each batch of the script's lines, so the line a
    script prints right after writing the file is already labelled): a stat, and a read
    only when the file changed; once known it is not read again (a process keeps its
    index for its life)."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / PROGRESS_FILE
        self.value: int | None = None
        self._seen: tuple[int, int] | None = None

    def check(self) -> int | None:
        """The index if it became known just now, else None (also when known before)."""
        if self.value is not None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if (st.st_mtime_ns, st.st_size) == self._seen:
            return None
        self._seen = (st.st_mtime_ns, st.st_size)
        self.value = read_process(self.path.parent)
        return self.value


def read_process(run_dir: Path) -> int | None:
    """The "process" (a JAX process index: an int >= 0) the script last wrote, or None."""
    data = _progress(run_dir)
    index = data.get("process") if isinstance(data, dict) else None
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else None


def process_state(pid: int | None) -> dict[str, Any] | None:
    """{"state": "R|S|D|T|Z|...", "cpu_s": user+system seconds} of process PID, or None."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = stat[stat.rindex(")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"state": fields[0], "cpu_s": round((int(fields[11]) + int(fields[12])) / ticks, 2)}


def declared_handler(pid: int, run_dir: Path) -> int | None:
    """The pid the script (session PID) wrote to $PODCTL_STACKS_HANDLER_FILE, saying it
    handles SIGUSR1, when that pid is still one of the script's own processes; else None."""
    try:
        declared = int((run_dir / STACKS_HANDLER_FILE).read_text().strip())
        return declared if declared > 0 and os.getsid(declared) == pid else None
    except (OSError, ValueError):  # none written, not a pid, or no such process now
        return None


def proc_evidence(pid: int) -> list[str]:
    """What /proc tells of process PID without touching it: each thread's state, name
    and kernel wait channel (where a hung or stopped thread sits)."""

    def read(path: str) -> str:
        try:
            return Path(path).read_text(errors="replace").strip()
        except OSError:
            return "?"

    lines = [f"-- /proc/{pid}: wchan {read(f'/proc/{pid}/wchan') or '-'}"]
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError as e:
        return lines + [f"threads: {e}"]
    for tid in tids[:256]:
        stat = read(f"/proc/{pid}/task/{tid}/stat")
        state = stat[stat.rindex(")") + 2:].split(" ", 1)[0] if ")" in stat else "?"
        lines.append(f"thread {tid} ({read(f'/proc/{pid}/task/{tid}/comm')}): state {state}, "
                     f"wchan {read(f'/proc/{pid}/task/{tid}/wchan') or '-'}")
    if len(tids) > 256:
        lines.append(f"... and {len(tids) - 256} more threads")
    return lines


def capture_stacks(pid: int, run_dir: Path, host_tag: str) -> str:
    """Every thread's stack of the script PID, as far as it can be had without harming
    it: its own faulthandler (SIGUSR1, only to a process that declared a handler),
    py-spy where installed, and /proc either way (a stopped or hung process answers no
    signal)."""
    stacks = run_dir / STACKS_FILE
    before = stacks.stat().st_size if stacks.exists() else 0
    parts = [f"== {host_tag}: script pid {pid}, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
             f"process: {process_state(pid)}"]
    handler = declared_handler(pid, run_dir)
    if handler is None:
        parts.append("-- faulthandler: not asked (the script has not declared a SIGUSR1 handler "
                     "in $PODCTL_STACKS_HANDLER_FILE; without one SIGUSR1 would end it)")
    else:
        try:
            os.kill(handler, signal.SIGUSR1)
        except OSError as e:
            parts.append(f"SIGUSR1: {e}")
        deadline = time.monotonic() + STACKS_WAIT_SECONDS
        while time.monotonic() < deadline:
            if stacks.exists() and stacks.stat().st_size > before:
                time.sleep(0.2)  # the rest of the dump
                break
            time.sleep(0.1)
        if stacks.exists() and stacks.stat().st_size > before:
            with open(stacks, "rb") as f:
                f.seek(before)
                parts += ["-- faulthandler (the script's own dump):",
                          f.read().decode("utf-8", errors="replace")]
        else:
            parts.append(f"-- faulthandler: no answer to SIGUSR1 within {STACKS_WAIT_SECONDS:.0f} s "
                         "(the process is stopped or hung in native code)")
    spy = shutil.which("py-spy")
    if spy:
        try:
            out = subprocess.run([spy, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True,
                                 text=True, timeout=PY_SPY_SECONDS)
            parts += ["-- py-spy dump:", out.stdout + out.stderr]
        except (OSError, subprocess.SubprocessError) as e:
            parts.append(f"-- py-spy: {e}")
    parts += proc_evidence(pid)
    if handler is not None and handler != pid:
        parts += proc_evidence(handler)
    return "\n".join(parts) + "\n"
