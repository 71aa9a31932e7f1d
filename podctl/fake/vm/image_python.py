"""The Python of a fake host's image: 3.10, as on v5p/v6e runtime images (Ubuntu 22.04).

A fake host runs on this machine, so its `python3` is one of the machine's, found as
uv finds interpreters (podctl/base/pythons.py). Without a 3.10
the hosts get the machine's python3, and `podctl fake status` says so.

The hosts' "python downloads": on Google, uv installs a current CPython on a host by
downloading it. The fake is offline, so it gives its hosts a uv-managed Python store
(UV_PYTHON_INSTALL_DIR) holding the machine's other interpreters (3.11 and later),
in uv's own layout, and turns downloads off: `uv python find 3.12` on a fake host
finds what the machine has, and asks for nothing else.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from podctl.base.pythons import find, probe

IMAGE_VERSION = "3.10"
STORE_VERSIONS = ("3.11", "3.12", "3.13")


@dataclass(frozen=True)
class ImagePython:
    version: str  # "3.10.13"
    path: str  # the interpreter the hosts' python3 is
    bin_dir: Path  # first on the hosts' PATH: python3, python3.X
    store: Path  # the hosts' UV_PYTHON_INSTALL_DIR
    note: str  # for `podctl fake status`


def prepare(root: Path) -> ImagePython:
    """ROOT/.image: the hosts' python3 and their uv-managed Python store."""
    bin_dir, store = root / ".image" / "bin", root / ".image" / "uv-python"
    shutil.rmtree(root / ".image", ignore_errors=True)
    bin_dir.mkdir(parents=True)
    store.mkdir(parents=True)
    wanted_versions = (IMAGE_VERSION, *STORE_VERSIONS)
    with ThreadPoolExecutor(len(wanted_versions)) as pool:  # each probe starts an interpreter
        found_by = dict(zip(wanted_versions, pool.map(find, wanted_versions)))
    found = found_by[IMAGE_VERSION]
    if found is not None:
        path, version = found
        note = f"Python {version} ({path}), as on v5p/v6e images"
    else:
        path = os.path.realpath(shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3")
        version = (probe(path) or ("", "unknown"))[1]
        note = (f"the machine's Python {version} ({path}): no Python {IMAGE_VERSION} found on PATH, "
                "in pyenv or uv-managed; a real v5p/v6e image has 3.10")
    minor = ".".join(version.split(".")[:2])
    for name in ("python3", f"python{minor}"):
        (bin_dir / name).symlink_to(path)
    for wanted in STORE_VERSIONS:
        other = found_by[wanted]
        if other is None or wanted == minor:
            continue
        # uv's layout: cpython-X.Y.Z-linux-x86_64-gnu/bin/pythonX.Y
        target = store / f"cpython-{other[1]}-linux-x86_64-gnu" / "bin"
        target.mkdir(parents=True)
        (target / f"python{wanted}").symlink_to(other[0])
        (target / "python3").symlink_to(f"python{wanted}")
    return ImagePython(version=version, path=path, bin_dir=bin_dir, store=store, note=note)


ZSTD_COMMANDS = frozenset(("zstd", "unzstd", "zstdcat", "zstdmt", "pzstd", "zstdgrep", "zstdless"))


def path_without_zstd(image: ImagePython, host_path: str) -> str:
    """The PATH of an image without Ubuntu's package zstd (the `no-zstd` fault): the
    image's python3, then every command of HOST_PATH but zstd's, as symlinks made once in
    ROOT/.image/without-zstd (the first of a name on HOST_PATH, as a shell finds it)."""
    place = image.bin_dir.parent / "without-zstd"
    if not place.is_dir():
        work = place.with_name(f".without-zstd.{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for directory in host_path.split(":"):
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for name in names:
                if name not in ZSTD_COMMANDS and not (work / name).is_symlink():
                    (work / name).symlink_to(os.path.join(directory, name))
        try:
            work.rename(place)
        except OSError:  # made meanwhile by another host's session
            shutil.rmtree(work, ignore_errors=True)
    return f"{image.bin_dir}:{place}"
