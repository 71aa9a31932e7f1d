"""CPU of every process a command starts, by process and by part of a JAX run on the fake.

tools/cpu.py's total (a child subreaper: orphans, daemons and fake hosts are reaped here),
plus /proc sampled every 0.2 s: each process's utime + stime (the last seen; a process
that lives under 0.2 s is missed, so the parts sum a little under the total) and its
threads'. The parts: the JAX training processes, the environment's unpack (zstd, tar),
the agents, the watchers, the fake's daemon, its `rm -rf` of deleted hosts, the client.

    python tools/cpu_parts.py python -m podctl demo
    python tools/cpu_parts.py --json parts.json python -m pytest -q tests/e2e/test_template.py

benchmarks/README.md (issue 36's section) has the figures.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections import defaultdict

from cpu import run_reaping  # tools/cpu.py: the subreaper that counts daemons too

TICK = os.sysconf("SC_CLK_TCK")


def _stat(path: str) -> tuple[str, int, int] | None:
    """(comm, ppid, utime + stime in ticks) from a /proc stat file."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    close = text.rindex(")")
    fields = text[close + 2:].split()
    return text[text.index("(") + 1:close], int(fields[1]), int(fields[11]) + int(fields[12])


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return ""


class Sampler:
    def __init__(self) -> None:
        self.seen: dict[int, dict] = {}  # pid -> cmd, cpu (ticks), thread names

    def sample(self) -> None:
        children: dict[int, list[int]] = defaultdict(list)
        stats = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (stat := _stat(f"/proc/{entry}/stat")) is not None:
                stats[int(entry)] = stat
                children[stat[1]].append(int(entry))
        stack = [os.getpid()]
        while stack:
            for pid in children.get(stack.pop(), []):
                stack.append(pid)
                info = self.seen.setdefault(pid, {"cmd": "", "threads": set()})
                info["cpu"] = stats[pid][2]
                info["cmd"] = _cmdline(pid) or info["cmd"] or stats[pid][0]  # after an exec too
                try:
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        if (thread := _stat(f"/proc/{pid}/task/{tid}/stat")) is not None:
                            info["threads"].add(thread[0])
                except OSError:
                    pass


def part(cmd: str, threads: set[str]) -> str:
    if "train_pjit" in cmd or "tf_XLAEigen" in threads:
        return "JAX training processes"
    if cmd.startswith(("tar ", "/usr/bin/zstd", "zstd ")):
        return "the environment's unpack (zstd, tar)"
    if "/agents/" in cmd:
        return "agents"
    if "host_watch" in cmd:
        return "watchers"
    if "podctl.fake.admin.daemon" in cmd:
        return "the fake's daemon (API, GCS, metadata, SSH)"
    if cmd.startswith("rm -rf"):
        return "the fake's rm of deleted hosts"
    if "podctl" in cmd or "pytest" in cmd:
        return "the client (or pytest)"
    return "other"


def main() -> int:
    argv, out = sys.argv[1:], None
    if argv[:1] == ["--json"]:
        out, argv = argv[1], argv[2:]
    sampler, done = Sampler(), threading.Event()

    def loop() -> None:
        while not done.is_set():
            sampler.sample()
            time.sleep(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    code, wall = run_reaping(argv)
    done.set()
    thread.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    parts: dict[str, float] = defaultdict(float)
    for info in sampler.seen.values():
        parts[part(info["cmd"], info["threads"])] += info["cpu"] / TICK
    for name, cpu in sorted(parts.items(), key=lambda item: -item[1]):
        print(f"{cpu:8.1f} s  {name}", file=sys.stderr)
    print(f"CPU {usage.ru_utime:.1f} user {usage.ru_stime:.1f} sys, {wall:.1f} s wall", file=sys.stderr)
    if out:
        with open(out, "w") as f:
            json.dump({"user": usage.ru_utime, "sys": usage.ru_stime, "wall": wall, "parts": parts,
                       "processes": [{"pid": pid, "cmd": i["cmd"], "cpu": i["cpu"] / TICK}
                                     for pid, i in sampler.seen.items()]}, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
