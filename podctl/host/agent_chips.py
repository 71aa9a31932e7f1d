"""One owner of a host's chips, whoever started the run: the agent's side.

Runs through the slice's watchers are root's, runs over SSH the login user's, each in
its own home; so the rule lives in the host's /tmp, which both can read and write
(sticky: each can remove only its own files). While the agent is alive its run has a
file there, CHIPS_DIR/RUN_ID, "PID STATE" (`live`, or `stopping` once a stop came): the
watchers (host_watch.others) and podctl over SSH (owner.py) read it before a start. The
agent removes it once its script and whatever the script left have ended; a file whose
agent died (SIGKILL, a host's reboot) is told apart by its pid (readers check that the
process is that run's agent).

libtpu's lock file (/tmp/libtpu_lockfile, opened O_CREAT|O_RDWR 0644 under the creator's
umask, never removed) would hold the next owner out when that owner is another user: a
root run's file cannot be opened by the login user, and libtpu then says the TPU is in use
"by another process probably owned by another user". So before the script starts, the
agent makes the file (or keeps it) writable by every user; lockf, not the file's mode,
is what keeps two holders apart.

The host's /tmp is TMPDIR where it is set (a fake host's own directory), else /tmp: on a
TPU VM neither the startup-script service nor an SSH session sets it. Standard library,
Python 3.10: shipped in the agent's zip.
"""

from __future__ import annotations

import os
import stat

try:  # on a host: the agent's zip holds its sibling modules at the top level
    import run_layout
except ImportError:
    from podctl.host import run_layout


def host_tmp() -> str:
    return os.environ.get("TMPDIR") or "/tmp"


def chips_dir() -> str:
    return os.path.join(host_tmp(), run_layout.CHIPS_DIR)


def lockfile() -> str:
    return os.path.join(host_tmp(), run_layout.LIBTPU_LOCKFILE)


def _shared_dir() -> str:
    """CHIPS_DIR, made sticky and open to every user by whoever comes first (the agent
    runs under umask 077). Refused when it is not a directory (a symlink planted there)."""
    d = chips_dir()
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    else:
        os.chmod(d, 0o1777)
    if not stat.S_ISDIR(os.lstat(d).st_mode):
        raise OSError(f"{d} is not a directory")
    return d


def claim(run_id: str, pid: int, stopping: bool = False) -> None:
    """Say on this host that RUN_ID's agent PID holds the chips (or lets go of them)."""
    d = _shared_dir()
    state = run_layout.CHIPS_STOPPING if stopping else run_layout.CHIPS_LIVE
    tmp = os.path.join(d, f".{run_id}.{pid}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(fd, 0o644)  # every user reads it, whatever the umask
        os.write(fd, f"{pid} {state}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(d, run_id))


def release(run_id: str) -> None:
    """The chips are free of RUN_ID here (its script and leftovers have ended)."""
    try:
        os.unlink(os.path.join(chips_dir(), run_id))
    except OSError:
        pass


def open_the_lock_to_all() -> str | None:
    """libtpu's lock file, made (or kept) writable by every user; -> a line to say when it
    belongs to another user and cannot be opened for writing (libtpu would fail)."""
    path = lockfile()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except PermissionError:
        return (f"{path} belongs to another user and this one ({os.environ.get('USER') or os.getuid()}) "
                f"cannot open it: JAX will say the TPU is in use; remove it (`sudo rm {path}`) "
                "once no process holds the chips")
    except OSError as e:
        return f"{path} cannot be opened ({e.strerror})"
    try:
        if os.fstat(fd).st_mode & 0o666 != 0o666:
            os.fchmod(fd, 0o666)  # its owner or root may; another user found it writable
    except OSError:
        pass
    finally:
        os.close(fd)
    return None
