"""Evidence-taking never harms the patient: the agent takes a script's stacks without
signals it may not handle (agent_watch.capture_stacks, on real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from podctl.host import agent_watch

# A script without a SIGUSR1 handler: SIGUSR1's default action would end it (exit 138).
PLAIN = "import time; print('up', flush=True); time.sleep(60)"
# The template's way: faulthandler on SIGUSR1 into $PODCTL_STACKS_FILE, then its pid
# written to $PODCTL_STACKS_HANDLER_FILE to say so.
HANDLER = """
import faulthandler, os, signal, time
f = open(os.environ["PODCTL_STACKS_FILE"], "a")
faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
declare = os.environ["PODCTL_STACKS_HANDLER_FILE"]
open(declare + ".tmp", "w").write(str(os.getpid())); os.replace(declare + ".tmp", declare)
def waiting_in_a_named_function():
    print("up", flush=True)
    time.sleep(60)
waiting_in_a_named_function()
"""


def _start(code: str, run_dir: Path) -> subprocess.Popen:
    env = {**os.environ,
           "PODCTL_STACKS_FILE": str(run_dir / agent_watch.STACKS_FILE),
           "PODCTL_STACKS_HANDLER_FILE": str(run_dir / agent_watch.STACKS_HANDLER_FILE)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)  # as the agent starts a script
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc


def _end(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_a_script_without_a_handler_is_not_signalled_and_lives_on(tmp_path):
    proc = _start(PLAIN, tmp_path)
    try:
        text = agent_watch.capture_stacks(proc.pid, tmp_path, "host-0000")
        time.sleep(0.5)  # a signal, had one been sent, would have landed by now
        assert proc.poll() is None, f"the script died: {proc.returncode}"
        assert "faulthandler: not asked" in text
        assert f"-- /proc/{proc.pid}: wchan" in text and f"thread {proc.pid} (python" in text
    finally:
        _end(proc)


def test_a_script_that_declared_its_handler_gives_its_python_stacks(tmp_path):
    proc = _start(HANDLER, tmp_path)
    try:
        text = agent_watch.capture_stacks(proc.pid, tmp_path, "host-0000")
        assert proc.poll() is None
        assert "faulthandler (the script's own dump)" in text
        assert "waiting_in_a_named_function" in text
    finally:
        _end(proc)


def test_a_declared_pid_that_is_not_the_scripts_is_not_signalled(tmp_path):
    """A stale or forged declaration (another process's pid) gets no signal."""
    bystander = _start(PLAIN, tmp_path)
    script = _start(PLAIN, tmp_path)
    try:
        (tmp_path / agent_watch.STACKS_HANDLER_FILE).write_text(str(bystander.pid))
        text = agent_watch.capture_stacks(script.pid, tmp_path, "host-0000")
        time.sleep(0.5)
        assert bystander.poll() is None and script.poll() is None
        assert "faulthandler: not asked" in text
    finally:
        _end(bystander)
        _end(script)
