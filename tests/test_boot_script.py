"""The startup script every slice carries (boot_script.py): small, static, valid bash,
and it starts exactly one watcher on a host however often it runs."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from podctl.jobs import boot_script, host_watch, run_layout


def test_the_script_is_small_static_and_names_its_version():
    assert len(boot_script.BOOT_SCRIPT.encode()) <= boot_script.MAX_BYTES
    assert hashlib.sha256(boot_script.BOOT_SCRIPT.encode()).hexdigest()[:12] == boot_script.BOOT_VERSION
    assert Path(host_watch.__file__).read_text() in boot_script.BOOT_SCRIPT  # inlined whole
    assert boot_script.boot_metadata() == {"startup-script": boot_script.BOOT_SCRIPT,
                                           "podctl-boot": boot_script.BOOT_VERSION,
                                           "enable-guest-attributes": "TRUE"}
    assert run_layout.BOOT_KEY == "podctl-boot"
    done = subprocess.run(["bash", "-n"], input=boot_script.BOOT_SCRIPT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "systemd-run --unit=podctl-watch --property=Restart=on-failure" in boot_script.BOOT_SCRIPT


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _eventually(check, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    return check()


def test_the_script_starts_one_watcher_in_the_users_home_and_a_rerun_is_a_no_op(tmp_path):
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    # PODCTL_FAKE_HOST: the non-root path even when the tests run as root (as a fake host does);
    # nothing answers at 127.0.0.1:9, so the watcher backs off and keeps trying
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "PODCTL_FAKE_HOST": "1",
           "GCE_METADATA_HOST": "127.0.0.1:9"}
    script = tmp_path / "startup-script"
    script.write_text(boot_script.BOOT_SCRIPT)
    d = home / run_layout.WATCH_DIR
    pid = 0
    try:
        started = time.monotonic()
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert time.monotonic() - started < 5  # it does not wait for the watcher
        assert (d / "host_watch.py").read_text() == Path(host_watch.__file__).read_text()
        assert d.stat().st_mode & 0o777 == 0o700
        pid = int(_eventually(lambda: (d / host_watch.PID_NAME).exists()
                              and (d / host_watch.PID_NAME).read_text()) or 0)
        assert pid and _alive(pid)
        assert os.getsid(pid) == pid  # a session of its own: it outlives the script
        assert _eventually(lambda: "watching 127.0.0.1:9" in (d / "watch.log").read_text())

        again = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
        assert again.returncode == 0, again.stderr
        assert _eventually(lambda: "another watcher holds" in (d / "watch.log").read_text())
        assert (d / host_watch.PID_NAME).read_text() == str(pid) and _alive(pid)
        assert (d / "watch.log").read_text().count("watching ") == 1
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
