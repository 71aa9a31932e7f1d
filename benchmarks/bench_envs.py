"""Preparing the hosts' Python environment on a fake slice of bare hosts: podctl's
build-once-and-ship (host 0 installs from the package index, packs its site-packages
to GCS, the others fetch and unpack) beside every host installing from the package
index by itself (a venv and `pip install -r` on each, at once, through `podctl exec`),
in one run: wall time, package-index downloads (pip's `Collecting` lines), and the
bytes of the packages pip took. Then, with the environment in GCS, podctl's ship
step alone on a v5p-512 (64 hosts).

    python benchmarks/bench_envs.py [--requirements FILE] [--hosts8 v5p-64] [--big v5p-512]
    python benchmarks/bench_envs.py --installers [--requirements FILE] [--pythons 3.10,3.12]
        [--pip-timeout 600]

--installers: no fake cloud, one host's build alone: uv (resolve with `uv pip compile`,
as podctl's client does, then `uv venv` + `uv pip sync`, as host 0 does) against pip
(`python -m venv` + `pip install -r`), each with a cold cache of its own, same run,
for each interpreter (found as the fake's hosts find theirs: podctl/fake/image_python.py);
default requirements templates/requirements.txt with jax[cpu]. pip gets --pip-timeout
seconds (on 3.10 it backtracks for many minutes).

The default requirements are small (numpy) so that eight hosts installing at once
fit a 2-core machine; pass templates/requirements.txt for the template's (jax[cpu],
optax, orbax, gcsfs: minutes per host here). Each approach gets its own fresh slice.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "import sys\nprint('READY', sys.executable)\n"


def cli(env: dict, *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SystemExit(f"podctl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
                         f"\n{proc.stdout[-3000:]}")
    return proc


_DOWNLOADING = re.compile(r"Downloading (\S+) \(([\d.]+) (kB|MB|GB)\)")
_FILE = re.compile(r"(?:Processing|Downloading) (?:file://)?(/\S+\.(?:whl|tar\.gz|zip))")


def index_figures(output: str) -> tuple[int, float]:
    """(packages pip collected from the index, their bytes) from pip's own lines."""
    collected = sum(1 for line in output.splitlines() if "Collecting " in line)
    size = 0.0
    for _, number, unit in _DOWNLOADING.findall(output):
        size += float(number) * {"kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
    for path in set(_FILE.findall(output)):  # a local index (file://) shows no size
        if os.path.exists(path):
            size += os.path.getsize(path)
    return collected, size


def timed(argv: list[str], env: dict, timeout: float | None = None) -> tuple[float, bool]:
    """(seconds, finished with exit 0); a timeout is (timeout, False)."""
    began = time.monotonic()
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.monotonic() - began, False
    if done.returncode != 0:
        print(f"  {' '.join(argv[:4])} ... exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return time.monotonic() - began, done.returncode == 0


def installers(requirements: Path, pythons: list[str], pip_timeout: float) -> None:
    sys.path.insert(0, str(REPO))
    from podctl.fake.image_python import find
    from podctl.jobs import env_lock

    uv = env_lock.uv_binary()
    tmp = Path(tempfile.mkdtemp(prefix="podctl-bench-installers-"))
    text = env_lock.expand(requirements.read_text(), {"PODCTL_JAX_EXTRA": "cpu"})
    reqs = tmp / "requirements.txt"
    reqs.write_text(text)
    results: dict = {}
    for minor in pythons:
        found = find(minor)
        if found is None:
            print(f"Python {minor}: not on this machine, skipped")
            continue
        python = found[0]
        env = {**os.environ, "UV_CACHE_DIR": str(tmp / f"uv-cache-{minor}"), "PIP_NO_CACHE_DIR": "",
               "PIP_CACHE_DIR": str(tmp / f"pip-cache-{minor}")}
        env.pop("VIRTUAL_ENV", None)
        lock = tmp / f"lock-{minor}.txt"
        resolve, ok1 = timed([uv, "pip", "compile", str(reqs), "--python-version", minor, "--python-platform",
                              env_lock.HOST_PLATFORM, "-q", "--no-header", "--no-annotate", "-o", str(lock)], env)
        venv, ok2 = timed([uv, "venv", "-q", "--python", python, str(tmp / f"uv-{minor}")], env)
        install, ok3 = timed([uv, "pip", "sync", "-q", "--python", str(tmp / f"uv-{minor}" / "bin" / "python"),
                              str(lock)], env)
        results[f"uv, Python {minor}"] = {"resolve_s": resolve, "install_s": venv + install,
                                          "total_s": resolve + venv + install, "ok": ok1 and ok2 and ok3}
        pip_venv, ok4 = timed([python, "-m", "venv", str(tmp / f"pip-{minor}")], env)
        pip_install, ok5 = timed([str(tmp / f"pip-{minor}" / "bin" / "pip"), "install", "-q", "--no-input",
                                  "--disable-pip-version-check", "-r", str(reqs)], env, timeout=pip_timeout)
        results[f"pip, Python {minor}"] = {"resolve_s": None, "install_s": pip_venv + pip_install,
                                           "total_s": pip_venv + pip_install, "ok": ok4 and ok5}
        for name in (f"uv, Python {minor}", f"pip, Python {minor}"):
            r = results[name]
            print(f"{name:18s} {r['total_s']:7.1f} s{'' if r['ok'] else ' (did not finish)'}"
                  + (f"  (resolve {r['resolve_s']:.1f} s, venv + install {r['install_s']:.1f} s)"
                     if r["resolve_s"] is not None else ""), flush=True)
    print(json.dumps(results))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requirements", type=Path, default=None)
    parser.add_argument("--hosts8", default="v5p-64")
    parser.add_argument("--big", default="v5p-512")
    parser.add_argument("--installers", action="store_true")
    parser.add_argument("--pythons", default="3.10,3.12")
    parser.add_argument("--pip-timeout", type=float, default=600.0)
    opts = parser.parse_args()
    if opts.installers:
        installers(opts.requirements or REPO / "templates" / "requirements.txt",
                   opts.pythons.split(","), opts.pip_timeout)
        return
    tmp = Path(tempfile.mkdtemp(prefix="podctl-bench-envs-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PODCTL_", "CLOUDSDK_"))}
    env.update({"PODCTL_STATE_DIR": str(tmp / "state"), "PODCTL_CONFIG_DIR": str(tmp / "config"),
                "HOME": str(tmp / "home"), "PODCTL_BACKEND": "fake", "PODCTL_FAKE_TIME_SCALE": "300"})
    (tmp / "home").mkdir()
    work = tmp / "work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    requirements = opts.requirements.read_text() if opts.requirements else "numpy\n"
    (work / "requirements.txt").write_text(requirements)
    results = {}
    try:
        # 1. Every host installs from the package index itself.
        cli(env, "up", "--slice", opts.hosts8, "--name", "each")
        (work / "each.sh").write_text(
            "python3 -m venv \"$HOME/each-env\" && \"$HOME/each-env/bin/pip\" install --no-input "
            f"--progress-bar off -r /dev/stdin <<'EOF'\n{requirements}EOF\n")
        script = (work / "each.sh").read_text().replace("${PODCTL_JAX_EXTRA}", "cpu")
        began = time.monotonic()
        proc = cli(env, "exec", "each", "--hosts", "all", "--", "bash", "-c", script)
        wall = time.monotonic() - began
        count, size = index_figures(proc.stdout)
        results["every host from the index"] = {"wall_s": wall, "downloads": count, "bytes": size}
        cli(env, "down", "each", "--yes")

        # 2. podctl: built once by host 0, shipped through GCS.
        cli(env, "up", "--slice", opts.hosts8, "--name", "ship")
        began = time.monotonic()
        proc = cli(env, "run", "ship", "--hosts", "all", str(work / "job.py"))
        wall = time.monotonic() - began
        count, size = index_figures(proc.stdout)
        results["podctl build once + ship"] = {"wall_s": wall, "downloads": count, "bytes": size}
        cli(env, "down", "ship", "--yes")

        # 3. The ship step alone at 64 hosts: the environment is in GCS already.
        cli(env, "up", "--slice", opts.big, "--name", "big", timeout=1800)
        began = time.monotonic()
        proc = cli(env, "run", "big", "--hosts", "all", str(work / "job.py"))
        wall = time.monotonic() - began
        count, size = index_figures(proc.stdout)
        fetched = re.findall(r"fetched from GCS \(([\d.]+) MB", proc.stdout)
        results[f"podctl ship only, {opts.big}"] = {
            "wall_s": wall, "downloads": count, "bytes": size, "hosts_fetched": len(fetched),
            "gcs_bytes": sum(float(x) * 1e6 for x in fetched)}
        cli(env, "down", "big", "--yes")
    finally:
        subprocess.run([sys.executable, "-m", "podctl", "fake", "stop"], env=env, capture_output=True)
    base = results["every host from the index"]
    for name, r in results.items():
        ratio = r["wall_s"] / base["wall_s"]
        print(f"{name:34s} {r['wall_s']:7.1f} s ({ratio:.2f}x)  index downloads {r['downloads']:4d}  "
              f"index bytes {r['bytes'] / 1e6:8.1f} MB"
              + (f"  GCS {r['gcs_bytes'] / 1e6:.0f} MB to {r['hosts_fetched']} hosts" if "gcs_bytes" in r else ""))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
