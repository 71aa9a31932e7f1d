"""A new channel is one module and one registry line (jobs/channels/__init__.py): a
stand-in (tests/relay_channel.py) registered by name takes a real run on the fake's
hosts, the run's record names it, and `stop` reaches the run through it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from podctl.base import settings as podctl_settings
from podctl import steps
from podctl.base.errors import InvalidValueError
from podctl.jobs import channels
from tests import relay_channel
from tests.conftest import Podctl, slice_on_daemon

SCRIPTS = Path(__file__).parents[1] / "scripts"
NAME = "relay8"


def test_a_channel_registered_by_name_runs_and_stops_a_run_through_it(tmp_path, monkeypatch):
    with pytest.raises(InvalidValueError, match="'relay' is no way to reach the hosts"):
        steps.RunOptions(steps.RunSpec(SCRIPTS / "show_env.py"), via="relay")
    monkeypatch.setitem(channels.REGISTRY, "relay", relay_channel.KIND)  # the one registry line
    relay_channel.ASKED.clear()
    assert "relay" in channels.choices()
    with slice_on_daemon(Podctl(tmp_path), "v5p-8", NAME) as cli:
        for key, value in cli.env.items():
            monkeypatch.setenv(key, value)
        session = steps.Session.open(podctl_settings.resolve())
        lines: list[str] = []
        try:
            info = asyncio.run(steps.ready_slice(session, NAME))

            async def run_once() -> steps.RunResult:
                job = await steps.start_run(
                    session, info, steps.RunOptions(steps.RunSpec(SCRIPTS / "show_env.py", ("TPU_WORKER_ID",)),
                                                    via="relay"),
                    sink=lambda host, line: lines.append(line), notice=lambda text: None)
                return await steps.follow_run(job)

            result = asyncio.run(run_once())
            assert result.exit_code == 0, lines
            assert 'ENV {"TPU_WORKER_ID": "0"}' in lines
            assert relay_channel.ASKED == ["open", "claim", "check_access", "start", "close"]
            record = asyncio.run(steps.load_run(session, result.run_id))
            assert record.extra["via"] == "relay"

            # a detached run, stopped later by its id: the stop goes through the recorded channel
            relay_channel.ASKED.clear()

            async def detached() -> str:
                job = await steps.start_run(
                    session, info, steps.RunOptions(steps.RunSpec(SCRIPTS / "ticker.py", ("600", "0.5")),
                                                    via="relay", detach=True),
                    sink=lambda host, line: None, notice=lambda text: None)
                return job.run_id

            run_id = asyncio.run(detached())
            stopped = asyncio.run(steps.stop_run(session, run_id, by="test"))
            assert stopped.stopped and stopped.state == "stopped"
            assert relay_channel.ASKED[-1] == "signal", relay_channel.ASKED
            assert asyncio.run(steps.load_run(session, run_id)).state == "stopped"
        finally:
            session.close()
