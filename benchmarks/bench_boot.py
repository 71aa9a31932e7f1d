"""From `podctl run` to every host's agent having run the script, through the slice's
watchers (`--via boot`: one nodes.patch per node) and through SSH fan-out (`--via ssh`:
a session per host, today's floor), alternating, on one fake slice, in one run.

    python benchmarks/bench_boot.py [--slice v5p-4096] [--rounds 3]

Each round runs `podctl run NAME --via X --hosts 0 exit0.py` as a user does (a separate
process, the fake cloud's daemon holding the slice's hosts) and measures:
- started: from the command's start to its "started on all N hosts" line (every agent
  beating in GCS for boot; every SSH session's `started`, the agents not yet running,
  for ssh: not the same point, so the ratio is taken on `ended`);
- ended: to the command's exit (every host's script has run and its status is in GCS);
- the TPU API calls the run made (the fake's per-call counters) and the SSH sessions the
  hosts accepted.
The watcher's pointer reaches the hosts --propagation real seconds after its patch
(default 2): on Google that delay is unmeasured (design 26, F5).

First, right after `up`, one `run --via boot` while the hosts still boot late (the fake's
`boot_late`, --boot-late simulated seconds, default the fake's): to "started on all", with
the lines naming the hosts still booting; the rounds then run on the booted slice.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from podctl.fake.admin.admin_client import FakeAdmin

SCRIPT = "print('ok', flush=True)\n"


def podctl(env: dict, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"podctl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


def one_run(env: dict, name: str, via: str, script: Path, said: list[str] | None = None,
            options: tuple[str, ...] = (), args: tuple[str, ...] = ()) -> tuple[float, float]:
    """OPTIONS: more `podctl run` options (e.g. --requirements R); ARGS: the script's; SAID
    collects podctl's lines."""
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "podctl", "run", name, "--via", via, "--hosts", "0",
                             *options, str(script), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL)
    started = None
    said = [] if said is None else said
    assert proc.stderr is not None
    for line in proc.stderr:
        said.append(line)
        if started is None and "started on all" in line:
            started = time.monotonic() - began
    proc.wait(timeout=1800)
    ended = time.monotonic() - began
    if proc.returncode != 0 or started is None:
        raise SystemExit(f"run --via {via} exited {proc.returncode}:\n{''.join(said[-10:])}")
    return started, ended


def host_sessions(admin: FakeAdmin, name: str) -> int:
    return sum(h["sessions_total"] + h["ssh_total"] for h in admin.host_stats(name))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slice", default="v5p-4096")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--propagation", type=float, default=2.0,
                        help="real seconds from a metadata patch to the hosts seeing it (unmeasured on Google)")
    parser.add_argument("--boot-late", type=float, default=None,
                        help="the fake's boot_late: a node of n hosts boots late by this x sqrt(n) "
                             "simulated seconds on average (default: the fake's)")
    a = parser.parse_args()
    name = "bench-boot"
    with tempfile.TemporaryDirectory(prefix="bench-boot-") as tmp:
        home = Path(tmp)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "PODCTL_", "GOOGLE_"))},
               "PODCTL_BACKEND": "fake", "HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"),
               "PODCTL_STATE_DIR": str(home / "state"), "PODCTL_CONFIG_DIR": str(home / "config"),
               "NO_GCE_CHECK": "True", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}
        script = home / "exit0.py"
        script.write_text(SCRIPT)
        info = json.loads(podctl(env, "fake", "start", "--json").stdout)
        admin = FakeAdmin(info["admin"])
        try:
            if a.boot_late is not None:
                admin.set_timings(boot_late=a.boot_late)
            began = time.monotonic()
            podctl(env, "up", "--slice", a.slice, "--name", name)
            hosts = len(admin.host_stats(name))
            up = time.monotonic() - began
            said: list[str] = []
            late_started, late_ended = one_run(env, name, "boot", script, said)
            waiting = [line.strip() for line in said if "hosts to boot" in line]
            print(f"{a.slice}: up in {up:.1f} s; run --via boot right after, the hosts booting late "
                  f"(boot_late {admin.set_timings()['boot_late']:g}): started on all {hosts} hosts "
                  f"{late_started:.1f} s, ended {late_ended:.1f} s; {len(waiting)} lines naming hosts booting"
                  + (f", first: {waiting[0]}" if waiting else ""))
            while not all(h["boots"] >= 1 for h in admin.host_stats(name)):
                time.sleep(0.5)
            scale = admin.set_timings()["time_scale"]
            timings = admin.set_timings(metadata_propagation=a.propagation * scale)
            print(f"{a.slice}: {hosts} hosts up, every startup-script run, in "
                  f"{time.monotonic() - began:.1f} s; a patch reaches the hosts after "
                  f"{timings['metadata_propagation'] / scale:.1f} s (fake timings {timings})")
            results: dict[str, list[tuple[float, float, dict, int]]] = {"boot": [], "ssh": []}
            for _ in range(a.rounds):
                for via in ("boot", "ssh"):
                    admin.reset_stats()
                    sessions = host_sessions(admin, name)
                    started, ended = one_run(env, name, via, script)
                    calls = admin.stats()["by_call"]
                    results[via].append((started, ended, calls, host_sessions(admin, name) - sessions))
            for via, rows in results.items():
                started = statistics.median(r[0] for r in rows)
                ended = statistics.median(r[1] for r in rows)
                calls = rows[-1][2]
                tpu = {k: v for k, v in calls.items() if k.startswith("nodes.") or k.startswith("queuedResources.")}
                print(f"--via {via}: started on all {hosts} hosts {started:.1f} s, ended {ended:.1f} s "
                      f"(median of {len(rows)}); TPU API calls {tpu}; SSH connections + sessions "
                      f"{rows[-1][3]}")
            ratio = statistics.median(r[1] for r in results["ssh"]) / statistics.median(
                r[1] for r in results["boot"])
            print(f"ssh / boot, to every host's script ended (its status in GCS): {ratio:.2f}x")
        finally:
            down_and_stop(env, name)


def down_and_stop(env: dict, name: str) -> None:
    """The benchmark's slice deleted and its fake stopped, whatever happened before."""
    subprocess.run([sys.executable, "-m", "podctl", "down", name, "--yes"], env=env,
                   capture_output=True, timeout=600)
    subprocess.run([sys.executable, "-m", "podctl", "fake", "stop"], env=env, capture_output=True,
                   timeout=120)


if __name__ == "__main__":
    main()
