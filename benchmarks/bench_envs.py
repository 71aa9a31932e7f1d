"""Preparing the hosts' Python environment on a fake slice of bare hosts, in one run,
each approach on a fresh fake cloud of its own (a state directory each) and a cold uv
cache of its own (client and hosts):

  - podctl's default: the client locks, installs for the hosts' platform from the
    package index (uv, wheels only), packs once (tar + zstd) and uploads it; every host
    streams it from GCS in checked parts (no package index on any host);
  - `--build-on host`: the client locks, host 0 installs from the package index (uv),
    packs its site-packages to GCS; the other hosts wait, fetch and unpack;
  - with --every-host, the old baseline: each host a venv and `pip install -r` at once
    (`podctl exec`), the package index touched once per host.

The figure is the wall time of a whole `podctl run` of a one-line script on a fresh slice
(bundle, lock, environment, agents, the script); besides it, the client's build (its own
line), how many hosts fetched from GCS and how many installed from the index. With --big
SLICE, the environment in GCS already, the fetch alone on a bigger slice.

    python benchmarks/bench_envs.py [--requirements FILE] [--slice v5p-64] [--every-host] [--big v5p-512]
    python benchmarks/bench_envs.py --installers [--requirements FILE] [--pythons 3.10,3.12]
        [--pip-timeout 600]

--installers: no fake cloud, one host's build alone: uv (resolve with `uv pip compile`,
as podctl's client does, then `uv venv` + `uv pip sync`, as host 0 does) against pip
(`python -m venv` + `pip install -r`), each with a cold cache of its own, same run,
for each interpreter (found as the fake's hosts find theirs: podctl/fake/vm/image_python.py);
default requirements templates/requirements.txt with jax[cpu]. pip gets --pip-timeout
seconds (on 3.10 it backtracks for many minutes).

The default requirements are small (numpy) so that eight hosts at once fit a 2-core
machine; pass templates/requirements.txt for the template's (jax[cpu], optax, orbax,
gcsfs: minutes per host here).
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
    from podctl.fake.vm.image_python import find
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


def fresh_env(tmp: Path, name: str) -> dict:
    """A client of its own: state, config, HOME and uv cache (the hosts' uv cache is the
    fake's, under its state directory: cold too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PODCTL_", "CLOUDSDK_"))}
    env.update({"PODCTL_STATE_DIR": str(tmp / name / "state"), "PODCTL_CONFIG_DIR": str(tmp / name / "config"),
                "HOME": str(tmp / name / "home"), "PODCTL_BACKEND": "fake", "PODCTL_FAKE_TIME_SCALE": "300",
                "UV_CACHE_DIR": str(tmp / name / "uv-cache")})
    (tmp / name / "home").mkdir(parents=True)
    return env


def timed_run(env: dict, slice_name: str, job: Path, *flags: str) -> tuple[float, subprocess.CompletedProcess]:
    began = time.monotonic()
    proc = cli(env, "run", slice_name, "--hosts", "all", *flags, str(job))
    return time.monotonic() - began, proc


def figures(proc: subprocess.CompletedProcess) -> dict:
    out = proc.stdout + proc.stderr
    built = re.search(r"built here from the package index in ([\d.]+) s", out)
    host_built = re.search(r"packages in ([\d.]+) s; uploaded", out)
    fetched = re.findall(r"fetched from GCS \(([\d.]+) MB", out)
    return {"client_build_s": float(built.group(1)) if built else None,
            "host0_build_s": float(host_built.group(1)) if host_built else None,
            "hosts_fetched": len(fetched), "gcs_bytes": sum(float(x) * 1e6 for x in fetched),
            "hosts_from_index": out.count("from the package index: ") + index_figures(out)[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requirements", type=Path, default=None)
    parser.add_argument("--slice", default="v5p-64")
    parser.add_argument("--every-host", action="store_true")
    parser.add_argument("--big", default=None)
    parser.add_argument("--installers", action="store_true")
    parser.add_argument("--pythons", default="3.10,3.12")
    parser.add_argument("--pip-timeout", type=float, default=600.0)
    opts = parser.parse_args()
    if opts.installers:
        installers(opts.requirements or REPO / "templates" / "requirements.txt",
                   opts.pythons.split(","), opts.pip_timeout)
        return
    tmp = Path(tempfile.mkdtemp(prefix="podctl-bench-envs-"))
    work = tmp / "work"
    work.mkdir()
    (work / "job.py").write_text(SCRIPT)
    requirements = opts.requirements.read_text() if opts.requirements else "numpy\n"
    (work / "requirements.txt").write_text(requirements)
    load = os.getloadavg()
    print(f"load average at the start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} ({os.cpu_count()} cores)",
          flush=True)
    results: dict[str, dict] = {}
    approaches = [("client", "podctl: client build + every host fetches", ()),
                  ("host", "--build-on host: host 0 builds, the others fetch", ("--build-on", "host"))]
    for name, label, flags in approaches:
        env = fresh_env(tmp, name)
        try:
            cli(env, "up", "--slice", opts.slice, "--name", name)
            wall, proc = timed_run(env, name, work / "job.py", *flags)
            results[label] = {"wall_s": wall, **figures(proc)}
            print(f"{label}: {results[label]}", flush=True)
            cli(env, "down", name, "--yes")
            if opts.big and name == "client":  # the archive in GCS already: the fetch alone
                cli(env, "up", "--slice", opts.big, "--name", "big", timeout=1800)
                wall, proc = timed_run(env, "big", work / "job.py")
                results[f"podctl: every host fetches only, {opts.big}"] = {"wall_s": wall, **figures(proc)}
                cli(env, "down", "big", "--yes")
        finally:
            subprocess.run([sys.executable, "-m", "podctl", "fake", "stop"], env=env, capture_output=True)
    if opts.every_host:
        env = fresh_env(tmp, "each")
        try:
            cli(env, "up", "--slice", opts.slice, "--name", "each")
            script = ("python3 -m venv \"$HOME/each-env\" && \"$HOME/each-env/bin/pip\" install --no-input "
                      f"--progress-bar off -r /dev/stdin <<'EOF'\n{requirements}EOF\n").replace(
                          "${PODCTL_JAX_EXTRA}", "cpu")
            began = time.monotonic()
            proc = cli(env, "exec", "each", "--hosts", "all", "--", "bash", "-c", script)
            count, size = index_figures(proc.stdout)
            results["every host from the index (pip)"] = {"wall_s": time.monotonic() - began,
                                                          "hosts_from_index": count, "index_bytes": size}
            cli(env, "down", "each", "--yes")
        finally:
            subprocess.run([sys.executable, "-m", "podctl", "fake", "stop"], env=env, capture_output=True)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    base = results["--build-on host: host 0 builds, the others fetch"]["wall_s"]
    print("\n| approach | wall | vs host 0 builds | client build | host 0 build | hosts that fetched | "
          "from GCS | package downloads on hosts |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        cell = lambda v: "–" if v is None else f"{v:.1f} s"  # noqa: E731
        print(f"| {label} | {r['wall_s']:.1f} s | {r['wall_s'] / base:.2f}x | {cell(r.get('client_build_s'))} | "
              f"{cell(r.get('host0_build_s'))} | {r.get('hosts_fetched', 0)} | "
              f"{r.get('gcs_bytes', 0) / 1e6:.0f} MB | {r.get('hosts_from_index', 0)} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
