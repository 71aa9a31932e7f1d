"""The hosts' first minutes through the watchers (`run --via boot`), against the fake daemon:
startup-scripts that run minutes after READY on a big slice (the fake's `boot_late`),
a host whose disk is full (the `disk-full` fault), a watcher killed (`kill-host`).
Each is said by its cause: booting (the late hosts named while podctl waits), the
refusal's words, a dead watcher; never "no watcher"."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podctl.base import vocabulary
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.fake.vm.boot import late_seconds
from tests import boot_support as boot
from tests.conftest import TIME_SCALE, Podctl, _share_env_signing_key, slice_on_daemon, stop_fake_and_check

SCRIPTS = Path(__file__).parents[1] / "scripts"


def _last_line(proc) -> str:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


def test_the_fakes_late_boots_follow_their_documented_distribution():
    """The quantiles of an exponential of mean boot_late x sqrt(hosts), capped at six means,
    one per worker in a shuffle fixed by the node's name (fake/README.md's row)."""
    name = "projects/p/locations/z/nodes/n"
    for hosts, last in ((1, 6.9), (64, 388.2), (256, 960.0)):
        each = sorted(late_seconds(name, w, hosts, 10.0) for w in range(hosts))
        assert round(each[-1], 1) == last
        assert each == sorted(late_seconds(name, w, hosts, 10.0) for w in range(hosts))  # repeatable
    assert late_seconds(name, 3, 64, 0.0) == 0.0  # the knob off: every host at once
    # podctl waits at least as long as the fake's latest host on every size it serves
    for hosts in (1, 2, 8, 64, 256, 512):
        assert max(late_seconds(name, w, hosts, 10.0) for w in range(hosts)) < vocabulary.boot_wait_seconds(hosts)
    # a dead watcher is said within a minute of its death: its last beat at most a period before
    assert vocabulary.WATCH_DEAD_SECONDS + vocabulary.WATCH_BEAT_SECONDS <= 60


def test_run_through_the_watchers_of_a_v5p_512_whose_hosts_boot_late_waits_naming_them(tmp_path):
    cli = Podctl(tmp_path)
    cli.env["PODCTL_BACKEND"] = "fake"
    node = json.loads(cli("fake", "start", "--json").stdout)  # its admin, project and zone
    try:
        # 64 hosts, half of them 4.6 s (wall) after READY, the latest 32 s, four past 19 s: late
        # hosts remain at podctl's first look however slow the machine is to start `run`
        late = 250.0
        FakeAdmin(node["admin"]).set_timings(boot_late=late)
        cli("up", "--slice", "v5p-512", "--name", "late")
        began = time.monotonic()
        proc = cli("run", "late", "--via", "boot", "--hosts", "0", str(SCRIPTS / "show_args.py"), "hi",
                   timeout=240)
        waited = time.monotonic() - began
        assert '[host 0000] ARGS ["hi"]' in proc.stdout, proc.stderr
        waiting = [line for line in proc.stderr.splitlines() if "hosts to boot" in line]
        assert waiting, proc.stderr
        assert "of 64 hosts to boot (host " in waiting[0], waiting
        assert "): their startup-script has not run yet (" in waiting[0] and "of up to 900 s)" in waiting[0], waiting
        assert "no watcher" not in proc.stderr
        assert "started on all 64 hosts" in proc.stderr
        latest = max(late_seconds(f"projects/{node['project']}/locations/{node['zone']}/nodes/late", w, 64, late)
                     for w in range(64)) / TIME_SCALE
        print(f"run --via boot on a v5p-512 whose last host boots {latest:.1f} s after READY: {waited:.1f} s; "
              f"{waiting[0]}")
    finally:
        cli("down", "late", "--yes", check=False)
        stop_fake_and_check(cli)


@pytest.fixture(scope="module")
def _host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podctl]:
    """One daemon and v5p-8 for the cases below (each made, booted and deleted per case
    cost seconds of CPU on 2 cores); each leaves its host as it found it: its disk freed,
    its watcher rebooted ready."""
    tmp = tmp_path_factory.mktemp("host")
    (tmp / "home").mkdir()
    _share_env_signing_key(tmp / "state")
    with slice_on_daemon(Podctl(tmp), "v5p-8", "host") as cli:
        yield cli


@pytest.fixture
def podctl(_host: Podctl) -> Podctl:
    # its watcher ready (read as `podctl status` reads it, in this process: no `podctl` per look)
    assert boot.eventually(lambda: _ready(_host), every=0.3), boot.watchers(_host, "host")
    return _host


def test_a_full_disk_on_a_host_is_said_through_the_watchers_in_one_line_with_its_cause(podctl):
    podctl("fake", "inject", "disk-full", "host", "0")
    began = time.monotonic()
    proc = podctl("run", "host", "--via", "boot", str(SCRIPTS / "show_args.py"), check=False, timeout=120)
    took = time.monotonic() - began
    last = _last_line(proc)
    assert last.startswith("podctl: error: run host-") and "did not start on 1 of 1 hosts" in last, last
    assert "host 0000: refused OSError: [Errno 28] No space left on device" in last, last
    assert "Free some space on that host's disk" in last and "--via ssh" not in last, last
    print(f"full disk said in {took:.1f} s (the whole `podctl run`)")
    # the disk freed, the next run starts
    podctl("fake", "inject", "disk-full", "host", "0", "--off")
    again = podctl("run", "host", "--via", "boot", str(SCRIPTS / "show_args.py"), "ok", timeout=120)
    assert '[host 0000] ARGS ["ok"]' in again.stdout, again.stderr


def test_a_killed_watcher_is_said_dead_by_status_and_by_a_run_through_it(podctl):
    podctl("fake", "inject", "kill-host", "host", "0")  # SIGKILL to every process of the host: the watcher
    killed = time.monotonic()
    # its last beat came at most a beat before the kill: nothing can say it dead before
    # WATCH_DEAD_SECONDS - WATCH_BEAT_SECONDS have passed (each `podctl status` asked
    # before then costs a CLI's start, about a second of CPU, for nothing)
    time.sleep(vocabulary.WATCH_DEAD_SECONDS - vocabulary.WATCH_BEAT_SECONDS - 2)
    # then looked at as `podctl status` looks, from this process, until it says dead; then
    # said by `podctl status` itself (a beat only ages: what was dead stays dead)
    assert boot.eventually(lambda: any(w.startswith("dead") for w in boot.watchers(podctl, "host")), 120,
                           every=0.5), \
        boot.watchers(podctl, "host")
    said = next((line for line in podctl("status", "host").stdout.splitlines() if line.startswith("watchers")), "")
    took = time.monotonic() - killed
    assert said.startswith("watchers  0/1 ready (dead on worker 0: last beat "), said
    print(f"status said the killed watcher dead {took:.1f} s after the kill")
    began = time.monotonic()
    proc = podctl("run", "host", "--via", "boot", str(SCRIPTS / "show_args.py"), check=False, timeout=120)
    took = time.monotonic() - began
    last = _last_line(proc)
    assert "host 0000: its watcher is dead (its last beat" in last and "Try --via ssh." in last, last
    print(f"run --via boot failed on the dead watcher in {took:.1f} s")
    # a reboot runs the startup-script again: a new watcher, ready (it takes the pointer left
    # there, and the run it names, stopped by podctl at its failure, ends before its script)
    podctl("fake", "inject", "reboot", "host")
    assert boot.eventually(lambda: _ready(podctl), every=0.3), boot.watchers(podctl, "host")
    assert "watchers  1/1 ready" in podctl("status", "host").stdout.splitlines()


def _ready(cli: Podctl) -> bool:
    watchers = boot.watchers(cli, "host")
    return len(watchers) == 1 and watchers[0].startswith("ready")
