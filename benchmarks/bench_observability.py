"""The template's TensorBoard scalars and its watch for `podctl profile` requests: what
they add to a step. templates/train_pjit.py on one host with 4 CPU devices, a small
model (short steps make any per-step cost show), without checkpoints:

    python benchmarks/bench_observability.py [--rounds 2] [--steps 200]

baseline: `--tensorboard-dir none` and no PODCTL_CONTROL_DIR (neither runs);
observed: scalars to a local directory (tensorboardX) and an empty control directory
watched between steps (a directory read at most once a second). Each configuration is
a fresh process; the rounds alternate them so a busy spell on this shared machine hits
both alike. The figure is the median step time (the template's step_time_s, which with
no checkpoints spans from one step's end to the next: the metric line, the scalars
and the watch included), compile step left out; the ratio is observed / baseline.
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
MODEL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "256", "--seq-len", "64",
         "--batch", "16", "--vocab", "256"]


def run(flags: list[str], steps: int, control: str | None) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCTL_")}
    env.update({"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})
    if control:
        env["PODCTL_CONTROL_DIR"] = control
    proc = subprocess.run([sys.executable, str(SCRIPT), *MODEL, *flags, "--steps", str(steps),
                           "--checkpoint-dir", "none"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"template exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [m["step_time_s"] for m in lines if m["kind"] == "step" and not m.get("compile")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=200)
    a = p.parse_args()
    times: dict[str, list[float]] = {"baseline": [], "observed": []}
    with tempfile.TemporaryDirectory() as tmp:
        control = Path(tmp, "control")
        control.mkdir()
        configs = {"baseline": (["--tensorboard-dir", "none"], None),
                   "observed": (["--tensorboard-dir", str(Path(tmp, "tb"))], str(control))}
        for r in range(a.rounds):
            order = list(configs.items()) if r % 2 == 0 else list(reversed(configs.items()))
            for name, (flags, ctl) in order:
                steps = run(flags, a.steps, ctl)
                times[name] += steps
                print(f"round {r + 1} {name:9s} median step {statistics.median(steps) * 1e3:.2f} ms",
                      file=sys.stderr)
    base, seen = statistics.median(times["baseline"]), statistics.median(times["observed"])
    print("| configuration | median step | steps | vs baseline |")
    print("|---|---:|---:|---:|")
    print(f"| baseline (no scalars, no watch) | {base * 1e3:.2f} ms | {len(times['baseline'])} | 1.000x |")
    print(f"| scalars + profile watch | {seen * 1e3:.2f} ms | {len(times['observed'])} | "
          f"{seen / base:.3f}x |")


if __name__ == "__main__":
    main()
