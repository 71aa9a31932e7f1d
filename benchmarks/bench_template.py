"""templates/train_pjit.py on one host with 4 CPU devices: sharded vs --no-shard.

    python benchmarks/bench_template.py [--rounds 2] [--steps 8] [--mesh fsdp=4 --mesh data=4]
                                        [-- MORE TEMPLATE FLAGS]

Each configuration is a fresh process of the template (the same model flags, no
checkpoints); the rounds alternate the configurations so that a busy spell on this
shared machine hits all of them alike. A process's first step (compilation) is left
out; the figure per configuration is the median step time over every other step of
every round, and tokens/s is the global batch's tokens over that; the fastest
single step is shown too (the least disturbed by other load). The ratio is sharded /
unsharded step time (below 1.0 = the sharded run is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "templates" / "train_pjit.py"
MODEL = ["--layers", "4", "--d-model", "256", "--heads", "4", "--d-ff", "1024",
         "--seq-len", "128", "--batch", "32", "--vocab", "256"]


def run(flags: list[str], steps: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCTL_")}
    env.update({"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})
    proc = subprocess.run([sys.executable, str(SCRIPT), *flags, "--steps", str(steps),
                           "--checkpoint-dir", "none"], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"template {' '.join(flags)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--mesh", action="append", help="sharded configuration(s); default fsdp=4")
    p.add_argument("extra", nargs="*", help="more template flags (after --)")
    a = p.parse_args()
    configs = {"--no-shard": ["--no-shard"]}
    for mesh in a.mesh or ["fsdp=4"]:
        configs[f"--mesh {mesh}"] = ["--mesh", mesh]
    times: dict[str, list[float]] = {name: [] for name in configs}
    tokens = params = None
    for r in range(a.rounds):
        for name, flags in (configs.items() if r % 2 == 0 else reversed(configs.items())):
            lines = run(MODEL + a.extra + flags, a.steps)
            config = next(m for m in lines if m["kind"] == "config")
            tokens, params = config["batch"] * config["seq_len"], config["params"]
            steps = [m for m in lines if m["kind"] == "step" and not m.get("compile")]
            times[name] += [m["step_time_s"] for m in steps]
            print(f"round {r + 1} {name:16s} median step "
                  f"{statistics.median(m['step_time_s'] for m in steps):.3f} s", file=sys.stderr)
    base = statistics.median(times["--no-shard"])
    best_base = min(times["--no-shard"])
    print(f"model: {' '.join(MODEL + a.extra)} ({params:,} params), {tokens} tokens/step, "
          f"{a.rounds} rounds x {a.steps - 1} timed steps")
    print(f"{'configuration':18s} {'step (median)':>14s} {'tokens/s':>10s} {'vs --no-shard':>14s}"
          f" {'fastest step':>13s} {'vs --no-shard':>14s}")
    for name, ts in times.items():
        med, best = statistics.median(ts), min(ts)
        print(f"{name:18s} {med:12.3f} s {tokens / med:10.0f} {med / base:13.2f}x"
              f" {best:11.3f} s {best / best_base:13.2f}x")


if __name__ == "__main__":
    main()
