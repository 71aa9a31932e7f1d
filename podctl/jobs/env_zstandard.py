"""The `zstandard` package the client ships beside an environment, for a host without
a `zstd` binary.

A host unpacks the client's tar + zstd archive with the system's `zstd -d | tar -x`
(agent_env_fetch.py). Whether Ubuntu 22.04 TPU VM images ship `zstd` is not verified
(initramfs-tools only Recommends it), and a host must need nothing but GCS and its
Python. So the client also ships the `zstandard` wheel (the version this client packs
with) for the image's Python (env_lock.IMAGE_PYTHON: the agent runs on it) and the
hosts' platform, fetched by uv from the requirements' own index like the lock's wheels,
zipped once into STATE_DIR/envs (the same bytes from every client: fixed names, dates
and order), uploaded once by its sha256 and pinned by that hash in the hosts' config
(`archive.zstandard`). Only a host without `zstd` reads it
(agent_env_fetch.load_zstandard) and decompresses in Python into the same `tar -x`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl.base import children
from podctl.jobs import env_lock

PYTHON = env_lock.IMAGE_PYTHON  # the hosts' python3, which runs the agent
_TIMEOUT = 300.0  # one small wheel: far under the environment's own build


@dataclass(frozen=True)
class ZstandardZip:
    path: Path
    version: str
    sha256: str
    size: int

    def host_config(self, object_name: str) -> dict[str, Any]:
        return {"object": object_name, "sha256": self.sha256, "size": self.size, "python": PYTHON,
                "version": self.version}


def for_hosts(plan: env_lock.EnvPlan, cache: Path) -> ZstandardZip:
    """The zip of zstandard for the hosts (CACHE/zstandard-VERSION-cpXY-PLATFORM.zip,
    made once); OSError or RuntimeError (uv's words) when it cannot be fetched."""
    version = importlib.metadata.version("zstandard")
    tag = f"cp{PYTHON.replace('.', '')}"
    path = cache / f"zstandard-{version}-{tag}-{env_lock.HOST_PLATFORM}.zip"
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".zstandard.", dir=cache) as tmp:
            site = Path(tmp) / "site"
            argv = [env_lock.uv_binary(), "pip", "install", "--no-config", "--quiet", "--target", str(site),
                    "--python-version", PYTHON, "--python-platform", env_lock.HOST_PLATFORM,
                    "--only-binary", ":all:", "--no-deps", "--link-mode", "copy", *plan.index_args,
                    f"zstandard=={version}"]
            done = children.run(argv, timeout=_TIMEOUT, stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                lines = [ln.strip() for ln in done.stderr.strip().splitlines() if ln.strip()]
                raise RuntimeError(" ".join(lines[:3])[:300] or f"uv exit {done.returncode}")
            zipped = Path(tmp) / "zstandard.zip"
            _zip(site, zipped)
            os.replace(zipped, path)
    data = path.read_bytes()
    return ZstandardZip(path=path, version=version, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def _zip(site: Path, zipped: Path) -> None:
    """SITE's zstandard package and its metadata, the same bytes for the same files."""
    with zipfile.ZipFile(zipped, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for path in sorted(site.rglob("*")):
            name = path.relative_to(site).as_posix()
            # the C backend only: zstandard takes it by default; its cffi twin is as big again
            if not path.is_file() or "__pycache__" in name or "cffi" in name or not name.startswith("zstandard"):
                continue
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (path.stat().st_mode & 0o777) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            out.writestr(info, path.read_bytes())
