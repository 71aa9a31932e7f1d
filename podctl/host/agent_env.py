"""The host's Python environment for a run: fetched from GCS as the client built it,
or (`podctl run --build-on host`) built once by host 0, shipped through GCS, kept.

Standard library only (Python 3.10+), shipped to hosts next to agent.py. The client
resolved the run's requirements into a lock for one Python (env_lock.py).

By default the client built the environment itself (env_build.py) and the run's config
carries its archive: {key, python, archive: {object, size, sha256, part_size, parts},
interpreter}. ClientBuiltEnv fetches it (agent_env_fetch.py): no package index, no
uv, no venv module, no key on the host.

With `--build-on host` the config carries {key, python, lock, index_args, sign_key, uv}
(over SSH only: podctl refuses that option through the watchers). HostEnv:

  - ~/.podctl/envs/KEY complete: used as it is (a host that has it keeps it);
  - else gs://BUCKET/podctl/envs/KEY.SIGNER.tar.gz (and its .json, written last, with
    the archive's sha256 signed by SIGN_KEY): fetched only if the signature and the
    hash hold, unpacked into a fresh venv of the environment's Python;
  - else the run's process 0 builds it: the environment's Python (the image's python3
    when it is that version; else found or installed by uv), a venv, `uv pip sync` of
    the lock (pip when uv cannot run here), its site-packages packed, uploaded, signed;
    every other host waits for the upload (or for the builder's failure).

SIGN_KEY comes only in the run's config (over SSH), derived from the client's own
secret: a bucket writer can neither forge an archive nor its signature. An archive
that fails the check is refused in one line, deleted from the bucket and from the
host, and the run fails before its script starts; the next run builds it anew.

The installer's whole output goes to the run's env-build.log (on the host and in
GCS next to the run's logs); the run's log gets a few lines, and the installer's
last lines when it fails.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # on a host: agent_gcs is a sibling module; the type is for mypy only
    from podctl.host.agent_gcs import Bucket

try:  # on a host: the agent's zip holds its sibling modules at the top level
    import agent_env_fetch
    import run_layout
except ImportError:  # imported by podctl itself
    from podctl.host import agent_env_fetch, run_layout

WAIT_SECONDS = 2 * 3600.0
TAIL = 15
PROGRESS_SECONDS = 20.0  # while an install runs, one line this often at most


def is_progress(line: str) -> bool:
    """A line of an install's progress (HostEnv._run): a terminal shows only the latest."""
    return line.startswith("[podctl] env ") and line.endswith(" so far")


class EnvError(Exception):
    """The environment could not be made; the message names the host and what to do."""


class EnvStopped(EnvError):
    """podctl stopped the run while its environment was being made."""


def signature(sign_key: str, key: str, sha256: str, size: int) -> str:
    return hmac.new(bytes.fromhex(sign_key), f"{key} {sha256} {size}".encode(), hashlib.sha256).hexdigest()


def signer_of(sign_key: str) -> str:
    """A name for the signing key (not the key): archives of different clients differ."""
    return hashlib.sha256(bytes.fromhex(sign_key)).hexdigest()[:12]


def site_packages(venv: Path, python: str) -> Path:
    return venv / "lib" / f"python{python}" / "site-packages"


def _version(python: str) -> str:
    done = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


class HostEnv:
    """One host's side of one environment."""

    def __init__(self, bucket: Bucket, spec: dict[str, Any], *, home: Path, host: str, builder: bool,
                 log: Callable[[str], None], failed_marker: str, log_object: str, build_log: Path,
                 unpack: Callable[[str, str], int], stopping: Callable[[], bool] = lambda: False):
        self.stopping = stopping
        self.bucket, self.home, self.host, self.builder, self.log = bucket, home, host, builder, log
        self.key, self.python, self.lock = spec["key"], spec["python"], spec["lock"]
        self.index_args = list(spec.get("index_args") or [])
        self.sign_key, self.uv_tool = spec["sign_key"], spec.get("uv")
        self.dir: Path = home / "envs" / self.key
        self.object, self.sidecar = run_layout.env_archive_objects(self.key, signer_of(self.sign_key))
        self.failed_marker, self.log_object, self.build_log = failed_marker, log_object, build_log
        self.unpack = unpack
        self.tag = f"[podctl] env {self.key[:12]}"

    @property
    def complete(self) -> bool:
        return (self.dir / ".podctl-complete").exists()

    def prepare(self) -> Path:
        """The environment's venv on this host, made one way or another; EnvError if not."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dir.parent / f"{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs on one host make it once
            if self.complete:
                self.log(f"{self.tag}: already on this host")
                return self.dir
            shutil.rmtree(self.dir, ignore_errors=True)  # what a killed attempt left
            try:
                meta = self._wait_for_upload()
                if meta is None:
                    self._build()
                else:
                    self._fetch(meta)
            except BaseException as e:
                shutil.rmtree(self.dir, ignore_errors=True)
                if not isinstance(e, Exception) or isinstance(e, EnvStopped):
                    raise
                failure = e if isinstance(e, EnvError) else EnvError(
                    f"{self.host}: making the environment {self.key[:12]} failed: "
                    f"{' '.join(str(e).split())[:300]}")
                self._say_failed(str(failure))
                raise failure from e
            (self.dir / ".podctl-complete").write_text(self.key)
        return self.dir

    def _say_failed(self, message: str) -> None:
        """Process 0's failure, for the hosts that wait for its environment."""
        if self.builder:
            try:
                self.bucket.upload(self.failed_marker, message.encode(), "text/plain")
            except Exception:  # the waiting hosts then see podctl's stop
                pass

    # ---- what the bucket holds, checked against the client's key ----------------------

    def _wait_for_upload(self) -> dict[str, Any] | None:
        """The signed sidecar once the environment is in GCS; None when this host builds it."""
        deadline, said = time.monotonic() + WAIT_SECONDS, False
        while True:
            if self.bucket.stat(self.sidecar) is not None:
                return self._checked_meta()
            if self.builder:
                return None
            if self.bucket.stat(self.failed_marker) is not None:
                raise EnvError(self.bucket.download(self.failed_marker).decode(errors="replace"))
            if self.stopping():
                raise EnvStopped(f"{self.host}: stopped while waiting for the environment")
            if not said:
                self.log(f"{self.tag}: waiting for host 0000 to build it")
                said = True
            if time.monotonic() > deadline:
                raise EnvError(f"{self.host}: the environment {self.key[:12]} did not appear in "
                               f"GCS within {WAIT_SECONDS / 3600:.0f} h")
            time.sleep(2.0)

    def _refuse(self, why: str) -> EnvError:
        """A bad archive in the bucket: the builder (process 0) deletes it there (best
        effort), so the next run builds it; the other hosts leave it to process 0, which
        may still be reading it."""
        for name in (self.sidecar, self.object) if self.builder else ():
            try:
                self.bucket.delete(name)
            except Exception:  # gone already, or not ours to delete: the message still says
                pass
        return EnvError(f"{self.host}: refused the environment archive gs://{self.bucket.name}/"
                        f"{self.object}: {why}; podctl deletes it, run again to build it anew")

    def _checked_meta(self) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads(self.bucket.download(self.sidecar))
            sha, size, sig = str(meta["sha256"]), int(meta["size"]), str(meta["signature"])
        except (ValueError, KeyError, TypeError):
            raise self._refuse("its .json is not podctl's") from None
        if not hmac.compare_digest(sig, signature(self.sign_key, self.key, sha, size)):
            raise self._refuse("its signature is not this client's (changed in the bucket)")
        return meta

    # ---- tools: uv, and the environment's Python ------------------------------------

    def _uv(self) -> str | None:
        """A uv that runs here: the client's (from GCS, hash-checked), else one on PATH."""
        tool = self.uv_tool
        if tool:
            path = self.home / "tools" / f"uv-{tool['sha256']}"
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as tmp:
                    pass
                try:
                    self.bucket.download_file(tool["object"], tmp.name)
                    if _sha256(tmp.name) != tool["sha256"]:
                        raise EnvError(f"{self.host}: gs://{self.bucket.name}/{tool['object']} is not "
                                       "the client's uv (its hash differs); delete it and run again")
                    os.chmod(tmp.name, 0o755)
                    os.replace(tmp.name, path)
                finally:
                    Path(tmp.name).unlink(missing_ok=True)
            if subprocess.run([str(path), "--version"], capture_output=True).returncode == 0:
                return str(path)
        return shutil.which("uv")

    def _interpreter(self, uv: str | None) -> tuple[str, str]:
        """(path, how) of the environment's Python on this host."""
        if _version(sys.executable) == self.python:
            return sys.executable, "the image's"
        if uv is None:
            raise EnvError(f"{self.host}: the environment needs Python {self.python} and the image "
                           f"has {_version(sys.executable)}; uv cannot run here to install it "
                           f"(pass `podctl run --python {_version(sys.executable)}`)")
        found = subprocess.run([uv, "python", "find", self.python], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip(), "found by uv"
        self.log(f"{self.tag}: installing CPython {self.python} with uv")
        self._run([uv, "python", "install", self.python], "uv python install")
        found = subprocess.run([uv, "python", "find", self.python], capture_output=True, text=True)
        if found.returncode != 0 or not found.stdout.strip():
            raise EnvError(f"{self.host}: uv installed Python {self.python} but cannot find it")
        return found.stdout.strip(), "installed by uv"

    def _venv(self, uv: str | None, python: str) -> None:
        if uv is not None:
            self._run([uv, "venv", "--quiet", "--python", python, str(self.dir)], "uv venv")
        else:
            self._run([python, "-m", "venv", str(self.dir)], "python3 -m venv")

    # ---- running an installer: its output to the build log, a line now and then ----------

    def _run(self, argv: list[str], what: str) -> None:
        started = time.monotonic()
        with open(self.build_log, "a") as out:
            out.write(f"$ {' '.join(argv[:3])} ...\n")
            out.flush()
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            done = threading.Event()

            def progress() -> None:
                while not done.wait(PROGRESS_SECONDS):
                    self.log(f"{self.tag}: {what}: {time.monotonic() - started:.0f} s, "
                             f"{_size(self.dir) / 1e6:.0f} MB so far")

            threading.Thread(target=progress, daemon=True).start()
            try:
                while (code := proc.poll()) is None:
                    if self.stopping():
                        proc.terminate()
                        proc.wait()
                        raise EnvStopped(f"{self.host}: stopped while making the environment")
                    time.sleep(0.25)
            finally:
                done.set()
        if code != 0:
            lines = self.build_log.read_text(errors="replace").splitlines()
            for line in lines[-TAIL:]:
                self.log(f"{self.tag}: | {line}")
            self._ship_log()
            raise EnvError(f"{self.host}: {what} failed (exit {code}): "
                           f"{_failed_line(lines) or 'see env-build.log'}; its whole output is "
                           f"gs://{self.bucket.name}/{self.log_object}")

    def _ship_log(self) -> None:
        try:
            self.bucket.upload(self.log_object, self.build_log.read_bytes(), "text/plain")
        except Exception:  # the run's log already has its tail
            pass

    # ---- building, fetching ---------------------------------------------------------

    def _build(self) -> None:
        started = time.monotonic()
        try:
            uv = self._uv()
            python, how = self._interpreter(uv)
            self.log(f"{self.tag}: building on {self.host} with {'uv' if uv else 'pip'} from the "
                     f"package index, for Python {self.python} ({how})")
            self._venv(uv, python)
            lock = self.dir / "podctl-requirements.lock"
            lock.write_text(self.lock)
            venv_python = str(self.dir / "bin" / "python")
            if uv is not None:
                # the bytecode too, as pip compiles by default: packed with the rest, so no
                # host that fetches it compiles each module again at its first import
                self._run([uv, "pip", "sync", "--compile-bytecode", "--python", venv_python, *self.index_args,
                           str(lock)], "uv pip sync")
            else:
                self._run([venv_python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                           "--progress-bar", "off", "--no-deps", *self.index_args, "-r", str(lock)],
                          "pip install")
            self._ship_log()
            packages = len([ln for ln in self.lock.splitlines() if "==" in ln])
            with tempfile.TemporaryDirectory(dir=self.dir.parent) as tmp:
                archive = os.path.join(tmp, "env.tar.gz")
                size, sha = _pack(site_packages(self.dir, self.python), archive)
                self.bucket.upload_file(self.object, archive)
            meta = {"key": self.key, "sha256": sha, "size": size, "built_by": self.host,
                    "python": self.python, "packages": packages, "jax": _pinned(self.lock, "jax"),
                    "signature": signature(self.sign_key, self.key, sha, size)}
            self.bucket.upload(self.sidecar, json.dumps(meta).encode(), "application/json")
        except Exception as e:
            if isinstance(e, EnvError):
                raise
            raise EnvError(f"{self.host}: building the environment failed: "
                           f"{' '.join(str(e).split())[:300]}") from e
        self.log(f"{self.tag}: built on {self.host} with {'uv' if uv else 'pip'} from the package "
                 f"index: {packages} packages in {time.monotonic() - started:.1f} s; uploaded "
                 f"{size / 1e6:.1f} MB to GCS")

    def _fetch(self, meta: dict[str, Any]) -> None:
        started = time.monotonic()
        uv = self._uv() if _version(sys.executable) != self.python else None
        python, how = self._interpreter(uv)
        with tempfile.TemporaryDirectory(dir=self.dir.parent) as tmp:
            archive = os.path.join(tmp, "env.tar.gz")
            self.bucket.download_file(self.object, archive)
            if _sha256(archive) != meta["sha256"]:
                raise self._refuse("its sha256 is not the signed one (changed in the bucket)")
            if uv is not None:
                self._venv(uv, python)
            else:
                self._run([python, "-m", "venv", "--without-pip", str(self.dir)], "python3 -m venv")
            target = site_packages(self.dir, self.python)
            shutil.rmtree(target, ignore_errors=True)
            try:
                self.unpack(archive, str(target.parent))
            except Exception as e:
                raise self._refuse(' '.join(str(e).split())[:200]) from e
        self.log(f"{self.tag}: fetched from GCS ({meta.get('size', 0) / 1e6:.1f} MB, built by "
                 f"{meta.get('built_by')}, signature checked) for Python {self.python} ({how}) in "
                 f"{time.monotonic() - started:.1f} s; no package index")


def _pinned(lock: str, name: str) -> str | None:
    for line in lock.splitlines():
        if line.split("==")[0].split("[")[0].strip().lower() == name and "==" in line:
            return line.split("==", 1)[1].split(";")[0].strip()
    return None


def _failed_line(lines: list[str]) -> str:
    """The installer's own reason: its last `error:` line, else its last line."""
    for line in reversed(lines):
        if line.strip().lower().startswith(("error:", "  × ", "×")) or "No solution found" in line:
            return " ".join(line.split())[:300]
    return " ".join(lines[-1].split())[:300] if lines else ""


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


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


class ClientBuiltEnv:
    """One host's copy of an environment the client built (agent_env_fetch.py)."""

    dir: Path  # HOME/envs/KEY: its venv

    def __init__(self, bucket: Bucket, spec: dict[str, Any], *, home: Path, host: str, log: Callable[[str], None],
                 builder: bool = False, stopping: Callable[[], bool] = lambda: False):
        self.bucket, self.spec, self.host, self.log, self.stopping = bucket, spec, host, log, stopping
        self.builder = builder  # process 0: deletes an archive changed in the bucket
        self.key, self.python, self.archive = spec["key"], spec["python"], spec["archive"]
        self.home, self.dir = home, home / "envs" / self.key
        self.tag = f"[podctl] env {self.key[:12]}"

    def prepare(self) -> Path:
        """The environment's venv on this host; EnvError (EnvStopped) if not."""
        self.dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.dir.parent / f"{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs on one host fetch it once
            if (self.dir / agent_env_fetch.COMPLETE).exists():
                self.log(f"{self.tag}: already on this host")
                return self.dir
            work = Path(tempfile.mkdtemp(prefix=f".{self.key}.", dir=self.dir.parent))
            shutil.rmtree(work)  # stream_into makes it: a directory only once the fetch starts
            try:
                self._fetch(work)
            except agent_env_fetch.Stopped:
                raise EnvStopped(f"{self.host}: stopped while fetching the environment") from None
            except agent_env_fetch.Refused as e:
                after = "the run's script did not start"
                if isinstance(e, agent_env_fetch.Tampered) and self.builder:
                    try:  # so that the client's next run uploads its own again
                        self.bucket.delete(self.archive["object"])
                        after = "podctl deleted it; the next run uploads it anew"
                    except Exception:  # gone already, or not ours to delete: the message still says
                        pass
                raise EnvError(f"{self.host}: refused the environment archive gs://{self.bucket.name}/"
                               f"{self.archive['object']}: {e}; {after}") from None
            except (OSError, ValueError, KeyError) as e:
                raise EnvError(f"{self.host}: fetching the environment {self.key[:12]} failed: "
                               f"{' '.join(str(e).split())[:300]}") from e
            finally:
                shutil.rmtree(work, ignore_errors=True)
        return self.dir

    def _fetch(self, work: Path) -> None:
        inside = self.spec.get("interpreter") == "archive"
        if not inside:  # before the download: a host without the Python is said at once
            interpreter = agent_env_fetch.host_interpreter(self.python)
            if interpreter is None:
                raise EnvError(f"{self.host}: the environment needs Python {self.python}, which this "
                               "host lacks (a client on Google Cloud ships it in the archive)")
        tool = self.archive.get("zstandard")  # for a host without zstd (env_zstandard.py)
        load = (lambda: agent_env_fetch.load_zstandard(self.bucket, tool, self.home / "tools")) if tool else None
        seconds, how = agent_env_fetch.stream_into(self.bucket, self.archive["object"], self.archive, work,
                                                   stopping=self.stopping, zstandard_module=load)
        if inside:
            interpreter = str(work / "python" / "bin" / f"python{self.python}")
        version = agent_env_fetch.python_version(interpreter)
        if not version.startswith(self.python + "."):
            raise EnvError(f"{self.host}: the environment's Python {self.python} does not run here "
                           f"({interpreter})")
        agent_env_fetch.make_venv(work, self.dir, interpreter, version)
        (work / agent_env_fetch.COMPLETE).write_text(self.key)
        shutil.rmtree(self.dir, ignore_errors=True)  # what a killed attempt of --build-on host left
        os.rename(work, self.dir)
        size, whose = int(self.archive["size"]), "in the archive" if inside else "the host's"
        self.log(f"{self.tag}: fetched from GCS ({size / 1e6:.1f} MB in {seconds:.1f} s, "
                 f"{size / 1e6 / max(seconds, 1e-3):.0f} MB/s, sha256 checked, unpacked with {how}) "
                 f"for Python {version} ({whose}); no package index")
