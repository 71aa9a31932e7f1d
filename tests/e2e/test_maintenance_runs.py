"""A run and host maintenance, through the CLI and the fake cloud's daemon: the
template checkpoints and stops on every host before the window (the agent reads the
metadata server); `--recover` waits the window out and resumes from that checkpoint
with no steps lost; a plain run stops cleanly and says how to resume."""

from __future__ import annotations

import json

import pytest

from podctl.fake.admin.admin_client import FakeAdmin
from tests.conftest import Podctl
from tests.e2e.test_recovery import TEMPLATE, TINY, run_with_fault

# The first template run of a session builds the hosts' Python environment (minutes).
pytestmark = pytest.mark.timeout(1200)

WINDOW_IN = 25.0  # wall-clock seconds from the announcement to the window
WINDOW_FOR = 4.0  # wall-clock seconds the hosts are down


def _announce(admin: FakeAdmin, name: str) -> None:
    scale = admin.set_timings()["time_scale"]  # the fault takes simulated seconds
    admin.maintenance(name, after=WINDOW_IN * scale, workers=[1], window=WINDOW_FOR * scale)


def _run(podctl: Podctl, name: str, *extra: str) -> tuple[int, str, str]:
    """Run the template on NAME; announce maintenance of worker 1 once step 4 is saved."""
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    code, err, out = run_with_fault(
        podctl, ["run", name, *extra, "--json", str(TEMPLATE), *TINY, "--steps", "24",
                 "--checkpoint-every", "4"], '"kind": "checkpoint", "step": 4',
        lambda err: _announce(admin, name))
    return code, out, err


def test_recover_waits_out_maintenance_and_loses_no_step_through_the_watchers_with_ssh_closed(podctl):
    """Two runs on one fake v5p-16 (one daemon, one slice, one environment fetched by its
    hosts): first a plain run over SSH stops cleanly before the window and says how to
    resume; once the hosts are back from that window, SSH is closed and a `--recover` run
    through the watchers waits out a second window: the hosts come back by themselves,
    their startup-script starts the watcher again, and the next attempt starts through it
    (one nodes.patch), no SSH."""
    podctl.env["PODCTL_BACKEND"] = "fake"
    podctl("fake", "start")
    podctl("up", "--slice", "v5p-16", "--name", "mnt")
    admin = FakeAdmin(podctl.json("fake", "status")["admin"])
    booted = [h["boots"] for h in admin.host_stats("mnt")]
    _without_recover_a_run_stops_cleanly_and_says_how_to_resume(podctl)
    _back_from_the_window(admin, "mnt", booted)
    podctl("fake", "inject", "no-ssh", "mnt")
    booted = [h["boots"] for h in admin.host_stats("mnt")]
    ssh_before = sum(h["ssh_total"] for h in admin.host_stats("mnt"))
    admin.reset_stats()
    code, out, log = _run(podctl, "mnt", "--via", "boot", "--recover", "1")
    assert code == 0, log[-4000:]
    result = json.loads(out)
    first, second = result["attempts"]
    assert first["reason"].startswith("stopped for maintenance"), first
    # the agent of the worker the window names said so in its host's log
    assert "maintenance on host-0001" in podctl("logs", first["run_id"], "--host", "1").stdout
    assert "waiting out maintenance" in log and "creating mnt again" not in log
    # Both hosts stopped at the step they agreed on, saved it, and the next attempt
    # started from exactly there.
    assert second["start_step"] == first["last_step"] >= 4
    assert second["last_step"] == 24 and result["steps_lost"] == 0
    # both hosts booted again after the window, and no one reached them over SSH
    assert [h["boots"] for h in admin.host_stats("mnt")] == [b + 1 for b in booted]
    assert sum(h["ssh_total"] for h in admin.host_stats("mnt")) == ssh_before
    assert admin.stats()["by_call"].get("nodes.patch", 0) == 2  # one pointer an attempt
    podctl("down", "mnt", "--yes")


def _back_from_the_window(admin: FakeAdmin, name: str, booted: list[int]) -> None:
    """Wait until the window announced by the last run is over: every host of NAME booted
    again and alive (the fake's clock runs the window; nothing here shortens it)."""
    import time

    deadline = time.monotonic() + 300
    while True:
        hosts = admin.host_stats(name)
        if len(hosts) == len(booted) and all(h["alive"] for h in hosts) and \
                sum(h["boots"] for h in hosts) > sum(booted):
            return
        assert time.monotonic() < deadline, f"{name}'s hosts not back from maintenance: {hosts}"
        time.sleep(1)


def _without_recover_a_run_stops_cleanly_and_says_how_to_resume(podctl: Podctl) -> None:
    code, out, log = _run(podctl, "mnt", "--via", "ssh")  # the SSH path's agent reads the notice too
    assert code == 143, log[-4000:]
    result = json.loads(out)
    assert set(result["hosts"].values()) == {143}  # every host saved and stopped
    said = [line for line in log.splitlines() if "stopped for maintenance" in line]
    assert len(said) == 1 and f"--resume {result['run_id']}" in said[0], log[-3000:]
    assert '"kind": "preempted"' in log  # the template's own word: it saved and stopped


def test_wait_out_waits_for_the_window_and_the_health_and_skips_long_windows():
    """podctl.policy.maintenance.wait_out with its clock and sleep as seams (no wire between)."""
    import asyncio
    from types import SimpleNamespace

    from podctl.policy import maintenance

    clock = [1000.0]
    said: list[str] = []
    seen = iter([("READY", "HEALTHY"), ("READY", "UNHEALTHY_MAINTENANCE"),
                 ("READY", "UNHEALTHY_MAINTENANCE"), ("READY", "HEALTHY")])

    async def describe():
        state, health = next(seen)
        return SimpleNamespace(state=state, health=health)

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    plan = {"window_start": 1010.0, "window_end": 1020.0}
    waited = asyncio.run(maintenance.wait_out(describe, plan, said.append, poll=5,
                                              now=lambda: clock[0], sleep=sleep))
    assert waited and clock[0] == 1015.0 and "waiting out maintenance" in said[0]
    long = {"window_start": 1010.0, "window_end": 1010.0 + 2 * 3600}
    assert not asyncio.run(maintenance.wait_out(describe, long, said.append, now=lambda: 1000.0))
    assert "making the slice again is faster" in said[-1]


def test_wait_out_gives_up_once_maintenance_overruns_its_window_by_the_margin():
    """A slice still UNHEALTHY_MAINTENANCE past its window's end plus the margin is not
    waited for any more: wait_out says why in one line and hands over to a re-create."""
    import asyncio
    from types import SimpleNamespace

    from podctl.policy import maintenance

    clock = [1000.0]
    said: list[str] = []
    calls = [0]

    async def describe():
        calls[0] += 1
        return SimpleNamespace(state="READY", health="UNHEALTHY_MAINTENANCE")

    async def sleep(seconds: float) -> None:
        clock[0] += seconds

    plan = {"window_start": 1010.0, "window_end": 1020.0}
    waited = asyncio.run(maintenance.wait_out(describe, plan, said.append, poll=5,
                                              now=lambda: clock[0], sleep=sleep))
    assert waited is False
    assert 1020.0 + maintenance.OVERRUN_SECONDS < clock[0] <= 1020.0 + maintenance.OVERRUN_SECONDS + 5
    assert calls[0] < 100  # polled, not hammered
    assert len(said) == 2 and "is not over 5m" in said[-1] and "making the slice again" in said[-1]


def test_maintenance_that_never_clears_on_the_fake_ends_the_wait_within_its_bound(fake, api):
    """On the fake cloud (compressed time): a maintenance window passes, the node stays
    UNHEALTHY_MAINTENANCE after it, and wait_out stops waiting after the margin."""
    import asyncio
    import time

    from podctl.policy import maintenance
    from podctl.cloud import describe
    from podctl.host.agent_maintenance import parse_time
    from tests.conftest import PARENT, TIME_SCALE
    from tests.e2e.test_fake_hosts import delete, make_node

    make_node(api.client, "stuck", "v5p-8")
    try:
        planned = fake.admin.maintenance("stuck", after=1.0 * TIME_SCALE, window=1.0 * TIME_SCALE)
        plan = {"window_start": parse_time(planned["maintenance"]["windowStartTime"]),
                "window_end": parse_time(planned["maintenance"]["windowEndTime"])}

        async def health() -> str:
            return (await describe.describe(api, PARENT, "stuck")).health

        while asyncio.run(health()) != "UNHEALTHY_MAINTENANCE":  # the window began
            time.sleep(0.1)
        while asyncio.run(health()) == "UNHEALTHY_MAINTENANCE":  # and ended, on time
            time.sleep(0.1)
        # ...but the node goes back into maintenance and stays there.
        fake.admin.unhealthy("stuck", health="UNHEALTHY_MAINTENANCE")
        said: list[str] = []
        waited = asyncio.run(maintenance.wait_out(
            lambda: describe.describe(api, PARENT, "stuck"), plan, said.append, poll=0.2,
            overrun=1.0))
        assert waited is False, said
        assert "waiting out maintenance" in said[0]
        assert "health UNHEALTHY_MAINTENANCE" in said[-1] and "making the slice again" in said[-1]
    finally:
        delete(api.client, f"{PARENT}/nodes/stuck")
