"""The startup script every slice carries (boot_script.py): small, static, valid bash,
and it starts exactly one watcher on a host however often it runs."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from podctl.jobs import boot_script
from podctl.host import host_pin, host_watch, run_layout


def test_the_script_is_small_static_and_names_its_version():
    assert len(boot_script.BOOT_SCRIPT.encode()) <= boot_script.MAX_BYTES
    assert hashlib.sha256(boot_script.BOOT_SCRIPT.encode()).hexdigest()[:12] == boot_script.BOOT_VERSION
    assert Path(host_watch.__file__).read_text() in boot_script.BOOT_SCRIPT  # inlined whole
    assert Path(host_pin.__file__).read_text() in boot_script.BOOT_SCRIPT  # and what it accepts
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
        assert (d / "host_pin.py").read_text() == Path(host_pin.__file__).read_text()
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


class _GuestAttributes:
    """A metadata server that takes guest attribute PUTs (podctl/KEY -> value), on loopback."""

    def __enter__(self) -> _GuestAttributes:
        import http.server
        import threading

        said = self.said = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Metadata-Flavor") == "Google":
                    said[self.path.rsplit("/", 1)[-1]] = body.decode()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.where = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_boot_that_cannot_start_the_watcher_says_why_in_its_guest_attribute(tmp_path):
    """No python3, a home where the watcher's directory cannot be made: the script says
    `failed WHY` in podctl/watch with bash alone, and exits 1."""
    (tmp_path / "nothome").write_text("a file, not a directory")
    with _GuestAttributes() as metadata:
        env = {"HOME": str(tmp_path / "nothome"), "PATH": os.environ["PATH"], "PODCTL_FAKE_HOST": "1",
               "GCE_METADATA_HOST": metadata.where}
        done = subprocess.run(["bash", "-c", boot_script.BOOT_SCRIPT], env=env, capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 1, done.stderr
        assert metadata.said["watch"].startswith(f"failed cannot make {tmp_path}/nothome/.podctl/watch: mkdir: "), (
            metadata.said)
        assert "Not a directory" in metadata.said["watch"]
        env.update(HOME=str(tmp_path), PATH=str(tmp_path / "bin"))
        (tmp_path / "bin").mkdir()
        for tool in ("id", "mkdir", "chmod", "cat", "mv", "timeout"):  # no python3 among them
            (tmp_path / "bin" / tool).symlink_to(subprocess.run(["bash", "-c", f"command -v {tool}"],
                                                                capture_output=True, text=True).stdout.strip())
        done = subprocess.run(["/bin/bash", "-c", boot_script.BOOT_SCRIPT], env=env, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 1, done.stderr
        assert metadata.said["watch"] == f"failed no python3 on this host's PATH ({tmp_path}/bin)", metadata.said


def test_a_watcher_that_cannot_take_its_lock_says_why_and_exits(tmp_path):
    """A full disk when the watcher starts (the fake's disk-full fault, through the hosts'
    sitecustomize): podctl/watch says `failed OSError: [Errno 28] ...`."""
    from podctl.fake.admin import faults

    sitecustomize = Path(faults.__file__).parents[1] / "vm" / "tpu_vm" / "sitecustomize.py"
    assert f'DISK_FULL_FILE = "{faults.DISK_FULL_FILE}"' in sitecustomize.read_text()  # one name on both sides
    (tmp_path / "tmp").mkdir()
    (tmp_path / "watch").mkdir()
    (tmp_path / faults.DISK_FULL_FILE).touch()
    with _GuestAttributes() as metadata:
        env = {"HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp"), "PATH": os.environ["PATH"],
               "PODCTL_FAKE_HOST": "1", "PYTHONPATH": str(sitecustomize.parent), "GCE_METADATA_HOST": metadata.where}
        done = subprocess.run(["python3", host_watch.__file__, str(tmp_path / "watch")], env=env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 1, done.stderr
        assert metadata.said == {"watch": "failed OSError: [Errno 28] No space left on device: "
                                          f"'{tmp_path}/watch/{host_watch.LOCK_FILE}'"}, done.stderr
