"""A host's copy of an environment the client built: streamed from GCS, checked, kept.

Standard library only (Python 3.10+), shipped to hosts next to agent.py. The client
built the environment (env_build.py: the locked packages for this platform and, from a
real client, a relocatable CPython) and packed it once as tar + zstd; the run's config
carries the archive's object, size, sha256 and the sha256 of each of its parts
(PART_SIZE bytes, the last one shorter). On a host:

  - ~/.podctl/envs/KEY complete: used as it is;
  - else the archive is read from GCS in parts, several at once (ranged reads), and
    each part, once its hash matches the config's, is written in order into
    `zstd -d | tar -x` (the system's binaries) in a fresh directory beside KEY: tar
    never sees a byte that is not the client's. A host without a `zstd` binary (Ubuntu's
    images may lack the package) decompresses in this process instead, with the
    `zstandard` wheel the client shipped for the image's Python (env_zstandard.py: its
    object and sha256 in the config, checked before it is unzipped into
    ~/.podctl/tools/), into the same `tar -x`; the log line says which way it took. The whole is checked too (size,
    sha256); only then is the directory made a venv by hand (pyvenv.cfg, bin/python
    linked to the environment's interpreter: no venv module, no pip, no ensurepip)
    and renamed to KEY. A bad part ends the fetch: the directory is deleted, nothing
    in it has run.

The config comes over SSH (the run's config) or in launch.json, whose own sha256 the
slice's watcher checks against the node's metadata pointer: no key is needed on the
host, and a bucket writer who changes the archive is refused.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # on a host: agent_gcs is a sibling module; the type is for mypy only
    from podctl.host.agent_gcs import Bucket

PARALLEL = 8  # ranged reads in flight at once (each one part)
TRIES = 4  # a part's read, at most this many times (GCS answers 503 now and then)
COMPLETE = ".podctl-complete"


class Refused(Exception):
    """The archive is not the one the client recorded, or cannot be unpacked here."""


class Tampered(Refused):
    """Its bytes are not the ones the client recorded: someone changed the object."""


class Stopped(Exception):
    """podctl stopped the run meanwhile."""


def parts_of(size: int, part_size: int) -> list[tuple[int, int]]:
    """(start, end inclusive) of each part of an object of SIZE bytes."""
    return [(start, min(start + part_size, size) - 1) for start in range(0, size, part_size)] or [(0, -1)]


def _read_part(bucket: Bucket, name: str, start: int, end: int) -> bytes:
    for attempt in range(TRIES):
        try:
            return bucket.read_range(name, start, end)
        except Exception:
            if attempt == TRIES - 1:
                raise
            time.sleep(0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


class _ZstdPipe:
    """The system's `zstd -d | tar -x` into DEST."""

    how = "zstd"

    def __init__(self, zstd: str, dest: Path):
        self.unzstd = subprocess.Popen([zstd, "-d", "-q", "-c"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self.unzstd.stdin is not None and self.unzstd.stdout is not None
        self.untar = _untar(dest, self.unzstd.stdout)
        self.unzstd.stdout.close()  # tar's now: zstd sees a broken pipe if tar dies

    def feed(self, data: bytes) -> bool:
        """False once the pipe is broken (said by finish, from zstd's or tar's words)."""
        assert self.unzstd.stdin is not None
        try:
            self.unzstd.stdin.write(data)
        except BrokenPipeError:
            return False
        return True

    def finish(self) -> None:
        assert self.unzstd.stdin is not None and self.unzstd.stderr is not None
        assert self.untar.stderr is not None
        self.unzstd.stdin.close()
        zstd_code, tar_code = self.unzstd.wait(), self.untar.wait()
        if zstd_code != 0 or tar_code != 0:
            why = (self.untar.stderr.read() or self.unzstd.stderr.read()).decode(errors="replace").strip()
            raise Refused(f"unpacking failed (zstd exit {zstd_code}, tar exit {tar_code}): "
                          f"{' '.join(why.split())[:200]}")

    def close(self) -> None:
        _end((self.unzstd, self.untar), (self.unzstd.stdin, self.unzstd.stderr, self.untar.stderr))


class _PythonZstd:
    """zstandard's decompressor in this process (ZSTANDARD: the module), into `tar -x`."""

    def __init__(self, zstandard: Any, dest: Path):  # the zstandard module, loaded at run time
        self.how = f"python-zstandard {zstandard.__version__} (this host has no zstd)"
        self.error = zstandard.ZstdError
        self.frame = zstandard.ZstdDecompressor().decompressobj()
        self.untar = _untar(dest, subprocess.PIPE)

    def feed(self, data: bytes) -> bool:
        assert self.untar.stdin is not None
        try:
            self.untar.stdin.write(self.frame.decompress(data))
        except BrokenPipeError:
            return False
        except self.error as e:
            raise Refused(f"unpacking failed (zstandard: {' '.join(str(e).split())[:200]})") from None
        return True

    def finish(self) -> None:
        assert self.untar.stdin is not None and self.untar.stderr is not None
        self.untar.stdin.close()
        tar_code = self.untar.wait()
        if tar_code != 0:
            why = self.untar.stderr.read().decode(errors="replace").strip()
            raise Refused(f"unpacking failed (tar exit {tar_code}): {' '.join(why.split())[:200]}")
        if not self.frame.eof:
            raise Refused("unpacking failed: the archive's zstd frame ends early")

    def close(self) -> None:
        _end((self.untar,), (self.untar.stdin, self.untar.stderr))


def _untar(dest: Path, stdin: int | IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["tar", "-x", "-f", "-", "-C", str(dest), "--no-same-owner"],
                            stdin=stdin, stderr=subprocess.PIPE)


def _end(procs: tuple[subprocess.Popen[bytes], ...], streams: tuple[IO[bytes] | None, ...]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for stream in streams:
        if stream is not None and not stream.closed:
            try:
                stream.close()
            except BrokenPipeError:
                pass


def _unpacker(dest: Path, zstandard_module: Callable[[], object] | None) -> _ZstdPipe | _PythonZstd:
    """`zstd -d | tar -x` into DEST (made here), else the client's zstandard into `tar -x`."""
    zstd = shutil.which("zstd")
    module = None
    if zstd is None:
        if zstandard_module is None:
            raise Refused("this host has no `zstd` (Ubuntu's package zstd) and the run's config carries "
                          "no zstandard for it; install zstd, or run with `podctl run --build-on host`")
        module = zstandard_module()  # before the directory: nothing to clean if it is refused
    dest.mkdir(parents=True)
    return _ZstdPipe(zstd, dest) if zstd is not None else _PythonZstd(module, dest)


def _check_part(data: bytes | BaseException, index: int, ranges: list[tuple[int, int]], expected: str) -> None:
    """Part INDEX as read: Refused when its read failed, Tampered when it is not the client's."""
    if isinstance(data, BaseException):
        raise Refused(f"reading part {index + 1} of {len(ranges)} failed: "
                      f"{' '.join(str(data).split())[:200]}")
    start, end = ranges[index]
    if len(data) != end - start + 1 or hashlib.sha256(data).hexdigest() != expected:
        raise Tampered(f"part {index + 1} of {len(ranges)} is not the client's (its sha256 "
                       "differs: changed in the bucket)")


def stream_into(bucket: Bucket, name: str, archive: dict[str, Any], dest: Path, *,
                stopping: Callable[[], bool] = lambda: False,
                zstandard_module: Callable[[], object] | None = None) -> tuple[float, str]:
    """Unpack gs://BUCKET/NAME (ARCHIVE: size, sha256, part_size, parts) into DEST
    through `zstd -d | tar -x`, each part checked before it goes in; (seconds taken, the
    way it decompressed). Without a zstd binary, ZSTANDARD_MODULE() gives the client's
    zstandard (load_zstandard) to decompress here; without that, Refused."""
    started = time.monotonic()
    size, part_size, hashes = int(archive["size"]), int(archive["part_size"]), list(archive["parts"])
    ranges = parts_of(size, part_size)
    if len(ranges) != len(hashes):
        raise Refused(f"the config names {len(hashes)} parts for {len(ranges)}")
    sink = _unpacker(dest, zstandard_module)
    got: dict[int, bytes | BaseException] = {}
    ready = threading.Condition()
    next_part = [0]  # the next part a reader takes
    written = [0]  # parts written so far: readers stay within PARALLEL of it

    def reader() -> None:
        while True:
            with ready:
                while next_part[0] < len(ranges) and next_part[0] >= written[0] + PARALLEL:
                    ready.wait()
                if next_part[0] >= len(ranges) or any(isinstance(v, BaseException) for v in got.values()):
                    return
                index = next_part[0]
                next_part[0] += 1
            try:
                data: bytes | BaseException = _read_part(bucket, name, *ranges[index])
            except BaseException as e:  # said by the writer, in order
                data = e
            with ready:
                got[index] = data
                ready.notify_all()

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(min(PARALLEL, len(ranges)))]
    for thread in threads:
        thread.start()
    whole = hashlib.sha256()
    try:
        for index, expected in enumerate(hashes):
            with ready:
                while index not in got:
                    ready.wait(1.0)
                    if stopping():
                        raise Stopped()
                data = got.pop(index)
                written[0] = index + 1
                ready.notify_all()
            _check_part(data, index, ranges, expected)
            assert isinstance(data, bytes)
            whole.update(data)
            if not sink.feed(data):
                break  # said by finish, from the unpacker's own words
        sink.finish()
        if whole.hexdigest() != archive["sha256"]:
            raise Tampered("its sha256 is not the client's (changed in the bucket)")
    finally:
        with ready:
            next_part[0] = len(ranges)  # the readers stop taking parts
            ready.notify_all()
        sink.close()
    return time.monotonic() - started, sink.how


def load_zstandard(bucket: Bucket, tool: dict[str, Any], tools_dir: Path) -> ModuleType:
    """The `zstandard` module from the client's zip (TOOL: object, sha256, python): fetched
    once into TOOLS_DIR/zstandard-SHA, its sha256 checked before it is unzipped; Refused
    when it is not the client's or does not load in this Python."""
    sha, wanted = str(tool["sha256"]), str(tool.get("python", ""))
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if wanted and wanted != here:  # a C extension for another Python would not load
        raise Refused(f"this host has no `zstd`, and the zstandard podctl ships is for Python {wanted}, "
                      f"not this host's {here}: install zstd (apt-get install zstd)")
    place = tools_dir / f"zstandard-{sha}"
    if not (place / COMPLETE).exists():
        data = _read_part(bucket, str(tool["object"]), 0, int(tool["size"]) - 1)
        if hashlib.sha256(data).hexdigest() != sha:
            raise Tampered(f"gs://{bucket.name}/{tool['object']} is not the client's zstandard "
                           "(its sha256 differs: changed in the bucket)")
        work = tools_dir / f".zstandard-{sha}.{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        with zipfile.ZipFile(io.BytesIO(data)) as zipped:
            for member in zipped.namelist():  # checked already; names kept inside WORK anyway
                if member.startswith("/") or ".." in Path(member).parts:
                    raise Refused(f"the client's zstandard names {member!r}")
            zipped.extractall(work)
        (work / COMPLETE).write_text(sha)
        try:
            os.rename(work, place)
        except OSError:  # another run on this host unzipped it first
            shutil.rmtree(work, ignore_errors=True)
    sys.path.insert(0, str(place))
    try:
        import zstandard
    except ImportError as e:
        raise Refused(f"this host has no `zstd` and the client's zstandard does not load here "
                      f"({' '.join(str(e).split())[:150]}): install zstd (apt-get install zstd)") from None
    finally:
        sys.path.remove(str(place))
    return zstandard


def python_version(python: str) -> str:
    """X.Y.Z of the interpreter PYTHON, or "" when it does not run here."""
    try:
        done = subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def host_interpreter(minor: str) -> str | None:
    """A Python MINOR ("3.12") that this host has: the one running the agent, one on
    PATH, or one uv installed (UV_PYTHON_INSTALL_DIR, else uv's default place)."""
    candidates = [sys.executable, shutil.which(f"python{minor}") or ""]
    store = Path(os.environ.get("UV_PYTHON_INSTALL_DIR") or Path.home() / ".local/share/uv/python")
    if store.is_dir():
        for found in sorted(store.glob(f"cpython-{minor}.*-linux-x86_64-gnu/bin/python{minor}"), reverse=True):
            candidates.append(str(found))
    for candidate in candidates:
        if candidate and python_version(candidate).startswith(minor + "."):
            return os.path.realpath(candidate)
    return None


def make_venv(root: Path, final: Path, interpreter: str, version: str) -> None:
    """ROOT (to be renamed FINAL) as a venv of INTERPRETER (a path inside ROOT for the
    archive's own CPython): pyvenv.cfg and bin/python*, as `python -m venv` writes them."""
    minor = ".".join(version.split(".")[:2])
    inside = Path(interpreter).is_relative_to(root)
    home = final / Path(interpreter).relative_to(root).parent if inside else Path(interpreter).parent
    (root / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n"
                                     f"version = {version}\n")
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    target = os.path.relpath(interpreter, bin_dir) if inside else interpreter
    (bin_dir / "python").symlink_to(target)
    for alias in ("python3", f"python{minor}"):
        (bin_dir / alias).symlink_to("python")
    (root / "lib" / f"python{minor}" / "site-packages").mkdir(parents=True, exist_ok=True)
