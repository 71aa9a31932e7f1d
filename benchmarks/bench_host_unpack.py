"""CPU of a host's unpacking of the run's environment, and of its deletion with the slice.

Every host of a fresh slice (every fake host of every JAX test) streams the client's
archive through `zstd -d | tar -x` (host/agent_env_fetch.py), and the fake deletes the
tree with the node (`rm -rf` of its trash). Each archive named is unpacked into a fresh
directory under --dir and deleted again, the archives alternated round by round; CPU is
the children's user + sys (zstd, tar, rm), entries are the archive's members.

    python benchmarks/bench_host_unpack.py --rounds 3 BEFORE.tar.zst AFTER.tar.zst
    python benchmarks/bench_host_unpack.py --rounds 2 --dir /dev/shm AFTER.tar.zst   # tmpfs

The archives are STATE_DIR/envs/KEY.packages.tar.zst, as `podctl demo` or a run built them.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import tempfile
from pathlib import Path


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def entries(archive: Path) -> int:
    listed = subprocess.run(f"zstd -d -q -c '{archive}' | tar -t | wc -l", shell=True, check=True,
                            capture_output=True, text=True)
    return int(listed.stdout)


def label(archive: Path) -> str:
    """The archive's last three path parts: state directories differ, environment keys not."""
    return "/".join(archive.parts[-4:])


def one(archive: Path, where: Path) -> tuple[float, float]:
    """(CPU of the unpacking, CPU of the deletion), seconds."""
    dest = Path(tempfile.mkdtemp(prefix="unpack-", dir=where))
    before = children_cpu()
    subprocess.run(f"zstd -d -q -c '{archive}' | tar -x -f - -C '{dest}' --no-same-owner", shell=True,
                   check=True)
    unpacked = children_cpu()
    subprocess.run(["rm", "-rf", "--", str(dest)], check=True)
    return unpacked - before, children_cpu() - unpacked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archives", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    a = parser.parse_args()
    counts = {p: entries(p) for p in a.archives}
    times: dict[Path, list[tuple[float, float]]] = {p: [] for p in a.archives}
    for r in range(a.rounds):
        for p in (a.archives if r % 2 == 0 else a.archives[::-1]):
            times[p].append(one(p, a.dir))
            print(f"round {r + 1} {label(p)}: unpack {times[p][-1][0]:.2f} s, delete {times[p][-1][1]:.2f} s "
                  "of CPU", flush=True)
    base = statistics.median(u for u, _ in times[a.archives[0]])
    print("\n| archive | entries | MB | unpack CPU (median) | each | delete CPU (median) | vs the first |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for p in a.archives:
        unpack = statistics.median(u for u, _ in times[p])
        print(f"| {label(p)} | {counts[p]:,} | {p.stat().st_size / 1e6:.1f} | {unpack:.2f} s | "
              f"{', '.join(f'{u:.2f}' for u, _ in times[p])} | "
              f"{statistics.median(d for _, d in times[p]):.2f} s | {unpack / base:.2f}x |")


if __name__ == "__main__":
    main()
