"""The Python interpreters this machine has, found as uv finds them: `pythonX.Y` on PATH
(one that runs: a pyenv shim that is not set up fails and is skipped), pyenv's versions,
uv-managed installs. The fake's hosts take their image's Python from here, and a
preflight builds the hosts' environment here with one (where uv alone, offline, would
find none behind an unset pyenv shim).
"""

from __future__ import annotations

import glob
import os
import subprocess

from podctl.base import children

_PROBE = "import sys, platform; print('%d.%d' % sys.version_info[:2], platform.python_version())"


def probe(path: str) -> tuple[str, str] | None:
    """(X.Y, X.Y.Z) of the interpreter at PATH, None if it does not run."""
    try:
        done = children.run([path, "-c", _PROBE], timeout=20, env={**os.environ, "PYENV_VERSION": ""})
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
        probed = probe(path)
        if probed is not None and probed[0] == minor:
            return os.path.realpath(path), probed[1]
    return None
