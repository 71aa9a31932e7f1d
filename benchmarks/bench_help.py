"""Cold start of `podctl --help` beside `python -c pass`, median of several runs.

    python benchmarks/bench_help.py [--runs 15]

Each run is a fresh process, so every import is paid; the ratio to a bare
interpreter start is what survives a noisy machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def median_ms(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    podctl = shutil.which("podctl") or sys.exit("podctl is not on PATH: pip install -e . first")
    median_ms([podctl, "--help"], 2)  # warm the page cache, not the interpreter
    base = median_ms([sys.executable, "-c", "pass"], args.runs)
    helps = median_ms([podctl, "--help"], args.runs)
    up_help = median_ms([podctl, "up", "--help"], args.runs)
    print(f"python -c pass     {base:7.1f} ms (median of {args.runs})")
    print(f"podctl --help      {helps:7.1f} ms  ratio {helps / base:4.1f}x  (target < 150 ms)")
    print(f"podctl up --help   {up_help:7.1f} ms  ratio {up_help / base:4.1f}x")


if __name__ == "__main__":
    main()
