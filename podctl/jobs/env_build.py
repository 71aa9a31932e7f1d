"""The hosts' environment, built here on the client, where the package index is.

uv installs the lock (env_lock.py) for the hosts' platform (env_lock.HOST_PLATFORM) and
Python from wheels only (`--no-build`: nothing is compiled for another machine here),
with the requirements' own index options and this client's credentials, which never
leave it. The tree is what the host makes a venv of by hand (agent_env_fetch.py):

    lib/pythonX.Y/site-packages/...   the locked packages
    bin/...                           their commands, with a shebang that finds bin/python
    python/...                        a relocatable CPython X.Y (SHIP_PYTHON only)

SHIP_PYTHON (a client for Google Cloud): uv's managed CPython for linux x86_64 gnu
(python-build-standalone), installed by `uv python install` into STATE_DIR/pythons
(its downloads, mirror and checksums are uv's: UV_PYTHON_INSTALL_MIRROR and
UV_PYTHON_DOWNLOADS_JSON_URL work as for uv). Without it (the fake, offline) the hosts
use a Python of that version they have.

Packed once as tar + zstd into STATE_DIR/envs (a second run packs nothing), named by
the environment's key; the archive's sha256, size and each part's sha256 are what the
hosts check, so its object in GCS is named by its sha256 as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.base import children, pythons
from podctl.base.errors import RequirementsError
from podctl.base.settings import state_dir
from podctl.base.vocabulary import ENV_BUILD_TIMEOUT_SECONDS
from podctl.jobs import env_lock

PART_SIZE = 8 << 20  # the hosts read and check the archive in parts of this size
ZSTD_LEVEL = 3  # zstd's default: ~3x on site-packages, decompressed at over 1 GB/s
HOST_PYTHON_TARGET = "linux-x86_64-gnu"  # uv's name for TPU VMs' platform (glibc x86_64)
_UV_TIMEOUT = ENV_BUILD_TIMEOUT_SECONDS
_NO_WHEEL = (re.compile(r"Wheels are required for `([^`]+)`"),
             re.compile(r"([A-Za-z0-9._-]+)==\S+ has no usable wheels"),
             re.compile(r"([A-Za-z0-9._-]+)==\S+ has no wheels with a matching"))
# what uv writes as a command's shebang under --target: the client's interpreter
_SHEBANG = re.compile(rb"^#![^\n]*python[^\n]*\n")
# pip's relocatable form: /bin/sh runs the line, python reads it as a string
_RELOCATABLE = (b"#!/bin/sh\n'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/python "
                b"\"$0\" \"$@\"\n' '''\n")


@dataclass(frozen=True)
class Built:
    """An environment's archive on this client."""

    path: Path
    sha256: str
    size: int
    parts: tuple[str, ...]  # sha256 of each PART_SIZE part, in order
    python_inside: bool  # the archive carries its CPython (python/bin/pythonX.Y)
    seconds: float = 0.0  # building and packing; 0 when it was packed earlier
    pack_seconds: float = 0.0  # of which packing (tar + zstd, the hashes)

    def host_config(self, plan: env_lock.EnvPlan, object_name: str) -> dict[str, Any]:
        """The hosts' `environment`: what to fetch and how to check it; no secret."""
        return {"key": plan.key, "python": plan.python,
                "interpreter": "archive" if self.python_inside else "host",
                "archive": {"object": object_name, "size": self.size, "sha256": self.sha256,
                            "part_size": PART_SIZE, "parts": list(self.parts)}}


def cache_dir() -> Path:
    return state_dir() / "envs"


def build(plan: env_lock.EnvPlan, *, ship_python: bool, cache: Path | None = None,
          notice: Callable[[str], None] = lambda _: None) -> Built:
    """PLAN's archive: packed earlier (CACHE, default STATE_DIR/envs), or built and packed now."""
    cache = cache or cache_dir()
    name = f"{plan.key}.{'python' if ship_python else 'packages'}"
    kept = cache / f"{name}.json"
    try:
        meta = json.loads(kept.read_text())
        built = Built(path=cache / f"{name}.tar.zst", sha256=meta["sha256"], size=int(meta["size"]),
                      parts=tuple(meta["parts"]), python_inside=ship_python)
        if built.path.stat().st_size == built.size:
            return built
    except (OSError, ValueError, KeyError, TypeError):
        pass
    started = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}.", dir=cache) as tmp:
        tree = Path(tmp) / "tree"
        if ship_python:
            python = client_python_for_hosts(plan.python, cache.parent / "pythons")
            notice(f"environment {plan.key[:12]}: CPython {python.name} for the hosts, from uv's "
                   "python-build-standalone downloads")
            shutil.copytree(python, tree / "python", symlinks=True)
        install(plan, tree)
        leave_out_unused(tree, plan.python)
        compile_bytecode(tree, plan.python, tree / "python" if ship_python else None)
        archive = Path(tmp) / "env.tar.zst"
        packing = time.monotonic()
        sha, size, parts = pack(tree, archive)
        pack_seconds = time.monotonic() - packing
        os.replace(archive, cache / f"{name}.tar.zst")
    tmp_meta = kept.with_suffix(f".{os.getpid()}.tmp")
    tmp_meta.write_text(json.dumps({"sha256": sha, "size": size, "parts": parts}))
    os.replace(tmp_meta, kept)
    return Built(path=cache / f"{name}.tar.zst", sha256=sha, size=size, parts=tuple(parts),
                 python_inside=ship_python, seconds=time.monotonic() - started, pack_seconds=pack_seconds)


def install(plan: env_lock.EnvPlan, tree: Path) -> None:
    """The lock's packages into TREE/lib/pythonX.Y/site-packages, wheels for the hosts only."""
    site = tree / "lib" / f"python{plan.python}" / "site-packages"
    with tempfile.TemporaryDirectory(prefix="podctl-env-lock-") as tmp:
        lock = Path(tmp) / "requirements.lock"
        lock.write_text(plan.lock)
        argv = [env_lock.uv_binary(), "pip", "install", "--no-config", "--quiet", "--target", str(site),
                "--python-version", plan.python, "--python-platform", env_lock.HOST_PLATFORM,
                # hard links into uv's cache (a copy where they cannot be made): the tree is
                # only read, packed and deleted; a file podctl changes is written anew below
                "--no-build", "--no-deps", "--link-mode", "hardlink", *plan.index_args, "-r", str(lock)]
        try:
            done = children.run(argv, timeout=_UV_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            raise RequirementsError(f"installing the hosts' packages here took over {_UV_TIMEOUT:.0f} s; "
                                    "try again, or `podctl run --build-on host`.") from e
    if done.returncode != 0:
        raise RequirementsError(_install_failure(done.stderr, plan.python))
    scripts = site / "bin"
    if scripts.is_dir():  # the packages' commands, beside the venv's python
        (tree / "bin").mkdir(exist_ok=True)
        for script in scripts.iterdir():
            data = script.read_bytes() if script.is_file() and not script.is_symlink() else b""
            if _SHEBANG.match(data):  # a new file: the old one may be a hard link into uv's cache
                mode = script.stat().st_mode & 0o777
                script.unlink()
                script.write_bytes(_SHEBANG.sub(_RELOCATABLE, data, count=1))
                script.chmod(mode)
            os.replace(script, tree / "bin" / script.name)
        scripts.rmdir()


def leave_out_unused(tree: Path, python: str) -> int:
    """Delete from TREE's site-packages what no run imports or reads: the packages' own test
    suites (a folder named `test` or `tests`: 1,228 files and 110 folders of jax's
    environment's 11,490 entries) and type stubs (`.pyi`: 318). Every host of every fresh
    slice creates each entry of the archive, and creating a file costs far more than its
    bytes (ext4 without a journal looks at every recently deleted inode first: about 0.3 ms
    a file on a machine that deletes as many): 14% fewer entries, 24 MB less to fetch. The
    files are uv's hard links (or copies): unlinking them leaves uv's cache as it was. How
    many entries were deleted."""
    site = tree / "lib" / f"python{python}" / "site-packages"
    if not site.is_dir():
        return 0
    gone = 0
    for root, dirs, files in os.walk(site):
        for name in [d for d in dirs if d in ("test", "tests")]:
            suite = Path(root) / name
            gone += 1 + sum(len(d) + len(f) for _, d, f in os.walk(suite))
            shutil.rmtree(suite)
            dirs.remove(name)
        for name in files:
            if name.endswith(".pyi"):
                os.unlink(os.path.join(root, name))
                gone += 1
    return gone


# compileall -x, after site-packages' own path: a file inside a folder named test or tests
_TEST_SUITES = r"[/\\](?:.*[/\\])?tests?[/\\]"


def compile_bytecode(tree: Path, python: str, shipped: Path | None) -> bool:
    """The packages' bytecode, compiled once here by a Python PYTHON (the archive's own
    CPython SHIPPED, else this machine's of that version), as `pip install` compiles by
    default: otherwise every host's first run compiles each module it imports (jax, optax,
    orbax, gcsfs: 1,432 modules, 6-7 s of CPU a process), and on a fresh slice every host
    does. `unchecked-hash`: the environment never changes once unpacked (its archive is
    checked by sha256), so Python need not look at the sources again. False where no such
    Python runs here (the hosts compile at import, as before); a file that does not compile
    is left without, as pip leaves it. The packages' own test suites (a `test` or `tests`
    folder: 672 of jax's environment's 4,028 modules, 30% of the compile's CPU) are left out
    (`build` deletes them first: leave_out_unused): no library imports them."""
    site = tree / "lib" / f"python{python}" / "site-packages"
    interpreter = shipped / "bin" / f"python{python}" if shipped is not None else None
    if interpreter is None or not interpreter.exists():
        found = pythons.find(python)
        interpreter = Path(found[0]) if found is not None else None
    if interpreter is None or not site.is_dir():
        return False
    argv = [str(interpreter), "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
            "-x", re.escape(str(site)) + _TEST_SUITES, str(site)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    try:
        children.run(argv, timeout=_UV_TIMEOUT, stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return True


def _install_failure(stderr: str, python: str) -> str:
    for pattern in _NO_WHEEL:
        found = pattern.search(stderr)
        if found:
            return (f"{found.group(1)} has no wheel for the hosts (Linux x86_64, Python {python}) and "
                    "podctl builds nothing here for another machine: `podctl run --build-on host` "
                    "builds the environment on host 0 instead.")
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    why = " ".join(lines[:3]) if lines else "uv failed"
    return f"installing the hosts' packages here failed: {why[:400]}"


def pack(tree: Path, archive: Path) -> tuple[str, int, list[str]]:
    """TREE as tar + zstd at ARCHIVE (names relative to TREE, owners dropped); its
    (sha256, size, each part's sha256)."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=-1)
    with open(archive, "wb") as raw, compressor.stream_writer(raw, closefd=False) as out, \
            tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(tree.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(tree).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    whole, parts = hashlib.sha256(), []
    with open(archive, "rb") as f:
        while block := f.read(PART_SIZE):
            whole.update(block)
            parts.append(hashlib.sha256(block).hexdigest())
    return whole.hexdigest(), archive.stat().st_size, parts


def client_python_for_hosts(version: str, install_dir: Path) -> Path:
    """uv's managed CPython VERSION for the hosts' platform, installed (once) into
    INSTALL_DIR by `uv python install`; its directory (python/bin/pythonX.Y inside)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise RequirementsError(
            f"this client ({platform.system()} {platform.machine()}) cannot install the hosts' CPython "
            f"{version} (uv installs Pythons for its own platform only): run podctl from Linux x86_64, "
            "or `podctl run --build-on host`.")
    request = f"cpython-{version}-{HOST_PYTHON_TARGET}"
    argv = [env_lock.uv_binary(), "python", "install", "--no-config", "--no-bin", "--install-dir",
            str(install_dir), request]
    try:
        done = children.run(argv, timeout=_UV_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise RequirementsError(f"downloading CPython {version} for the hosts took over "
                                f"{_UV_TIMEOUT:.0f} s; try again.") from e
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.strip().splitlines() if ln.strip()]
        raise RequirementsError(f"uv could not install CPython {version} for the hosts: "
                                f"{' '.join(lines[:3])[:300]}")
    found = sorted((p for p in install_dir.glob(f"cpython-{version}.*-{HOST_PYTHON_TARGET}")
                    if not p.is_symlink() and (p / "bin" / f"python{version}").exists()),
                   key=lambda p: _patch(p.name), reverse=True)
    if not found:
        raise RequirementsError(f"uv installed CPython {version} but {install_dir} has no "
                                f"{request}; run `uv python install {request}` to see why.")
    return found[0]


def _patch(name: str) -> int:
    found = re.match(r"cpython-\d+\.\d+\.(\d+)", name)
    return int(found.group(1)) if found else -1
