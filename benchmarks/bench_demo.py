"""`podctl demo`'s wall time by phase, against the floor: the same two trainings
(STEPS steps, then resumed for MORE more) run directly as two local processes with
`jax.distributed` and a local checkpoint directory: no fake cloud, no SSH, no GCS.

    python benchmarks/bench_demo.py [--steps 30] [--more-steps 10]

The ratio is what the lifecycle around the training costs on this machine: the fake
cloud's start and stop, `up`, bundling, SSH fan-out, log shipping through GCS,
checkpoints to the GCS emulator rather than a local disk, and `down`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from podctl.demo import MODEL_ARGS  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def floor_run(steps: int, ckpt: Path, every: int) -> float:
    """Two processes x 4 CPU devices on this machine, as the fake v5p-16's two hosts."""
    port = _free_port()
    began = time.monotonic()
    procs = []
    for pid in range(2):
        env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
               "JAX_PLATFORMS": "cpu", "PODCTL_NUM_PROCESSES": "2", "PODCTL_PROCESS_ID": str(pid),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "PODCTL_CHECKPOINT_DIR": str(ckpt)}
        procs.append(subprocess.Popen(
            [sys.executable, str(REPO / "templates" / "train_pjit.py"), *MODEL_ARGS, "--steps", str(steps),
             "--checkpoint-every", str(every)], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise SystemExit(f"floor run failed: exit codes {codes}")
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--more-steps", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    a = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PODCTL_STATE_DIR": f"{tmp}/state", "PODCTL_CONFIG_DIR": f"{tmp}/config"}
        began = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "podctl", "demo", "--json", "--steps", str(a.steps),
                               "--more-steps", str(a.more_steps), "--checkpoint-every",
                               str(a.checkpoint_every)], capture_output=True, text=True, env=env)
        demo_wall = time.monotonic() - began
        if proc.returncode != 0:
            raise SystemExit(f"podctl demo failed:\n{proc.stderr[-2000:]}")
        summary = json.loads(proc.stdout)
        ckpt = Path(tmp) / "floor-ckpt"
        floor = floor_run(a.steps, ckpt, a.checkpoint_every)
        floor += floor_run(a.steps + a.more_steps, ckpt, a.checkpoint_every)

    print(f"podctl demo (--steps {a.steps} --more-steps {a.more_steps}): {demo_wall:.1f} s wall")
    print("| phase | seconds |")
    print("|---|---:|")
    for name, seconds in summary["phases"].items():
        print(f"| {name} | {seconds:.1f} |")
    print(f"| **total** | **{demo_wall:.1f}** |")
    print(f"floor (the two trainings as local processes, local checkpoints): {floor:.1f} s")
    print(f"demo / floor: {demo_wall / floor:.2f}x")


if __name__ == "__main__":
    main()
