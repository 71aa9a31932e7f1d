"""The CLI as a new user meets it: separate `podctl` processes sharing the fake
cloud's daemon, bad input answered in one line with no traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_in_process import podctl_here, shared_daemon
from tests.conftest import (
    Podctl,
    assert_one_line_error,
    fake_booting_after_the_test,
    isolated_environ,
    stop_fake_and_check,
)


def _here(cli: Podctl, *args: str) -> subprocess.CompletedProcess:
    """`podctl ARGS` in this process, for what sets a case up or tears it down; each case
    keeps its `podctl` processes for what it is about (tests/cli_in_process.py)."""
    return podctl_here(cli.tmp, *args, env=cli.env, check=True)


def test_fake_start_status_stop(podctl):
    stopped = podctl("fake", "status", "--json", check=False)
    assert stopped.returncode == 3  # not running: a script can test it
    assert json.loads(stopped.stdout) == {"running": False, "state_dir": str(podctl.tmp / "state" / "fake")}
    started = podctl.json("fake", "start")
    status = podctl.json("fake", "status")
    assert status["running"] and status["tpu_api"].startswith("http://127.0.0.1:")
    assert (status["project"], status["zone"], status["pid"]) == ("fake-project", "us-east5-a", started["pid"])
    assert podctl.json("fake", "start")["pid"] == started["pid"]  # a second start finds it
    assert "stopped" in podctl("fake", "stop").stdout
    stopped = podctl("fake", "status", check=False)
    assert stopped.returncode == 3 and "not running" in stopped.stdout


def test_lifecycle_v5p_4096_through_the_cli(podctl):
    """As the issue's new user: up, ls, status, down of a v5p-4096 on the fake (its hosts
    booting after the test: none of this reaches them)."""
    fake_booting_after_the_test(podctl)
    up = podctl.json("--backend", "fake", "up", "--slice", "v5p-4096")
    assert up["created"] and up["ready"] and up["state"] == "READY"
    assert (up["hosts"], up["topology"], up["chips"]) == (512, "8x16x16", 2048)
    assert len(up["nodes"][0]["hosts"]) == 512
    name = up["name"]
    listed = podctl.json("--backend", "fake", "ls")
    assert [(s["name"], s["hosts"], s["topology"]) for s in listed] == [(name, 512, "8x16x16")]
    human = podctl("--backend", "fake", "ls").stdout
    assert name in human and "8x16x16" in human and "512" in human
    status = podctl("--backend", "fake", "status", name).stdout
    assert "2048 on 512 hosts" in status and "... and 496 more" in status
    again = podctl.json("--backend", "fake", "up", "--slice", "v5p-4096")
    assert not again["created"] and again["name"] == name
    down = podctl.json("--backend", "fake", "down", name, "--yes")
    assert down == {"name": name, "kind": "node", "deleted": True, "deleting": False, "state_before": "READY"}
    assert podctl.json("--backend", "fake", "ls") == []


def test_queued_multislice_and_env_backend(podctl):
    env = {"PODCTL_BACKEND": "fake"}
    proc = podctl("up", "--slice", "v5p-8", "--num-slices", "2", "--spot", "--valid-for", "6h",
                  "--name", "ms", "--json", env=env)
    up = json.loads(proc.stdout)
    assert (up["kind"], up["num_slices"], up["hosts"], up["tier"]) == ("queued-resource", 2, 2, "spot")
    assert up["valid_until"] is not None
    # no terminal: no spinner control codes, no colours
    assert "\x1b" not in proc.stderr + proc.stdout
    _here(podctl, "down", "ms", "--yes", "--backend", "fake")


def test_daemon_keeps_slices_across_its_restart(podctl):
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "keep")
    podctl("fake", "stop")
    world = podctl.tmp / "state" / "fake" / "world.json"
    assert stat.S_IMODE(world.stat().st_mode) == 0o600
    listed = podctl.json("--backend", "fake", "ls")  # starts the daemon again
    assert [s["name"] for s in listed] == ["keep"]
    _here(podctl, "--backend", "fake", "down", "keep", "--yes")


def test_ssh_key_is_made_once_and_private(podctl):
    podctl("--backend", "fake", "up", "--slice", "v5p-8", "--name", "k1", "--no-wait")
    key = podctl.tmp / "config" / "ssh" / "podctl_ed25519"
    first = key.read_bytes()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "k2", "--no-wait")
    assert key.read_bytes() == first
    for name in ("k1", "k2"):
        _here(podctl, "--backend", "fake", "down", name, "--yes")


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One fake daemon for every refusal below (tests/cli_in_process.py, shared_daemon);
    its end checks that none of them made anything billable."""
    with shared_daemon(tmp_path_factory.mktemp("refusals")) as cli:
        yield cli


@pytest.mark.parametrize("slice_name, words", [
    ("v5p-4095", ["v5p-4096"]), ("v5p-7", ["v5p-8"]), ("v5p-0", ["v5p-8"]),
    ("v5p-abc", ["v5p-N"]), ("v3-8", ["unknown TPU generation"]), ("v5p-99999", ["--num-slices"]),
    ("v7x-8", ["TPU7x (Ironwood) is written tpu7x-N"]),
])
def test_bad_slice_names(refusing, slice_name, words):
    # in this process, on the module's daemon; through a `podctl` process:
    # test_down_without_yes_off_a_terminal_refuses
    proc = podctl_here(refusing.tmp, "--backend", "fake", "up", "--slice", slice_name, env=refusing.env)
    assert_one_line_error(proc, 2, *words)


@pytest.mark.parametrize("args, code, words", [
    (["up", "--slice", "v5p-8", "--name", "Bad_Name"], 2, ["not a valid slice name"]),
    (["up", "--slice", "v5p-8", "--zone", "mars-central1-a"], 2, ["offers no TPU v5p"]),
    (["up", "--slice", "v5p-8", "--zone", "nonsense"], 2, ["not a zone name"]),
    (["up", "--slice", "v5p-8", "--valid-for", "6h"], 2, ["add --queued"]),
    (["up", "--slice", "v5p-8", "--queued", "--valid-for", "soon"], 2, ["not a duration"]),
    (["up", "--slice", "v5p-8", "--spot", "--guaranteed"], 2, ["choose one"]),
    (["up", "--slice", "v5p-8", "--num-slices", "0"], 2, ["1 or more"]),
    (["status", "nothing-here"], 1, ["no slice named 'nothing-here'"]),
    (["down", "nothing-here", "--yes"], 1, ["no slice named"]),
])
def test_bad_input_on_the_fake(refusing, args, code, words):
    assert_one_line_error(podctl_here(refusing.tmp, "--backend", "fake", *args, env=refusing.env), code, *words)


def test_down_without_yes_off_a_terminal_refuses(podctl):
    _here(podctl, "--backend", "fake", "up", "--slice", "v5p-8", "--name", "ask")
    assert_one_line_error(podctl("--backend", "fake", "down", "ask", check=False), 2, "--yes")
    # the refusals of test_bad_slice_names and test_bad_input_on_the_fake, through a process
    assert_one_line_error(podctl("--backend", "fake", "up", "--slice", "v5p-7", check=False), 2, "v5p-8")
    assert_one_line_error(podctl("--backend", "fake", "status", "nothing-here", check=False), 1,
                          "no slice named 'nothing-here'")
    _here(podctl, "--backend", "fake", "down", "ask", "--yes")


def test_google_cloud_without_project_or_credentials(podctl):
    proc = podctl("ls", check=False)
    assert_one_line_error(proc, 2, "no Google Cloud project", "--project")
    proc = podctl("ls", "--project", "my-project", "--zone", "us-central1-a", check=False)
    assert_one_line_error(proc, 2, "no Google Cloud credentials", "gcloud auth application-default login")


def test_help_is_fast_to_import():
    """`podctl --help` imports only click: nothing of Google's, asyncssh or rich."""
    code = ("import sys; sys.argv=['podctl','--help']\n"
            "from podctl.cli.main import cli\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "heavy=[m for m in sys.modules if m.split('.')[0] in "
            "('google','asyncssh','rich','structlog','tenacity','jax','aiohttp','matplotlib')]\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_help_reads_no_toml_and_imports_no_command_module():
    code = ("import sys; sys.argv=['podctl','--help']\n"
            "from podctl.cli.main import cli\n"
            "try:\n    cli()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m in ('tomllib', 'podctl.base.topology') "
            "or m.endswith(('_cmds', '_cmd'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _boots_late_while_the_v5p_4096_lives(cli: Podctl) -> tuple[threading.Thread, dict]:
    """Start the example's fake daemon first (its own `podctl fake start` then finds it)
    with every host's startup-script due later than the v5p-4096 lives, and put the
    fake's own boot timing back once that slice is deleted, before the v5p-16 is made:
    the 4096's 512 watchers (65 s of CPU on 2 cores, the whole of this test's cost) never
    start, the v5p-16's boot as they always do. The boots of a big slice are
    test_boot_late's (a v5p-512). -> (the thread, what it saw: "error" if anything of
    the v5p-16 existed before the timing was back)."""
    from podctl.fake.admin.admin_client import FakeAdmin

    cli("--backend", "fake", "fake", "start")
    admin = FakeAdmin(cli.json("fake", "status")["admin"])
    usual = admin.set_timings()["boot_late"]
    admin.set_timings(boot_late=1e7)
    seen: dict = {"error": None, "restored": False}

    def names() -> str:
        return json.dumps(admin.resources())

    def restore_after_the_4096() -> None:
        try:
            while "demo-v5p-4096" not in names():
                time.sleep(0.2)
            while "demo-v5p-4096" in (now := names()):
                time.sleep(0.2)
            if "demo-v5p-16" in now:
                seen["error"] = f"the v5p-16 was made before the boot timing was back: {now}"
            admin.set_timings(boot_late=usual)
            seen["restored"] = True
        except Exception as e:  # the example failed and stopped the fake: its own assertion says why
            seen["error"] = seen["error"] or f"{type(e).__name__}: {e}"

    thread = threading.Thread(target=restore_after_the_4096, daemon=True)
    thread.start()
    return thread, seen


@pytest.mark.host_env
def test_lifecycle_example_runs(tmp_path):
    """examples/lifecycle.sh, the CLI's lifecycle, runs as written and leaves nothing behind."""
    env = isolated_environ(tmp_path)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    repo = Path(__file__).resolve().parents[2]
    cli = Podctl(tmp_path)
    thread, seen = _boots_late_while_the_v5p_4096_lives(cli)
    try:
        proc = subprocess.run(["bash", str(repo / "examples" / "lifecycle.sh")], capture_output=True,
                              text=True, env=env, timeout=1200, cwd=tmp_path)
    finally:
        stop_fake_and_check(cli)  # the example stops it; a failed one may not have
    thread.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert seen["restored"] and seen["error"] is None, seen
    assert "demo-v5p-4096: READY, 512 hosts, topology 8x16x16" in proc.stdout
    assert "[host 0001] Python 3." in proc.stdout  # the image's python3, before any run
    assert "[host 0000] process 0 of 2: devices 8, local 4, sum 992.0" in proc.stdout
    assert "[host 0001] process 1 of 2: devices 8, local 4, sum 992.0" in proc.stdout
    assert "succeeded" in proc.stdout  # `podctl runs`
    assert "(2 hosts, via boot)" in proc.stdout  # the v5p-16's watchers booted and took the run
    assert "fake cloud stopped" in proc.stdout
