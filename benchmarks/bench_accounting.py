"""The cost of podctl's goodput accounting and stall watch to a training step.

    python benchmarks/bench_accounting.py [--rounds 3] [--steps 30]

What a step pays on the host for them: the template writes the step it finished to
$PODCTL_PROGRESS_FILE (the agent reads it into its heartbeats, every 10 s, off the
step's path) and stamps each metric line with its time; faulthandler is registered on
SIGUSR1 with $PODCTL_STACKS_FILE. The baseline is the same template, same model, in the
same run, with neither file given (no progress written, stacks to stderr). Rounds
alternate the two so that load on this shared machine hits both alike; the figure is
the median step time (the compiling step left out) and the ratio watched / baseline
(target: under 1.01).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "templates" / "train_pjit.py"
MODEL = ["--layers", "2", "--d-model", "128", "--heads", "4", "--d-ff", "512",
         "--seq-len", "64", "--batch", "16", "--vocab", "256", "--mesh", "fsdp=4"]


def run(steps: int, watched: bool, tmp: Path) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCTL_")}
    env.update({"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})
    if watched:
        env.update({"PODCTL_PROGRESS_FILE": str(tmp / "progress.json"),
                    "PODCTL_STACKS_FILE": str(tmp / "stacks.txt")})
    proc = subprocess.run([sys.executable, str(SCRIPT), *MODEL, "--steps", str(steps),
                           "--checkpoint-dir", "none"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"template exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if watched:
        assert json.loads((tmp / "progress.json").read_text())["step"] == steps
    return [m["step_time_s"] for m in lines if m["kind"] == "step" and not m.get("compile")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    a = p.parse_args()
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for watched in ((False, True) if r % 2 == 0 else (True, False)):
                times[watched] += run(a.steps, watched, Path(tmp))
    base, watched = statistics.median(times[False]), statistics.median(times[True])
    print(f"baseline (no accounting files) median step {base * 1000:.2f} ms over {len(times[False])} steps")
    print(f"with progress + stacks files   median step {watched * 1000:.2f} ms over {len(times[True])} steps")
    print(f"ratio watched / baseline: {watched / base:.3f}")


if __name__ == "__main__":
    main()
