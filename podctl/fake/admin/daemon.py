"""The fake cloud as a background daemon, shared by separate CLI invocations.

    podctl fake start | stop | status [--json]

The daemon lives in a state directory (`$PODCTL_STATE_DIR/fake` by default):
`daemon.json` says where it listens (written once it does), `world.json` holds
the world across restarts (0600), `hosts/` the fake hosts' host keys and home
directories, `gcs/` the GCS emulator's objects, `daemon.log` its output, `lock`
serialises starts so that two commands that both find it stopped start one daemon.
A restart brings the hosts of READY nodes back (on their old ports when free).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from podctl.base.errors import FakeCloudError
from podctl.base.settings import FAKE_BUCKET, switch
from podctl.fake.admin.admin_client import FakeAdmin

DEFAULT_TIME_SCALE = 60.0  # a simulated minute per second: `up` of a v5p-4096 in seconds
_START_TIMEOUT = 20.0
SECURE_VAR = "PODCTL_FAKE_SECURE"  # 1: a daemon started without --secure starts secure anyway


def _info_path(state_dir: Path) -> Path:
    return state_dir / "daemon.json"


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _alive(pid: int) -> bool:
    # A daemon this process started (the Python API, a test) is its child: once it
    # exits it stays a zombie, which kill(0) finds alive, until it is reaped here.
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # not our child: PID 1 should reap it, but a container's may not
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1] in ("Z", "X")
    except (OSError, IndexError):
        return False
    return False


def _is_daemon(pid: int, state_dir: Path) -> bool:
    """Is PID this state directory's daemon? A pid in a stale daemon.json may since
    belong to anything; only a process whose command line says so is ever signalled."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"podctl.fake.admin.daemon" in argv and str(state_dir).encode() in argv


def status(state_dir: Path) -> dict[str, Any]:
    """{"running": False} or the daemon's description, checked against the live process.

    A daemon that lives but does not answer is reported with "hung": true.
    """
    down = {"running": False, "state_dir": str(state_dir)}
    try:
        info = json.loads(_info_path(state_dir).read_text())
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return down
    try:
        live = FakeAdmin(info["admin"], timeout=5).status()
    except FakeCloudError:
        live = {}
    if live.get("pid") == pid:
        return {**live, "state_dir": str(state_dir)}
    if _alive(pid) and _is_daemon(pid, state_dir):
        return {**down, "hung": True, "pid": pid}
    return down


def start(state_dir: Path, *, project: str, zone: str, time_scale: float | None = None,
          bucket: str = FAKE_BUCKET, secure: bool | None = None) -> dict[str, Any]:
    """Start the daemon unless it runs; returns its status (with "gcs" and "bucket").

    BUCKET is made in the GCS emulator when the daemon starts; a running daemon
    keeps the bucket it was started with. SECURE (default: PODCTL_FAKE_SECURE, 1 or 0)
    sets its project up secure-by-default (True) or as older organisations' (False,
    iam.py); None keeps a saved world's set-up."""
    with _locked(state_dir):
        current = status(state_dir)
        if current["running"]:
            return current
        if current.get("hung"):
            _terminate(int(current["pid"]))
        _info_path(state_dir).unlink(missing_ok=True)
        scale = time_scale or float(os.environ.get("PODCTL_FAKE_TIME_SCALE", DEFAULT_TIME_SCALE))
        if secure is None:
            secure = switch(os.environ.get(SECURE_VAR), SECURE_VAR)
        log = open(state_dir / "daemon.log", "ab")  # noqa: SIM115 (the daemon's, closed below)
        os.chmod(state_dir / "daemon.log", 0o600)
        process = subprocess.Popen(
            [sys.executable, "-m", "podctl.fake.admin.daemon", "--state-dir", str(state_dir),
             "--project", project, "--zone", zone, "--time-scale", str(scale), "--bucket", bucket,
             *([] if secure is None else ["--secure" if secure else "--no-secure"])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise FakeCloudError(f"the fake cloud daemon exited at start (code "
                                     f"{process.returncode}); see {state_dir / 'daemon.log'}")
            current = status(state_dir)
            if current["running"]:
                return current
            time.sleep(0.05)
        process.kill()
        raise FakeCloudError(f"the fake cloud daemon did not start in {_START_TIMEOUT:.0f} s; "
                             f"see {state_dir / 'daemon.log'}")


def stop(state_dir: Path, timeout: float = 15.0) -> bool:
    """Stop the daemon (it saves its world first); False if it was not running."""
    with _locked(state_dir):
        current = status(state_dir)
        pid = current.get("pid")
        verified = current["running"] or (pid and _is_daemon(int(pid), state_dir))
        if not pid or not verified:
            _info_path(state_dir).unlink(missing_ok=True)
            return False
        _terminate(int(pid), timeout)
        _info_path(state_dir).unlink(missing_ok=True)
        return True


def _terminate(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM (the daemon saves its world), then SIGKILL if it will not go."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


async def _serve(state_dir: Path, project: str, zone: str, time_scale: float, bucket: str,
                 secure: bool | None = None) -> None:
    import asyncio  # here too: `podctl fake status` and `fake stop` (twice per CLI test) need none

    from podctl.fake.api.server import FakeCloud  # here: a CLI that only finds the daemon stays light

    cloud = FakeCloud(state_file=state_dir / "world.json", project=project, zone=zone,
                      hosts_root=state_dir / "hosts", gcs_dir=state_dir / "gcs", bucket=bucket,
                      secure=secure)
    cloud.world.time_scale = time_scale
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)  # before start: a stop always cleans up
    await cloud.start()
    info = {**cloud.describe(), "state_dir": str(state_dir), "started": time.time()}
    tmp = _info_path(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    os.chmod(tmp, 0o600)
    os.replace(tmp, _info_path(state_dir))
    try:
        await stopping.wait()
    finally:
        await cloud.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m podctl.fake.admin.daemon")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--zone", required=True)
    parser.add_argument("--time-scale", type=float, default=DEFAULT_TIME_SCALE)
    parser.add_argument("--bucket", default=FAKE_BUCKET)
    parser.add_argument("--secure", action=argparse.BooleanOptionalAction, default=None)
    args = parser.parse_args(argv)
    os.umask(0o077)
    import asyncio

    asyncio.run(_serve(args.state_dir, args.project, args.zone, args.time_scale, args.bucket,
                       args.secure))


if __name__ == "__main__":
    main()
