"""`podctl preflight` of the training template for a large slice beside the same model's
preflight for v5p-8 (the baseline, in the same run): wall time, compile time and the
peak memory of the compile's process.

    python benchmarks/bench_preflight.py [--slice v5p-4096] [--model default|7b]

`default` is the template at its default size (3.2M parameters; replicated on 2,048
chips, since no dim divides by 2,048). `7b` is a 6.6B-parameter model sharded over the
whole slice (d_model 4096, 32 layers, seq 2048, global batch 2048, --remat). A compile
per slice size; the figures go in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

TEMPLATE = str(Path(__file__).resolve().parents[1] / "templates" / "train_pjit.py")
MODELS = {
    "default": [],
    "7b": ["--d-model", "4096", "--heads", "32", "--d-ff", "16384", "--layers", "32",
           "--seq-len", "2048", "--vocab", "32768", "--remat"],
}


def preflight(podctl: str, slice_type: str, args: list[str]) -> tuple[dict, float, float]:
    """(report, wall seconds, peak RSS in MiB of the largest process: the compile's)."""
    start = time.perf_counter()
    proc = subprocess.Popen([podctl, "preflight", "--slice", slice_type, TEMPLATE, *args, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"podctl preflight --slice {slice_type} exited {proc.returncode}")
    # ru_maxrss of a waited-for child covers its own waited-for children (the compile)
    return json.loads(out), wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slice", default="v5p-4096")
    parser.add_argument("--model", choices=sorted(MODELS), default="default")
    a = parser.parse_args()
    podctl = shutil.which("podctl") or sys.exit("podctl is not on PATH: pip install -e '.[jax,tpu]'")
    rows = []
    for slice_type in ("v5p-8", a.slice):
        batch = 2048 if a.model == "7b" else 32
        if slice_type != "v5p-8" and a.model == "default":
            batch = max(32, int(slice_type.split("-")[1]) // 2)  # a multiple of fsdp = chips
        elif slice_type == "v5p-8" and a.model == "7b":
            batch = 32  # the same model's baseline on 4 chips (it will not fit: timed anyway)
        report, wall, rss = preflight(podctl, slice_type, [*MODELS[a.model], "--batch", str(batch)])
        rows.append((slice_type, report, wall, rss))
    base = rows[0]
    for slice_type, r, wall, rss in rows:
        fits = "fits" if r["fits"] else "does not fit"
        print(f"{slice_type:10s} {r['chips']:5d} chips  wall {wall:7.1f} s ({wall / base[2]:5.1f}x)  "
              f"compile {r['compile_seconds']:7.1f} s  peak {rss:7.0f} MiB ({rss / base[3]:4.1f}x)  "
              f"{fits}, {r['hbm']['needed_bytes'] / 2**30:.2f} GiB/chip, "
              f"{(r['flops']['per_step'] or 0):.3e} FLOPs/step")


if __name__ == "__main__":
    main()
