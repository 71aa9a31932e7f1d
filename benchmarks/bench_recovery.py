"""From preemption to training resumed, on a fake v5p-16, with `podctl run --recover`,
against the floor: a person (or script) who sees the preemption the moment it happens
and types `podctl down`, `podctl up`, `podctl run --resume` at once.

    python benchmarks/bench_recovery.py [--time-scale 60]

Phases of the recovery (each from the line podctl or the run printed, timed as it
arrives here): detect (preemption -> podctl says the attempt ended), delete (-> it
creates the slice again), create (-> the relaunch is prepared), launch (-> started on
all hosts), restore (-> the resumed run's first step line: JAX start, checkpoint
restore, compile, and the log flush). Slice creation runs at the fake's time scale
(a simulated minute per second at 60): on Google Cloud, create dominates.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "templates" / "train_pjit.py"
T = TypeVar("T")
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "8", "--lr", "1e-2", "--checkpoint-every", "4"]


class Watched:
    """A podctl process whose stderr lines are kept with the time each arrived."""

    def __init__(self, env: dict, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "podctl", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[tuple[float, str]] = []
        self.out: list[str] = []
        self._threads = [threading.Thread(target=self._read, args=(self.proc.stderr, True), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stdout, False), daemon=True)]
        for t in self._threads:
            t.start()

    def _read(self, stream, timed: bool) -> None:
        for line in iter(stream.readline, ""):
            if timed:
                self.lines.append((time.monotonic(), line))
            else:
                self.out.append(line)

    def when(self, text: str, after: float = 0.0, timeout: float = 300) -> float:
        deadline = time.monotonic() + timeout
        while True:
            for at, line in list(self.lines):
                if at >= after and text in line:
                    return at
            if self.proc.poll() is not None and not any(text in line for _, line in self.lines):
                raise SystemExit(f"no {text!r}; podctl exited {self.proc.returncode}:\n"
                                 + "".join(line for _, line in self.lines[-30:]))
            if time.monotonic() > deadline:
                raise SystemExit(f"no {text!r} within {timeout}s")
            time.sleep(0.02)

    def wait(self) -> int:
        code = self.proc.wait(timeout=600)
        for t in self._threads:
            t.join(timeout=10)
        return code


def podctl(env: dict, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True, text=True,
                          env=env, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"podctl {' '.join(args)}: {proc.stderr}")
    return proc.stdout


def on_a_fake(*measures: Callable[[dict, Any], T]) -> list[T]:
    """Each MEASURE(env, admin) in turn on one fake cloud started for them in a fresh state
    directory (at the command line's --time-scale), stopped after them: their answers."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-scale", type=float, default=60.0)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PODCTL_STATE_DIR": f"{tmp}/state", "PODCTL_CONFIG_DIR": f"{tmp}/config",
               "PODCTL_BACKEND": "fake", "PODCTL_FAKE_TIME_SCALE": str(a.time_scale)}
        podctl(env, "fake", "start")
        try:
            from podctl.fake.admin.admin_client import FakeAdmin

            admin = FakeAdmin(json.loads(podctl(env, "fake", "status", "--json"))["admin"])
            return [measure(env, admin) for measure in measures]
        finally:
            podctl(env, "fake", "stop")


def main() -> None:
    phases, floor = on_a_fake(recovered, by_hand)
    total = sum(phases.values())
    print("| phase | podctl --recover (s) |")
    print("|---|---:|")
    for name, seconds in phases.items():
        print(f"| {name} | {seconds:.1f} |")
    print(f"| **preemption -> training resumed** | **{total:.1f}** |")
    print(f"floor (down, up, run --resume typed the instant the preemption happened): {floor:.1f} s")
    print(f"recover / floor: {total / floor:.2f}x")


def recovered(env: dict, admin) -> dict[str, float]:
    podctl(env, "up", "--slice", "v5p-16", "--name", "bench-rec")
    # podctl's options before SCRIPT: what follows it is the script's
    run = Watched(env, "run", "bench-rec", "--recover", "1", "--json", str(TEMPLATE), *TINY,
                  "--steps", "40")  # --json: the lines go to stderr, the timed stream
    run.when('"kind": "checkpoint", "step": 8')
    preempted = time.monotonic()
    admin.preempt("bench-rec")
    detected = run.when("recovering (attempt 2", preempted)
    deleted = run.when("creating bench-rec again", detected)
    created = run.when("resuming from", deleted)
    launched = run.when("started on all", created)
    resumed = run.when('"kind": "step"', launched)
    if run.wait() != 0:
        raise SystemExit("the recovered run failed:\n" + "".join(line for _, line in run.lines[-30:]))
    podctl(env, "down", "bench-rec", "--yes")
    return {"detect": detected - preempted, "delete": deleted - detected, "create": created - deleted,
            "launch": launched - created, "restore": resumed - launched}


def by_hand(env: dict, admin) -> float:
    podctl(env, "up", "--slice", "v5p-16", "--name", "bench-hand")
    run = Watched(env, "run", "bench-hand", "--json", str(TEMPLATE), *TINY, "--steps", "40")
    run.when('"kind": "checkpoint", "step": 8')
    preempted = time.monotonic()
    admin.preempt("bench-hand")
    # The person knows at once and acts: the watching client is dropped, not waited on.
    run.proc.kill()
    run.wait()
    run_id = next(line.split()[2] for _, line in run.lines if line.startswith("podctl: run "))
    podctl(env, "down", "bench-hand", "--yes")
    podctl(env, "up", "--slice", "v5p-16", "--name", "bench-hand")
    again = Watched(env, "run", "bench-hand", "--json", "--resume", run_id, str(TEMPLATE), *TINY,
                    "--steps", "40")
    resumed = again.when('"kind": "step"', preempted)
    again.wait()
    podctl(env, "down", "bench-hand", "--yes")
    return resumed - preempted


if __name__ == "__main__":
    main()
