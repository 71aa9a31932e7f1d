"""A start whose hosts need an environment from GCS, on a fake slice without external IPs
(`up --internal-ips` on a subnet with Private Google Access), through the slice's watchers
(`--via boot`) and through SSH fan-out (`--via ssh`), alternating, in one invocation.

    python benchmarks/bench_boot_env.py [--slice v5p-4096] [--rounds 1]

Every run has its own requirements file: three pure-Python packages (six, idna,
packaging) pinned to versions no earlier run used, so each run's environment is a new
archive (about 130 KB zstd) that every host streams from GCS and checks; none is on a
host yet (a host keeps an environment by its hash, so a repeated set would be fetched
only by the first channel). Pure-Python and tiny on purpose: the point is 512 hosts
fetching through Private Google Access, and the template's jax environment (about 100
MB unpacked into every host's directory) would measure the 2-core machine's disk and
unpack, not the start. The environments are locked and packed on the client before
the clock starts (the lock asks the package index), so the walls hold the upload and
the hosts' fetch, not the index's answers.

Each run is `podctl run NAME --via X --hosts 0 --requirements R check_env.py VERSIONS`
as a user runs it; the script imports the three packages on every host and fails
unless their versions are the run's, so a run that exits 0 is every host having used
the environment it fetched. Per run: the wall to "started on all N hosts" and to the
command's exit (every host's status in GCS), and the connections every host made
outside GCS, Google's APIs, its metadata server and its VPC (the fake's per-host
`outside_total`; zero expected: without external IPs there is no route to anything
else).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench_boot import down_and_stop, host_sessions, one_run, podctl

from podctl.fake.admin.admin_client import FakeAdmin
from podctl.jobs import env_build, env_lock

# One set per run (a new archive each time); versions that resolve on the image's 3.10.
IDNA = ["3.10", "3.7", "3.9", "3.6", "3.8", "3.4"]
PACKAGING = ["24.2", "24.1", "24.0", "23.2", "23.1", "23.0"]
SIX = ["1.17.0", "1.16.0"]

SCRIPT = """import sys, idna, packaging, six
want = dict(arg.split("=") for arg in sys.argv[1:])
got = {"idna": idna.__version__, "packaging": packaging.__version__, "six": six.__version__}
if got != want:
    sys.exit(f"expected {want}, this host has {got}")
print("env ok", got, flush=True)
"""


def outside(admin: FakeAdmin, name: str) -> list[int]:
    return [h["outside_total"] for h in admin.host_stats(name)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slice", default="v5p-4096")
    parser.add_argument("--rounds", type=int, default=1, help=f"at most {len(IDNA) // 2}")
    parser.add_argument("--propagation", type=float, default=2.0,
                        help="real seconds from a metadata patch to the hosts seeing it (unmeasured on Google)")
    a = parser.parse_args()
    if not 1 <= a.rounds <= len(IDNA) // 2:
        parser.error(f"--rounds: 1 to {len(IDNA) // 2} (each run needs versions no earlier run used)")
    name = "bench-env"
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="bench-boot-env-") as tmp:
        home = Path(tmp)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "PODCTL_", "GOOGLE_"))},
               "PODCTL_BACKEND": "fake", "HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"),
               "PODCTL_STATE_DIR": str(home / "state"), "PODCTL_CONFIG_DIR": str(home / "config"),
               "NO_GCE_CHECK": "True", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}
        os.environ["PODCTL_STATE_DIR"] = env["PODCTL_STATE_DIR"]  # the lock and archive the runs will find
        script = home / "work" / "check_env.py"  # its directory is the bundle every host gets
        script.parent.mkdir()
        script.write_text(SCRIPT)
        runs = []
        began = time.monotonic()
        for i in range(2 * a.rounds):
            versions = {"idna": IDNA[i], "packaging": PACKAGING[i], "six": SIX[i % 2]}
            reqs = home / f"requirements-{i}.txt"
            reqs.write_text("".join(f"{k}=={v}\n" for k, v in versions.items()))
            plan = env_lock.plan(reqs, jax_extra="cpu")
            built = env_build.build(plan, ship_python=False)
            assert plan.python == env_lock.IMAGE_PYTHON, plan.notes
            runs.append((reqs, [f"{k}={v}" for k, v in versions.items()], built.size))
        print(f"{len(runs)} environments locked and packed on the client in {time.monotonic() - began:.1f} s "
              f"({', '.join(f'{r[2] / 1e3:.0f} KB' for r in runs)} zstd)")

        info = json.loads(podctl(env, "fake", "start", "--json").stdout)
        admin = FakeAdmin(info["admin"])
        try:
            podctl(env, "fake", "subnets", "update", "default", "--enable-private-ip-google-access")
            began = time.monotonic()
            podctl(env, "up", "--slice", a.slice, "--name", name, "--internal-ips")
            hosts = len(admin.host_stats(name))
            while not all(h["boots"] >= 1 for h in admin.host_stats(name)):
                time.sleep(0.5)
            scale = admin.set_timings()["time_scale"]
            timings = admin.set_timings(metadata_propagation=a.propagation * scale)
            print(f"{a.slice} --internal-ips (Private Google Access on): {hosts} hosts up, every "
                  f"startup-script run, in {time.monotonic() - began:.1f} s; outside requests so far "
                  f"{sum(outside(admin, name))}; a patch reaches the hosts after "
                  f"{timings['metadata_propagation'] / scale:.1f} s")
            results: dict[str, list[tuple[float, float, int, int, int]]] = {"boot": [], "ssh": []}
            for r in range(a.rounds):
                for j, via in enumerate(("boot", "ssh")):
                    reqs, pins, _ = runs[2 * r + j]
                    before, sessions = outside(admin, name), host_sessions(admin, name)
                    started, ended = one_run(env, name, via, script, options=("--requirements", str(reqs)),
                                             args=tuple(pins))
                    new = [x - y for x, y in zip(outside(admin, name), before)]
                    results[via].append((started, ended, sum(new), max(new), host_sessions(admin, name) - sessions))
                    print(f"  round {r + 1} --via {via}: started {started:.1f} s, ended {ended:.1f} s, "
                          f"outside requests sum {sum(new)} max/host {max(new)}; load {os.getloadavg()}")
            for via, rows in results.items():
                print(f"--via {via}: started on all {hosts} hosts {statistics.median(r[0] for r in rows):.1f} s, "
                      f"ended {statistics.median(r[1] for r in rows):.1f} s (median of {len(rows)}); "
                      f"outside requests sum {sum(r[2] for r in rows)}, max per host {max(r[3] for r in rows)}; "
                      f"SSH connections + sessions {rows[-1][4]}")
            ratio = statistics.median(r[1] for r in results["ssh"]) / statistics.median(
                r[1] for r in results["boot"])
            print(f"ssh / boot, to every host's script ended (its status in GCS): {ratio:.2f}x")
            every = outside(admin, name)
            print(f"outside requests since up, all {hosts} hosts: sum {sum(every)}, max per host {max(every)}")
            print(f"load average at end: {os.getloadavg()}")
        finally:
            down_and_stop(env, name)


if __name__ == "__main__":
    main()
