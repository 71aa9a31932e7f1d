"""The host's Python environment for a run: built once, shipped through GCS, kept.

Standard library only (Python 3.10+), shipped to hosts next to agent.py. A run's
requirements (its bundle's requirements.txt, or `podctl run --requirements FILE`)
name an environment by a content hash: the requirements (after `${VAR}` expansion,
as pip does it), the Python version and implementation, and the platform. On a host:

  - ~/.podctl/envs/KEY complete: used as it is (a host that has it keeps it);
  - else gs://BUCKET/podctl/envs/KEY.tar.gz (and its KEY.json, written last): fetched,
    checked against its sha256, unpacked into a fresh venv of the system python3;
  - else the run's process 0 builds it: a venv (pip from the interpreter's ensurepip),
    `pip install -r`, its site-packages packed and uploaded; every other host waits
    for the upload (or for the builder's failure, which fails them too).

So PyPI is touched once per environment, not once per host, and not again for a
later run with the same requirements. A failed install names the host and the
package with the tail of pip's output. No `pip install --user` (Debian's Python
refuses it, PEP 668): everything goes into venvs of podctl's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from collections.abc import Callable

ENV_PREFIX = "podctl/envs/"
_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")  # pip's own rule for requirements files
_COMMENT = re.compile(r"(^|\s+)#.*$")  # pip's: `#` at a line's start or after whitespace
_FAILED_PACKAGE = (
    re.compile(r"No matching distribution found for ([^\s;]+)"),
    re.compile(r"Could not find a version that satisfies the requirement ([^\s;]+)"),
    re.compile(r"Failed (?:to build|building wheel for) ([^\s;]+)"),
)
WAIT_SECONDS = 2 * 3600.0
TAIL = 15


class EnvError(Exception):
    """The environment could not be made; the message names host, package and pip's tail."""


def expand(requirements: str, environ: dict[str, str] | os._Environ[str]) -> str:
    return _VAR.sub(lambda m: environ.get(m.group(1), ""), requirements)


def requirement_lines(requirements: str) -> str:
    """The lines pip acts on: comments (a line's own, or after whitespace) and blank
    lines dropped, as pip drops them; so two files naming the same packages share one
    environment whatever their comments say."""
    kept = (_COMMENT.sub("", line).strip() for line in requirements.splitlines())
    return "\n".join(line for line in kept if line)


def env_key(requirements: str) -> str:
    """What the environment depends on: the (expanded) requirements, Python, platform."""
    ident = {"requirements": requirement_lines(requirements), "python": platform.python_version(),
             "implementation": sys.implementation.name, "platform": sysconfig.get_platform(),
             "libc": "-".join(platform.libc_ver())}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def failed_package(output: str) -> str:
    for pattern in _FAILED_PACKAGE:
        found = pattern.findall(output)
        if found:
            return found[-1]
    return ""


class HostEnv:
    """One host's side of one environment."""

    def __init__(self, bucket, requirements: str, *, home: Path, host: str, builder: bool,
                 log: Callable[[str], None], failed_marker: str,
                 unpack: Callable[[str, str], int]):
        self.bucket, self.home, self.host, self.builder, self.log = bucket, home, host, builder, log
        # PODCTL_JAX_EXTRA: "tpu" on a TPU VM; the fake cloud's CPU hosts set "cpu"
        self.requirements = expand(requirements, {"PODCTL_JAX_EXTRA": "tpu", **os.environ})
        self.key = env_key(self.requirements)
        self.dir = home / "envs" / self.key
        self.object, self.sidecar = f"{ENV_PREFIX}{self.key}.tar.gz", f"{ENV_PREFIX}{self.key}.json"
        self.failed_marker, self.unpack = failed_marker, unpack

    @property
    def complete(self) -> bool:
        return (self.dir / ".podctl-complete").exists()

    def prepare(self) -> Path:
        """The environment's venv on this host, made one way or another; EnvError if not."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dir.parent / f"{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs on one host make it once
            if self.complete:
                self.log(f"[podctl] env {self.key[:12]}: already on this host")
                return self.dir
            shutil.rmtree(self.dir, ignore_errors=True)  # what a killed attempt left
            meta = self._wait_for_upload()
            if meta is None:
                self._build()
            else:
                self._fetch(meta)
            (self.dir / ".podctl-complete").write_text(self.key)
        return self.dir

    def _wait_for_upload(self) -> dict | None:
        """KEY.json once the environment is in GCS; None when this host is to build it."""
        deadline, said = time.monotonic() + WAIT_SECONDS, False
        while True:
            found = self.bucket.stat(self.sidecar)
            if found is not None:
                return json.loads(self.bucket.download(self.sidecar))
            if self.builder:
                return None
            if self.bucket.stat(self.failed_marker) is not None:
                raise EnvError(self.bucket.download(self.failed_marker).decode())
            if not said:
                self.log(f"[podctl] env {self.key[:12]}: waiting for host 0000 to build it")
                said = True
            if time.monotonic() > deadline:
                raise EnvError(f"{self.host}: the environment {self.key[:12]} did not appear in "
                               f"GCS within {WAIT_SECONDS / 3600:.0f} h")
            time.sleep(2.0)

    def _venv(self, with_pip: bool) -> None:
        argv = [sys.executable, "-m", "venv", str(self.dir)] + ([] if with_pip else ["--without-pip"])
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            raise EnvError(f"{self.host}: `python3 -m venv` failed ({done.returncode}): "
                           f"{done.stdout.strip()[-500:]}")

    def _build(self) -> None:
        started = time.monotonic()
        self.log(f"[podctl] env {self.key[:12]}: building on {self.host} from the package index")
        try:
            self._venv(with_pip=True)
            before = {p.name for p in site_packages(self.dir).glob("*.dist-info")}
            req = self.dir / "podctl-requirements.txt"
            req.write_text(self.requirements + "\n")
            python = str(self.dir / "bin" / "python")
            proc = subprocess.Popen(
                [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                 "--progress-bar", "off", "-r", str(req)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                self.log(line)
            code = proc.wait()
            if code != 0:
                package = failed_package("\n".join(lines))
                tail = "\n".join(lines[-TAIL:])
                raise EnvError(f"{self.host}: pip could not install "
                               f"{package or 'the requirements'} (exit {code}); its last lines:\n{tail}")
            installed = sorted({p.name for p in site_packages(self.dir).glob("*.dist-info")} - before)
            with tempfile.TemporaryDirectory(dir=self.dir.parent) as tmp:
                archive = os.path.join(tmp, "env.tar.gz")
                size, sha = _pack(site_packages(self.dir), archive)
                self.bucket.upload_file(self.object, archive)
            meta = {"key": self.key, "sha256": sha, "size": size, "built_by": self.host,
                    "packages": installed, "python": platform.python_version(),
                    "requirements": self.requirements}
            self.bucket.upload(self.sidecar, json.dumps(meta).encode(), "application/json")
        except BaseException as e:
            message = str(e) if isinstance(e, EnvError) else f"{self.host}: building the environment failed: {e!r}"
            try:
                self.bucket.upload(self.failed_marker, message.encode(), "text/plain")
            except Exception:  # the waiting hosts then time out or are stopped by podctl
                pass
            shutil.rmtree(self.dir, ignore_errors=True)
            raise EnvError(message) from e
        self.log(f"[podctl] env {self.key[:12]}: built on {self.host} from the package index: "
                 f"{len(installed)} packages in {time.monotonic() - started:.1f} s; "
                 f"uploaded {size / 1e6:.1f} MB to GCS")

    def _fetch(self, meta: dict) -> None:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=self.dir.parent) as tmp:
            archive = os.path.join(tmp, "env.tar.gz")
            self.bucket.download_file(self.object, archive)
            if _sha256(archive) != meta.get("sha256"):
                raise EnvError(f"{self.host}: the environment {self.object} in GCS does not match "
                               "its hash; delete it there and run again to build it anew")
            self._venv(with_pip=False)
            target = site_packages(self.dir)
            shutil.rmtree(target, ignore_errors=True)
            self.unpack(archive, str(target.parent))
        self.log(f"[podctl] env {self.key[:12]}: fetched from GCS ({meta.get('size', 0) / 1e6:.1f} MB, "
                 f"built by {meta.get('built_by')}) in {time.monotonic() - started:.1f} s; "
                 "no package index")


def _sha256(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _pack(site: Path, archive: str) -> tuple[int, str]:
    """site-packages as site-packages/... in a tar.gz (fast compression: it is big)."""
    import gzip
    import tarfile

    with open(archive, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w") as tar:
        tar.add(str(site), arcname="site-packages")
    return os.path.getsize(archive), _sha256(archive)
