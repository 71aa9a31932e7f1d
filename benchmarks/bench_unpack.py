"""Unpacking a host's Python environment: what every host of a new slice does before
its script starts (host/agent_env.py fetches KEY.tar.gz from GCS, checks it and
unpacks it with agent.safe_extract, which refuses members that would land outside).

Three ways, alternated in the same run on the same archive:
  - podctl: safe_extract, one pass over the gzip stream (each member checked, then written);
  - two passes: the same checks after listing every member first (tarfile's
    getmembers(), then extract: the archive is decompressed twice; podctl before);
  - floor: the system's `tar -xzf`, which checks nothing of ours.

    python benchmarks/bench_unpack.py --rounds 3
    python benchmarks/bench_unpack.py --archive PATH.tar.gz   # e.g. a kept host env

Without --archive it packs jax, jaxlib, numpy and scipy from this interpreter's
site-packages (the bulk of a host's environment) with the agent's own settings.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podctl.host.agent import safe_extract  # noqa: E402

PACKAGES = ("jax", "jaxlib", "numpy", "scipy")


def pack(where: Path) -> Path:
    import numpy

    site = Path(numpy.__file__).resolve().parents[1]
    archive = where / "env.tar.gz"
    with open(archive, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        for name in PACKAGES:
            if (site / name).is_dir():
                tar.add(str(site / name), arcname=f"site-packages/{name}")
    return archive


def two_passes(archive: Path, dest: Path) -> int:
    """podctl's checks as they were: every member listed first, then each written."""
    root = os.path.realpath(dest)
    os.makedirs(root, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for m in members:
            if m.name.startswith("/") or ".." in m.name.split("/"):
                raise ValueError(m.name)
            if not os.path.realpath(os.path.join(root, m.name)).startswith(root):
                raise ValueError(m.name)
            options = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extract(m, root, set_attrs=True, **options)
    return len(members)


def system_tar(archive: Path, dest: Path) -> int:
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(dest)], check=True)
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--archive", type=Path)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-unpack-") as tmp:
        work = Path(tmp)
        archive = a.archive or pack(work)
        size = archive.stat().st_size
        ways = {"podctl (one pass)": lambda d: safe_extract(archive, d),
                "two passes (podctl before)": lambda d: two_passes(archive, d),
                "floor: tar -xzf": lambda d: system_tar(archive, d)}
        times: dict[str, list[float]] = {name: [] for name in ways}
        members = 0
        for _ in range(a.rounds):
            for name, way in ways.items():
                dest = work / "out"
                t = time.perf_counter()
                members = way(dest) or members
                times[name].append(time.perf_counter() - t)
                shutil.rmtree(dest)
        unpacked = f"{members} members, {size / 1e6:.0f} MB compressed"
        print(f"archive: {archive if a.archive else ', '.join(PACKAGES)} ({unpacked}); "
              f"{a.rounds} rounds, alternated\n")
        base = statistics.median(times["podctl (one pass)"])
        print("| way | median | vs podctl |")
        print("|---|---|---|")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"| {name} | {m:.2f} s | {m / base:.2f}x |")


if __name__ == "__main__":
    main()
