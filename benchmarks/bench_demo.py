"""`podctl demo`'s wall time by phase, first run and later run, against the floor: the
same two trainings (STEPS steps, then resumed for MORE more) run directly as two local
processes with `jax.distributed` and a local checkpoint directory: no fake cloud, no
SSH, no GCS, no environment to build or fetch.

    python benchmarks/bench_demo.py [--steps 20] [--more-steps 10] [--rounds 1]
                                    [--before DIR]   # a checkout of an earlier podctl

Each configuration runs in the same benchmark run, alternating: per round, every
configuration's first demo (a fresh state directory: the hosts' environment built from
the package index through uv's cache), the floor, then every configuration's later demo
(the same state directory: the environment packed, or in the fake's GCS, already). With
--before DIR the demo of the podctl checked out at DIR runs beside this one (`git
worktree add --detach DIR 23ee834`: the commit before the client-built environment),
imported from DIR by PYTHONPATH, with this venv's packages. The load average is printed
at the start and the end: on a shared machine only the ratios carry.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from podctl.demo import MODEL_ARGS  # noqa: E402
from podctl.fake.vm.hosts import CPU_COMPILE_FLAGS  # noqa: E402


def _environ() -> dict[str, str]:
    """This environment without PYTHONDONTWRITEBYTECODE (set on some CI machines): a user's
    client, daemon and the floor keep their bytecode, as the fake's hosts do."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


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
        # the fake's hosts' XLA flags (their CPU stand-in's -O0 compile), so the floor is theirs
        env = {**_environ(), "XLA_FLAGS": f"--xla_force_host_platform_device_count=4 {CPU_COMPILE_FLAGS}",
               "JAX_PLATFORMS": "cpu", "PODCTL_NUM_PROCESSES": "2", "PODCTL_PROCESS_ID": str(pid),
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "PODCTL_CHECKPOINT_DIR": str(ckpt)}
        procs.append(subprocess.Popen(
            [sys.executable, str(REPO / "templates" / "train_pjit.py"), *MODEL_ARGS, "--steps", str(steps),
             "--checkpoint-every", str(every)], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
    codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        raise SystemExit(f"floor run failed: exit codes {codes}")
    return time.monotonic() - began


# What the demo's lines say, in order, within each training (`_printer`: host 0's lines)
_MARKS = (("running", ": running"), ("env", "[podctl] env "), ("jax_up", " parameters on "),
          ("step1", "(compile)"), ("done", "| done at step"), ("ended", ": succeeded"))
# a training's parts, from one mark to the next: the lines come through GCS (shipped every
# 2 s, read every 0.5 s), so each mark is late by up to 2.5 s, and the differences less
PARTS = (("env fetch (agent start, bundle, environment)", "running", "env"),
         ("JAX start (imports, jax.distributed, model)", "env", "jax_up"),
         ("compile + step 1", "jax_up", "step1"),
         ("steps + checkpoints", "step1", "done"),
         ("end (exit, last logs, statuses)", "done", "ended"))


def demo(tree: Path, state: Path, a: argparse.Namespace) -> tuple[float, dict[str, float], list[dict]]:
    """One `podctl demo` of the podctl at TREE with STATE as its state directory ->
    (wall, the demo's phases, each training's marks: seconds since the demo began)."""
    env = {**_environ(), "PODCTL_STATE_DIR": str(state / "state"), "PODCTL_CONFIG_DIR": str(state / "config"),
           "PYTHONPATH": str(tree)}
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "podctl", "demo", "--json", "--steps", str(a.steps),
                             "--more-steps", str(a.more_steps), "--checkpoint-every", str(a.checkpoint_every)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
    out: list[str] = []
    reading = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""))
    reading.start()
    trainings: list[dict[str, float]] = []
    said: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        said.append(line)
        now = time.monotonic() - began
        if line.startswith(("2/6 train", "4/6 resume")):
            trainings.append({})
        for mark, words in _MARKS:
            # the environment's last line before JAX's (a build on host 0 says several)
            again = mark == "env" and "jax_up" not in (trainings[-1] if trainings else {})
            if trainings and words in line and (mark not in trainings[-1] or again):
                trainings[-1][mark] = now
    code = proc.wait()
    reading.join()
    wall = time.monotonic() - began
    if code != 0:
        raise SystemExit(f"podctl demo at {tree} failed:\n{''.join(said)[-3000:]}")
    return wall, json.loads(out[0])["phases"], trainings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--more-steps", type=int, default=10)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", type=Path, help="a checkout of the podctl to compare with")
    parser.add_argument("--reverse", action="store_true", help="the earlier podctl first in round 1")
    a = parser.parse_args()

    trees = {"after": REPO, **({"before": a.before.resolve()} if a.before else {})}
    walls: dict[str, list[float]] = {}
    phases: dict[str, list[dict[str, float]]] = {}
    floors: list[float] = []
    parts: dict[str, list[dict[str, float]]] = {}
    load = os.getloadavg()
    print(f"load average at the start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} cores)",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        for round_ in range(a.rounds):
            for when in ("first", "later"):
                # every other round the other order: a load that changes meets both alike
                order = list(trees.items())[::-1 if (round_ + a.reverse) % 2 else 1]
                for name, tree in order:
                    key = f"{name} {when}"
                    wall, got, marks = demo(tree, Path(tmp) / f"{name}-{round_}", a)
                    walls.setdefault(key, []).append(wall)
                    phases.setdefault(key, []).append(got)
                    for which, training in zip(("train", "resume"), marks):
                        parts.setdefault(f"{key}, {which}", []).append(
                            {label: training[b] - training[a_] for label, a_, b in PARTS
                             if a_ in training and b in training})
                    print(f"round {round_ + 1}: {key}: {wall:.1f} s {got}", flush=True)
                if when == "first":
                    ckpt = Path(tmp) / f"floor-ckpt-{round_}"
                    floors.append(floor_run(a.steps, ckpt, a.checkpoint_every)
                                  + floor_run(a.steps + a.more_steps, ckpt, a.checkpoint_every))
                    print(f"round {round_ + 1}: floor: {floors[-1]:.1f} s", flush=True)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")

    floor = statistics.median(floors)
    keys = list(walls)
    names = sorted({n for p in phases.values() for d in p for n in d}, key=lambda n: _ORDER.get(n, 99))
    print(f"\npodctl demo (--steps {a.steps} --more-steps {a.more_steps}), median of {a.rounds} round(s), seconds")
    print("| phase | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name in names:
        cells = [statistics.median(d.get(name, 0.0) for d in phases[k]) for k in keys]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    print("| **total** | " + " | ".join(f"**{statistics.median(walls[k]):.1f}**" for k in keys) + " |")
    print("| demo / floor | " + " | ".join(f"{statistics.median(walls[k]) / floor:.2f}x" for k in keys) + " |")
    print(f"floor (the two trainings as local processes, local checkpoints): {floor:.1f} s")
    print("\nwhere each training's time goes (from the demo's lines), seconds")
    print("| part | " + " | ".join(parts) + " |")
    print("|---|" + "---:|" * len(parts))
    for label, _, _ in PARTS:
        print(f"| {label} | " + " | ".join(
            f"{statistics.median(d[label] for d in parts[k] if label in d):.1f}"
            if any(label in d for d in parts[k]) else "–" for k in parts) + " |")
    for when in ("first", "later"):
        if f"before {when}" in walls:
            ratio = statistics.median(walls[f"after {when}"]) / statistics.median(walls[f"before {when}"])
            print(f"after / before, {when} run: {ratio:.2f}x")


_ORDER = {n: i for i, n in enumerate(("fake_cloud", "up", "bundle", "env_lock", "env_install", "env_pack",
                                      "env_upload", "start", "train", "checkpoints", "resume", "down"))}


if __name__ == "__main__":
    main()
