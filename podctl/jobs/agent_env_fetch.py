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
    never sees a byte that is not the client's. The whole is checked too (size,
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
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

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


def _read_part(bucket, name: str, start: int, end: int) -> bytes:
    for attempt in range(TRIES):
        try:
            return bucket.read_range(name, start, end)
        except Exception:
            if attempt == TRIES - 1:
                raise
            time.sleep(0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


def stream_into(bucket, name: str, archive: dict, dest: Path, *,
                stopping: Callable[[], bool] = lambda: False) -> float:
    """Unpack gs://BUCKET/NAME (ARCHIVE: size, sha256, part_size, parts) into DEST
    through `zstd -d | tar -x`, each part checked before it goes in; seconds taken."""
    started = time.monotonic()
    size, part_size, hashes = int(archive["size"]), int(archive["part_size"]), list(archive["parts"])
    ranges = parts_of(size, part_size)
    if len(ranges) != len(hashes):
        raise Refused(f"the config names {len(hashes)} parts for {len(ranges)}")
    zstd = shutil.which("zstd")
    if zstd is None:
        raise Refused("this host has no `zstd` (Ubuntu's package zstd, on TPU VM images with "
                      "initramfs-tools); install it, or run with `podctl run --build-on host`")
    dest.mkdir(parents=True)
    unzstd = subprocess.Popen([zstd, "-d", "-q", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert unzstd.stdin is not None and unzstd.stdout is not None
    untar = subprocess.Popen(["tar", "-x", "-f", "-", "-C", str(dest), "--no-same-owner"],
                             stdin=unzstd.stdout, stderr=subprocess.PIPE)
    unzstd.stdout.close()  # tar's now: zstd sees a broken pipe if tar dies
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
            if isinstance(data, BaseException):
                raise Refused(f"reading part {index + 1} of {len(ranges)} failed: "
                              f"{' '.join(str(data).split())[:200]}")
            start, end = ranges[index]
            if len(data) != end - start + 1 or hashlib.sha256(data).hexdigest() != expected:
                raise Tampered(f"part {index + 1} of {len(ranges)} is not the client's (its sha256 "
                               "differs: changed in the bucket)")
            whole.update(data)
            try:
                unzstd.stdin.write(data)
            except BrokenPipeError:
                break  # said below, from zstd's or tar's own words
        unzstd.stdin.close()
        zstd_code, tar_code = unzstd.wait(), untar.wait()
        if zstd_code != 0 or tar_code != 0:
            assert unzstd.stderr is not None and untar.stderr is not None
            why = (untar.stderr.read() or unzstd.stderr.read()).decode(errors="replace").strip()
            raise Refused(f"unpacking failed (zstd exit {zstd_code}, tar exit {tar_code}): "
                          f"{' '.join(why.split())[:200]}")
        if whole.hexdigest() != archive["sha256"]:
            raise Tampered("its sha256 is not the client's (changed in the bucket)")
    finally:
        with ready:
            next_part[0] = len(ranges)  # the readers stop taking parts
            ready.notify_all()
        for proc in (unzstd, untar):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for stream in (unzstd.stdin, unzstd.stderr, untar.stderr):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass
    return time.monotonic() - started


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
