"""A relaunch in place on a fake v5p-16 (2 hosts x 4 CPU devices): restore from the
template's local checkpoint tier against restore from GCS, in the same run.

    python benchmarks/bench_local_ckpt.py [--rounds 2] [-- MORE TEMPLATE FLAGS]

One run trains a few steps with --local-every and --checkpoint-every alike (GCS and
the hosts' disks hold the same step), then each round relaunches the run in place with
`podctl run --resume` twice: once as it is (the local copies), once after `podctl exec`
removed every host's copy (GCS). The order alternates between rounds. Reported per
source: the template's own restore time (`restore_s` in its config line: the restore
call alone, host 0) and the relaunch's wall time (`podctl run` start to exit, a
one-step run: bundle check, SSH launch, JAX start, restore, compile, one step).
The fake's GCS is gcp-storage-emulator on loopback (one request at a time); Google's
is farther and faster in parallel, so the ratio is this machine's, not a TPU VM's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "templates" / "train_pjit.py"
MODEL = ["--layers", "4", "--d-model", "256", "--heads", "4", "--d-ff", "1024", "--vocab", "256",
         "--seq-len", "32", "--batch", "8", "--dtype", "float32"]


def podctl(env: dict, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        sys.exit(f"podctl {' '.join(args[:3])} ... exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def config_line(stdout: str) -> dict:
    for line in stdout.splitlines():
        text = line.split("] ", 1)[1] if line.startswith("[host ") else line
        if text.startswith('{"kind": "config"'):
            return json.loads(text)
    raise SystemExit(f"no config line in:\n{stdout[-2000:]}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("extra", nargs="*", help="more template flags (after --)")
    a = p.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-local-ckpt-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PODCTL_", "CLOUDSDK_")) or k == "PODCTL_FAKE_ENV_STORE"}
    env.update({"PODCTL_BACKEND": "fake", "PODCTL_STATE_DIR": str(home / "state"),
                "PODCTL_CONFIG_DIR": str(home / "config"), "HOME": str(home)})
    flags = [*MODEL, *a.extra, "--checkpoint-every", str(a.steps), "--local-every", str(a.steps)]
    podctl(env, "up", "--slice", "v5p-16", "--name", "bench-local")
    try:
        first = podctl(env, "run", "bench-local", str(SCRIPT), *flags, "--steps", str(a.steps))
        run_id = next(l.split()[2] for l in first.stderr.splitlines() if l.startswith("podctl: run "))
        params = config_line(first.stdout)["params"]
        results: dict[str, list[tuple[float, float]]] = {"local": [], "gcs": []}
        steps = a.steps
        for r in range(a.rounds):
            for source in (("local", "gcs") if r % 2 == 0 else ("gcs", "local")):
                if source == "gcs":
                    podctl(env, "exec", "bench-local", "--hosts", "all", "--",
                           "rm -rf ~/.cache/podctl/local-checkpoints")
                steps += 1
                start = time.time()
                proc = podctl(env, "run", "bench-local", "--resume", run_id, str(SCRIPT), *flags,
                              "--steps", str(steps), "--checkpoint-every", "1", "--local-every", "1")
                wall = time.time() - start
                config = config_line(proc.stdout)
                if config.get("restored_from") != source:
                    sys.exit(f"round {r + 1}: expected a restore from {source}, got {config}")
                results[source].append((config["restore_s"], wall))
                print(f"round {r + 1} {source:5s} step {config['restored_step']}: restore "
                      f"{config['restore_s']:.2f} s, relaunch {wall:.1f} s", file=sys.stderr)
        state_mb = params * 12 / 1e6  # fp32 params + adam's mu and nu
        print(f"\nfake v5p-16, {params:,} params (state ~{state_mb:.0f} MB over 2 hosts), "
              f"{a.rounds} rounds, medians")
        print(f"{'restore from':14s} {'restore_s':>10s} {'relaunch wall':>14s}")
        med = {s: (statistics.median(x for x, _ in v), statistics.median(w for _, w in v))
               for s, v in results.items()}
        for source, (restore, wall) in med.items():
            print(f"{source:14s} {restore:9.2f}s {wall:13.1f}s")
        print(f"{'gcs / local':14s} {med['gcs'][0] / med['local'][0]:9.1f}x "
              f"{med['gcs'][1] / med['local'][1]:13.2f}x")
    finally:
        subprocess.run([sys.executable, "-m", "podctl", "down", "bench-local", "--yes"], env=env,
                       capture_output=True, timeout=600)
        subprocess.run([sys.executable, "-m", "podctl", "fake", "stop"], env=env,
                       capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
