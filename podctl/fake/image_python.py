"""The Python of a fake host's image: 3.10, as on v5p/v6e runtime images (Ubuntu 22.04).

A fake host runs on this machine, so its `python3` is one of the machine's. Found as
uv finds interpreters: `python3.10` on PATH (one that runs: a pyenv shim that is not
set up fails and is skipped), pyenv's versions, uv-managed installs. Without a 3.10
the hosts get the machine's python3, and `podctl fake status` says so.

The hosts' "python downloads": on Google, uv installs a current CPython on a host by
downloading it. The fake is offline, so it gives its hosts a uv-managed Python store
(UV_PYTHON_INSTALL_DIR) holding the machine's other interpreters (3.11 and later),
in uv's own layout, and turns downloads off: `uv python find 3.12` on a fake host
finds what the machine has, and asks for nothing else.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

IMAGE_VERSION = "3.10"
STORE_VERSIONS = ("3.11", "3.12", "3.13")
_PROBE = "import sys, platform; print('%d.%d' % sys.version_info[:2], platform.python_version())"


@dataclass(frozen=True)
class ImagePython:
    version: str  # "3.10.13"
    path: str  # the interpreter the hosts' python3 is
    bin_dir: Path  # first on the hosts' PATH: python3, python3.X
    store: Path  # the hosts' UV_PYTHON_INSTALL_DIR
    note: str  # for `podctl fake status`


def _probe(path: str) -> tuple[str, str] | None:
    """(X.Y, X.Y.Z) of the interpreter at PATH, None if it does not run."""
    try:
        done = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "PYENV_VERSION": ""})
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = done.stdout.split()
    return (parts[0], parts[1]) if done.returncode == 0 and len(parts) == 2 else None


def candidates(minor: str) -> list[str]:
    """Where an interpreter X.Y may be, in uv's order: PATH, pyenv, uv-managed."""
    found = [os.path.join(d, f"python{minor}") for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found += sorted(glob.glob(os.path.join(pyenv, "versions", f"{minor}.*", "bin", f"python{minor}")),
                    reverse=True)
    uv_dir = os.environ.get("UV_PYTHON_INSTALL_DIR") or os.path.expanduser("~/.local/share/uv/python")
    found += sorted(glob.glob(os.path.join(uv_dir, f"cpython-{minor}.*", "bin", f"python{minor}")),
                    reverse=True)
    return [path for path in found if os.access(path, os.X_OK)]


def find(minor: str) -> tuple[str, str] | None:
    """(path, X.Y.Z) of a working Python MINOR on this machine."""
    for path in candidates(minor):
        probed = _probe(path)
        if probed is not None and probed[0] == minor:
            return os.path.realpath(path), probed[1]
    return None


def prepare(root: Path) -> ImagePython:
    """ROOT/.image: the hosts' python3 and their uv-managed Python store."""
    bin_dir, store = root / ".image" / "bin", root / ".image" / "uv-python"
    shutil.rmtree(root / ".image", ignore_errors=True)
    bin_dir.mkdir(parents=True)
    store.mkdir(parents=True)
    found = find(IMAGE_VERSION)
    if found is not None:
        path, version = found
        note = f"Python {version} ({path}), as on v5p/v6e images"
    else:
        path = os.path.realpath(shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3")
        version = (_probe(path) or ("", "unknown"))[1]
        note = (f"the machine's Python {version} ({path}): no Python {IMAGE_VERSION} found on PATH, "
                "in pyenv or uv-managed; a real v5p/v6e image has 3.10")
    minor = ".".join(version.split(".")[:2])
    for name in ("python3", f"python{minor}"):
        (bin_dir / name).symlink_to(path)
    for wanted in STORE_VERSIONS:
        other = find(wanted)
        if other is None or wanted == minor:
            continue
        # uv's layout: cpython-X.Y.Z-linux-x86_64-gnu/bin/pythonX.Y
        target = store / f"cpython-{other[1]}-linux-x86_64-gnu" / "bin"
        target.mkdir(parents=True)
        (target / f"python{wanted}").symlink_to(other[0])
        (target / "python3").symlink_to(f"python{wanted}")
    return ImagePython(version=version, path=path, bin_dir=bin_dir, store=store, note=note)
