"""`podctl run / logs / runs / exec` as separate processes on the fake daemon."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.base.vocabulary import LIVE_RUN_STATES
from podctl.host import run_layout
from tests import boot_support as boot
from tests.conftest import Podctl, _share_env_signing_key, assert_one_line_error, slice_on_daemon

SCRIPTS = Path(__file__).parents[1] / "scripts"


@pytest.fixture(scope="module")
def _cli16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One daemon and v5p-16 "cli16" for every case that needs only a ready slice with no
    run on it: the refusals, and the runs that end (or are stopped) before their case does.
    A daemon and a v5p-16 made and deleted per case cost about 4 s of CPU each, 10-25 s
    of a worker's time on 2 cores; under pytest-xdist each worker that runs one of these
    cases makes this once. `podctl` below checks that each case leaves it as it found it."""
    tmp = tmp_path_factory.mktemp("cli16")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    with slice_on_daemon(Podctl(tmp), "v5p-16", "cli16") as cli:
        yield cli


@pytest.fixture
def podctl(_cli16: Podctl) -> Iterator[Podctl]:
    """The shared ready v5p-16; after the case no run of it is live (the next case's run
    would be refused as busy) and the fake holds what it held before (nothing billable
    made and left)."""
    billable = boot.admin(_cli16).resources()
    yield _cli16
    assert boot.eventually(lambda: not _live_runs(_cli16), 60, every=0.5), \
        f"the case left runs live on the shared slice: {_live_runs(_cli16)}"
    assert boot.admin(_cli16).resources() == billable, "the case left billable resources"


@pytest.fixture
def refusing(podctl: Podctl) -> Iterator[Podctl]:
    """The shared slice, for a refusal: each is said before anything changes."""
    before = boot.run_states(podctl)
    yield podctl
    assert boot.run_states(podctl) == before  # not one of them started a run


@pytest.fixture
def own16(tmp_path: Path) -> Iterator[Podctl]:
    """A daemon and v5p-16 "cli16" of the case's own, for a case that changes the slice or
    the fake for good (each says why where it asks for this)."""
    with slice_on_daemon(Podctl(tmp_path), "v5p-16", "cli16") as cli:
        yield cli


def _live_runs(cli: Podctl) -> list[str]:
    return [run for run, state in boot.run_states(cli).items() if state in LIVE_RUN_STATES]


def _host_log(cli: Podctl, run_id: str, host: int) -> str:
    """HOST's log chunks of RUN_ID so far, from GCS as `podctl logs --host HOST` reads them,
    in this process: a poll of them costs an HTTP call per look, not a `podctl` process."""
    async def read() -> str:
        bucket = boot.store(cli)
        found = await bucket.list(run_layout.log_prefix(run_id, host))
        return "".join([(await bucket.download_bytes(o.name)).decode(errors="replace") for o in found])
    return asyncio.run(read())


def test_run_streams_host_lines_and_exits_with_the_jobs_code(podctl):
    # podctl's options come before the script; what follows it is the script's
    proc = podctl("run", "cli16", "--env", "FAIL_HOST=1", "--env", "FAIL_CODE=3", "--hosts", "all",
                  str(SCRIPTS / "exit_on_host.py"), check=False)
    assert proc.returncode == 3, proc.stderr
    assert "[host 0000] host 0 started" in proc.stdout
    assert "[host 0001] host 1 failing" in proc.stdout
    assert "host 0001 exited 3" in proc.stderr
    runs = json.loads(podctl("runs", "--json").stdout)
    assert runs[0]["state"] == "failed" and runs[0]["exit_code"] == 3


def test_secrets_never_reach_podctls_output(podctl):
    proc = podctl("run", "cli16", "--env", "API_TOKEN=hunter2-very-secret",
                  str(SCRIPTS / "show_env.py"), "PODCTL_RUN_ID")
    assert proc.returncode == 0
    assert "hunter2-very-secret" not in proc.stdout + proc.stderr
    listing = podctl("runs", "--json").stdout
    assert "hunter2-very-secret" not in listing and "API_TOKEN" in listing


def test_a_secret_comes_from_podctls_environment_or_an_env_file_so_argv_never_holds_it(podctl):
    (podctl.tmp / "secrets.env").write_text("# for the run\nFROM_FILE=file-secret\n\nOVERRIDDEN=old\n")
    proc = podctl("run", "cli16", "--env", "API_TOKEN", "--env-file", "secrets.env",
                  "--env", "OVERRIDDEN=new", str(SCRIPTS / "show_env.py"), "API_TOKEN", "FROM_FILE",
                  "OVERRIDDEN", env={"API_TOKEN": "hunter2-from-env"})
    assert "[host 0000] ENV " + json.dumps({"API_TOKEN": "hunter2-from-env", "FROM_FILE": "file-secret",
                                            "OVERRIDDEN": "new"}, sort_keys=True) in proc.stdout
    assert "hunter2" not in proc.stderr and "file-secret" not in proc.stderr
    listing = podctl("runs", "--json").stdout
    assert "hunter2" not in listing and "file-secret" not in listing and "FROM_FILE" in listing


def test_logs_after_the_client_was_killed_show_every_line(own16):
    # its own slice: the SIGKILLed client's leftovers (its state, its hosts' agents) are not
    # the next case's to find
    podctl = own16
    cmd = [sys.executable, "-m", "podctl", "run", "cli16", "--hosts", "all",
           str(SCRIPTS / "many_lines.py"), "3000"]
    client = subprocess.Popen(cmd, env=podctl.env, cwd=podctl.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    run_id = None
    deadline = time.time() + 60
    started = False
    while not started and time.time() < deadline:
        line = client.stderr.readline()
        if line.startswith("podctl: run "):
            run_id = line.split()[2]
        started = line.startswith("podctl: started on all")
    client.send_signal(signal.SIGKILL)
    client.wait()
    assert run_id
    proc = podctl("logs", run_id, "--follow", "--host", "all")
    for host in (0, 1):
        lines = [line.split("] ", 1)[1] for line in proc.stdout.splitlines() if line.startswith(f"[host {host:04d}]")]
        assert lines == [f"{host} {i}" for i in range(3000)]


def test_exec_runs_a_plain_command_everywhere(podctl):
    # a bare host: the image's python3 (fake/vm/image_python.py), no jax until a run's requirements ask
    proc = podctl("exec", "cli16", "--", "python3", "-c", "import sys; print(sys.executable)")
    lines = sorted(proc.stdout.splitlines())
    assert [line.split("] ")[0] for line in lines] == ["[host 0000", "[host 0001"]
    assert all(line.endswith("/.image/bin/python3") for line in lines), lines
    proc = podctl("exec", "cli16", "--hosts", "1", "--", "bash", "-c", "exit 5", check=False)
    assert proc.returncode == 5 and "host 0001 exited 5" in proc.stderr


@pytest.mark.parametrize("args, code, words", [
    (["run", "cli16", "nope.py"], 2, ["no script"]),
    (["run", "nosuch", "nope.py"], 2, ["no script"]),  # checked before anything is asked
    (["run", "cli16", "--bogus", str(SCRIPTS / "show_env.py")], 2, ["No such option '--bogus'"]),
    (["run", "cli16"], 2, ["Missing argument 'SCRIPT'", "podctl run --help"]),
    (["stop", "not-a-run"], 2, ["not a run id"]),
    (["run", "nosuch", str(SCRIPTS / "show_env.py")], 1, ["no slice named 'nosuch'"]),
    (["run", "cli16", "--env", "1BAD=x", str(SCRIPTS / "show_env.py")], 2, ["KEY=VALUE"]),
    (["run", "cli16", "--env", "UNSET_HERE", str(SCRIPTS / "show_env.py")], 2,
     ["UNSET_HERE is not set in podctl's environment"]),
    (["run", "cli16", "--env-file", "missing.env", str(SCRIPTS / "show_env.py")], 2,
     ["--env-file 'missing.env': cannot read it"]),
    (["run", "cli16", "--hosts", "7", str(SCRIPTS / "show_env.py")], 2, ["hosts 0-1"]),
    (["logs", "not-a-run"], 2, ["not a run id"]),
    (["logs", "cli16-20260101-000000-abcd"], 1, ["no run"]),
])
def test_bad_job_input(refusing, args, code, words):
    assert_one_line_error(refusing(*args, check=False), code, *words)


def test_a_slice_that_is_not_ready_is_refused(own16):
    # its own fake: the capacity it takes away stays taken
    podctl = own16
    from podctl.fake.admin.admin_client import FakeAdmin

    FakeAdmin(json.loads(podctl("fake", "status", "--json").stdout)["admin"]).capacity(0)
    podctl("up", "--slice", "v5p-8", "--name", "notyet", "--queued", "--no-wait")
    proc = podctl("run", "notyet", str(SCRIPTS / "show_env.py"), check=False)
    assert_one_line_error(proc, 1, "not ready")
    podctl("down", "notyet", "--yes")


def test_ctrl_c_stops_the_job_on_every_host(podctl):
    cmd = [sys.executable, "-m", "podctl", "run", "cli16", "--env", "FAIL_HOST=99",
           str(SCRIPTS / "exit_on_host.py")]
    client = subprocess.Popen(cmd, env=podctl.env, cwd=podctl.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    run_id, deadline = None, time.time() + 60
    while time.time() < deadline:
        line = client.stderr.readline()
        if line.startswith("podctl: run "):
            run_id = line.split()[2]
        if line.startswith("podctl: started on all"):
            break
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=60)
    assert client.returncode == 130 and "stopped on every host" in err
    # both agents were told to stop: their statuses say so, and the replay ends
    proc = podctl("logs", run_id, "--follow", check=False)
    assert proc.returncode != 0 and "should have been stopped" not in proc.stdout
    runs = {r["run_id"]: r for r in json.loads(podctl("runs", "--json").stdout)}
    assert runs[run_id]["state"] == "stopped"


def test_detach_returns_the_run_id_and_logs_follow_it(podctl):
    proc = podctl("run", "cli16", "--detach", str(SCRIPTS / "many_lines.py"), "50")
    run_id = proc.stdout.strip()
    assert run_id.startswith("cli16-")
    follow = podctl("logs", run_id, "--follow", "--host", "1")
    assert [line for line in follow.stdout.splitlines()] == [f"[host 0001] 1 {i}" for i in range(50)]


def test_options_after_the_script_are_the_scripts_own(podctl):
    proc = podctl("run", "cli16", "--hosts", "0", str(SCRIPTS / "show_args.py"),
                  "--lr", "3", "--json", "--env", "MYVAR=1", "--detach", "--", "x")
    assert "[host 0000] ARGS " + json.dumps(["--lr", "3", "--json", "--env", "MYVAR=1", "--detach",
                                             "--", "x"]) in proc.stdout.splitlines()
    # `SCRIPT -- ARGS` still hands ARGS over as they are
    proc = podctl("run", "cli16", str(SCRIPTS / "show_args.py"), "--", "--json")
    assert "[host 0000] ARGS " + json.dumps(["--json"]) in proc.stdout.splitlines()


def test_exec_runs_one_argument_as_a_shell_command_line_and_quotes_several(podctl):
    proc = podctl("exec", "cli16", "--", "echo ${HOSTNAME##*-w-}")  # t1v-n-...-w-N: the worker
    assert sorted(proc.stdout.splitlines()) == ["[host 0000] 0", "[host 0001] 1"]
    proc = podctl("exec", "cli16", "--hosts", "0", "--", "echo", "$HOSTNAME", "a b")
    assert proc.stdout.splitlines() == ["[host 0000] $HOSTNAME a b"]


@pytest.mark.host_env
def test_jax_distributed_initialize_with_no_arguments_finds_the_slice_as_on_a_tpu_vm(own16):
    # its own slice: its hosts get a jax environment (the shared slice's cases expect bare
    # hosts), and this minutes-long case is scheduled first, apart from the others
    podctl = own16
    # the hosts are bare: jax comes from the requirements, built once and shipped (under
    # pytest-xdist this run may be the session's first, which builds it: minutes)
    # A v5p-16 with external IPs (podctl's default): each host's two addresses differ
    hosts = podctl.json("status", "cli16")["nodes"][0]["hosts"]
    assert all(h["external_ip"] and h["external_ip"] != h["ip"] for h in hosts), hosts
    jax_reqs = SCRIPTS.parents[1] / "examples" / "jax_hello" / "requirements.txt"
    proc = podctl("run", "cli16", "--hosts", "all", "--requirements", str(jax_reqs),
                  str(SCRIPTS / "jax_auto_init.py"), hosts[0]["external_ip"], timeout=900)
    lines = proc.stdout.splitlines()
    assert "[host 0000] process 0 of 2, 8 devices" in lines
    assert "[host 0001] process 1 of 2, 8 devices" in lines
    # ... its coordinator listens on worker 0's internal address only, and a peer reaches
    # it there, not at the external address (the VPC's firewall admits only SSH there)
    listen = json.loads(next(line for line in lines if line.startswith("[host 0000] LISTEN ")).split(" ", 3)[3])
    found = {a.removeprefix("::ffff:") for a in listen}  # the machine's: other fake slices' too
    assert hosts[0]["ip"] in found and hosts[0]["external_ip"] not in found, listen
    dial = json.loads(next(line for line in lines if line.startswith("[host 0001] DIAL ")).split(" ", 3)[3])
    assert dial == {"internal": "connected", "external": "timed out"}  # a dropped SYN: its timeout
    # ... and a second JAX process on a host whose chips are held fails as libtpu makes it
    second = json.loads(next(line for line in lines if line.startswith("[host 0001] SECOND ")).split(" ", 3)[3])
    assert second == {"exit": 1, "in use": True}


def test_lines_are_split_only_at_newlines_and_kept_as_the_script_printed_them(podctl):
    def stdout_of(*args: str) -> tuple[list[str], str]:  # bytes: text mode would turn \r into \n
        proc = subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True,
                              env=podctl.env, cwd=podctl.tmp, timeout=120, check=True)
        return proc.stdout.decode().split("\n")[:-1], proc.stderr.decode()

    lines, err = stdout_of("run", "cli16", str(SCRIPTS / "odd_lines.py"))
    expected = ["[host 0000] a\x0bb\x0cc\x1cd\x1de\x1ef\x85g\u2028h", "[host 0000] progress 1\rprogress 2",
                "[host 0000] \x1b[2J\x1b]0;owned\x07cleared?"]
    assert lines == expected  # off a terminal: as the host printed them
    run_id = next(line.split()[2] for line in err.splitlines() if line.startswith("podctl: run "))
    assert stdout_of("logs", run_id, "--host", "0")[0] == expected


def test_on_a_terminal_a_scripts_escape_sequences_are_shown_not_obeyed():
    import io

    from podctl.cli.job_cmds import _line_printer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    sink = _line_printer(screen)
    sink(0, "\x1b[2J\x1b]0;owned\x07cleared?\tok")
    sink(1, "fake\r[host 0000] forged\x85\u2028")
    assert screen.getvalue().splitlines() == [
        "[host 0000] \\x1b[2J\\x1b]0;owned\\x07cleared?\tok",
        "[host 0001] fake\\x0d[host 0000] forged\\x85\\u2028"]


def test_text_podctl_shows_cannot_reorder_or_break_a_line():
    from podctl.cli.text import shown

    assert shown("a\u202eb\u2066c\u200fd\ufeffe\u2028f\x85g\nh\ti") == \
        "a\\u202eb\\u2066c\\u200fd\\ufeffe\\u2028f\\x85g\\x0ah\\x09i"
    assert shown("tab\tkept", tabs=True) == "tab\tkept"
    assert shown("emoji \U0001f468\u200d\U0001f469 and ünï") == "emoji \U0001f468\u200d\U0001f469 and ünï"


def test_on_a_terminal_an_environment_install_shows_one_progress_line_and_a_file_gets_every_line():
    import io

    from podctl.cli.job_cmds import _line_printer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    lines = ["[podctl] env abc: building on host-0000 with uv",
             "[podctl] env abc: uv pip sync: 20 s, 80 MB so far",
             "[podctl] env abc: uv pip sync: 40 s, 190 MB so far",
             "[podctl] env abc: built on host-0000 with uv"]
    screen, file = Terminal(), io.StringIO()
    for sink in (_line_printer(screen), _line_printer(file)):
        for line in lines:
            sink(0, line)
    shown = screen.getvalue().split("\n")  # what stays on screen: each \r\x1b[K rewrites a line
    assert [part.rsplit("\r\x1b[K", 1)[-1] for part in shown if part] == [
        f"[host 0000] {lines[0]}", f"[host 0000] {lines[3]}"]
    assert file.getvalue().splitlines() == [f"[host 0000] {line}" for line in lines]


def test_logs_follow_says_why_a_run_ended_badly_not_only_its_exit_code(podctl):
    run_id = podctl("run", "cli16", "--detach", "--env", "FAIL_HOST=0", "--env", "FAIL_CODE=255",
                    "--keep-going", str(SCRIPTS / "exit_on_host.py")).stdout.strip()
    assert boot.eventually(lambda: "host 0 failing" in _host_log(podctl, run_id, 0), 60, every=0.5), \
        "host 0 never failed"
    podctl("stop", run_id, "--no-wait")  # host 1 waits to be stopped
    proc = podctl("logs", run_id, "--follow", check=False)
    assert proc.returncode == 255
    assert f"run {run_id} ended: host 0000 failed (exit code 255); is slice cli16 still there?" in proc.stderr


def test_logs_shows_host_0_by_default_as_run_does_and_runs_has_a_header(podctl):
    run_id = podctl("run", "cli16", "--detach", str(SCRIPTS / "many_lines.py"), "5").stdout.strip()
    # until it ends: its record, in this process (the words checked are `logs`' and `runs`')
    assert boot.eventually(lambda: boot.run_states(podctl).get(run_id, "starting") not in LIVE_RUN_STATES,
                           60, every=0.5)
    shown = podctl("logs", run_id).stdout.splitlines()
    assert shown == [f"[host 0000] 0 {i}" for i in range(5)]
    listed = podctl("runs").stdout.splitlines()
    assert listed[0].split()[:3] == ["RUN", "STATE", "EXIT"] and run_id in listed[1]


def test_lines_are_labelled_by_jax_process_index_once_the_script_names_it(podctl):
    # the script says it is JAX process 1 - worker: labels follow what it says, not the worker
    # (with --json the followed lines go to stderr, the result to stdout)
    proc = podctl("run", "cli16", "--hosts", "all", "--json", str(SCRIPTS / "process_index.py"))
    expected = {0: ["[host 0000] worker 0 before", "[host 0000 p1] [podctl] host-0000 is JAX process 1",
                    "[host 0000 p1] worker 0 after"],
                1: ["[host 0001] worker 1 before", "[host 0001 p0] [podctl] host-0001 is JAX process 0",
                    "[host 0001 p0] worker 1 after"]}
    for host, lines in expected.items():
        assert [line for line in proc.stderr.splitlines() if line.startswith(f"[host {host:04d}")] == lines
    result = json.loads(proc.stdout)
    assert result["hosts"] == {"0": 0, "1": 0} and result["processes"] == {"0": 1, "1": 0}
    # the replay after the run labels them the same
    assert podctl("logs", result["run_id"], "--host", "all").stdout.splitlines() == expected[0] + expected[1]
    assert podctl("logs", result["run_id"]).stdout.splitlines() == expected[0]


def test_a_5000_deep_json_line_is_shown_as_text_and_the_run_and_its_reports_succeed(podctl):
    proc = podctl("run", "cli16", str(SCRIPTS / "hostile_lines.py"), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stdout + proc.stderr
    deep = next(line for line in proc.stdout.splitlines() if '"x": [[[' in line)
    assert deep.startswith("[host 0000] ") and deep.count("[") == 5001  # the line, whole, as text
    assert '[host 0000] {"kind": "config", "start_step": Infinity, "batch": 1e999}' in proc.stdout
    run_id = next(line.split()[2] for line in proc.stderr.splitlines() if line.startswith("podctl: run "))
    cost = podctl.json("cost", run_id)
    assert cost["steps"] == 2 and cost["final_step"] == 2
    assert podctl.json("goodput", run_id)["attempts"] == 1
    done = podctl("plot", run_id, "-o", "hostile.png")
    assert done.stdout.startswith("wrote hostile.png") and (podctl.tmp / "hostile.png").stat().st_size


def test_a_gcs_outage_as_the_run_ends_loses_no_line(podctl):
    # the shared slice: the client catches up only once GCS answers again, so the outage is
    # over when the case is (a failed case ends it below, for the next case's sake)
    # 90 s: longer than the agent's former last flush (12 tries, about 63 s) and status upload
    go = podctl.tmp / "go"
    client = subprocess.Popen(
        [sys.executable, "-m", "podctl", "run", "cli16", "--env", f"GO_FILE={go}",
         str(SCRIPTS / "lines_at_the_end.py"), "9"],
        env=podctl.env, cwd=podctl.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline() == "[host 0000] waiting\n"
        podctl("fake", "inject", "gcs-outage", "90")
        go.touch()  # the script prints its 9 lines and exits while GCS answers 503
        out, err = client.communicate(timeout=400)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
            boot.admin(podctl).inject("gcs-outage", "0")
    assert client.returncode == 0, err
    assert out.splitlines() == [f"[host 0000] line {i}" for i in range(9)]
    assert "GCS cannot be reached" in err and "caught up" in err


def test_a_10_mb_line_comes_back_as_one_line(podctl):
    size = 10 * 1000 * 1000
    proc = podctl("run", "cli16", str(SCRIPTS / "long_line.py"), str(size))
    lines = proc.stdout.split("\n")
    assert len(lines) == 3 and lines[1:] == ["[host 0000] after", ""]
    expected = "".join("0123456789"[i % 10] * 1000 for i in range(size // 1000))
    assert lines[0] == "[host 0000] " + expected


def test_logs_follow_after_down_ends_at_once_saying_the_slice_was_deleted(own16):
    # its own slice: it deletes it
    podctl = own16
    run_id = podctl("run", "cli16", "--detach", str(SCRIPTS / "ticker.py"), "100000", "0.5").stdout.strip()
    assert boot.eventually(lambda: "tick 2 of" in _host_log(podctl, run_id, 0), 60, every=0.5), \
        "the run never ticked"
    podctl("down", "cli16", "--yes")
    proc = podctl("logs", run_id, "--follow", check=False)
    assert proc.returncode == 255 and "[host 0000] tick 1 of 100000" in proc.stdout
    # the record's word ends it, not 90 s of silence from the hosts
    assert "failed (slice deleted)" in proc.stderr and "stopped sending heartbeats" not in proc.stderr


def test_a_second_run_on_a_busy_slice_is_refused_and_the_first_finishes_untouched(podctl):
    first = podctl("run", "cli16", "--detach", str(SCRIPTS / "ticker.py"), "150", "0.2").stdout.strip()
    # its agent holds the hosts once it ticks
    assert boot.eventually(lambda: "tick 1 of 150" in _host_log(podctl, first, 0), 60, every=0.5), \
        "the first run never started"
    second = podctl("run", "cli16", str(SCRIPTS / "show_args.py"), check=False)
    assert_one_line_error(second, 1, f"busy with run {first}", f"podctl stop {first}")
    follow = podctl("logs", first, "--follow", "--host", "all")
    assert follow.returncode == 0
    for host in (0, 1):
        assert [line for line in follow.stdout.splitlines() if line.startswith(f"[host {host:04d}]")] == [
            f"[host {host:04d}] tick {i} of 150" for i in range(1, 151)]


def test_a_run_started_while_the_last_one_stops_waits_for_it_to_let_go(podctl):
    first = podctl("run", "cli16", "--detach", str(SCRIPTS / "linger_on_stop.py"), "3").stdout.strip()
    assert boot.eventually(lambda: "tick 1" in _host_log(podctl, first, 0), 60, every=0.5), \
        "the first run never started"
    podctl("stop", first, "--no-wait")  # the script lingers 3 s, as one saving a checkpoint
    proc = podctl("run", "cli16", "--hosts", "all", str(SCRIPTS / "others_on_host.py"), "linger_on_stop.py")
    assert sorted(proc.stdout.splitlines()) == ["[host 0000] OTHERS 0", "[host 0001] OTHERS 0"]
