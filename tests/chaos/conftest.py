"""The chaos suite's kit: podctl's lifecycle on the in-process fake cloud, the fault
switches of its admin API, and a table of fault x phase x outcome printed at the end.

CI runs the cases not marked `slow` (a representative subset: every phase, every kind
of fault); `PODCTL_CHAOS_ALL=1 python -m pytest tests/chaos` runs them all.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from podctl import steps
from podctl.cloud.connect import api_for_endpoint
from podctl.base.settings import FAKE_BUCKET, Settings
from podctl.cloud.storage import Storage
from tests.conftest import FAST_RETRY, PROJECT, ZONE

OUTCOMES: list[tuple[str, str, str, str]] = []  # (phase, fault, expected, outcome)
_RUN = re.compile(r"^run (\S+) on ")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PODCTL_CHAOS_ALL"):
        return
    skip = pytest.mark.skip(reason="a long chaos case: PODCTL_CHAOS_ALL=1 runs it")
    for item in items:
        if "slow" in item.keywords and "/chaos/" in str(item.fspath):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not OUTCOMES:
        return
    tr = terminalreporter
    tr.section("chaos: fault x phase x outcome")
    width = max(len(f) for _, f, _, _ in OUTCOMES)
    tr.write_line(f"{'PHASE':12} {'FAULT':{width}}  {'EXPECTED':9}  OUTCOME")
    for phase, fault, expected, outcome in OUTCOMES:
        tr.write_line(f"{phase:12} {fault:{width}}  {expected:9}  {outcome}")


@dataclass
class Record:
    """What one scenario saw: every line by run id, podctl's notices."""

    notices: list[str] = field(default_factory=list)
    lines: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    current: str | None = None
    hooks: list[Callable[[int, str], None]] = field(default_factory=list)

    def notice(self, text: str) -> None:
        self.notices.append(text)
        match = _RUN.match(text)
        if match:
            self.current = match.group(1)

    def sink(self, host: int, line: str) -> None:
        self.lines.setdefault(self.current or "?", []).append((host, line))
        for hook in list(self.hooks):
            hook(host, line)


@pytest.fixture
def kit(fake, isolated: Path):
    settings = Settings(backend="fake", project=PROJECT, zone=ZONE, config_dir=isolated / "config",
                        state_dir=isolated / "state", bucket=FAKE_BUCKET)
    # ports: this in-process fake's, so that no fake daemon is started for the session
    session = steps.Session(settings=settings, api=api_for_endpoint(fake.tpu_api_url, retry=FAST_RETRY),
                            ports=(fake.hosts.ssh_port, 8476),
                            storages={FAKE_BUCKET: Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)})
    yield Kit(fake=fake, admin=fake.admin, session=session)
    session.close()
    from podctl.fake.admin import daemon

    if daemon.status(settings.fake_dir).get("running"):  # a stray daemon is a leaked process
        daemon.stop(settings.fake_dir)
        pytest.fail("the case started a fake daemon beside its in-process fake cloud")


@dataclass
class Kit:
    fake: Any
    admin: Any
    session: steps.Session

    def record(self, phase: str, fault: str, expected: str, outcome: str) -> None:
        OUTCOMES.append((phase, fault, expected, outcome))

    async def stored_lines(self, run_id: str, num_hosts: int) -> list[tuple[int, str]]:
        """Every line of RUN_ID that reached GCS, read back in order."""
        from podctl.jobs.logs import LogReader

        got: list[tuple[int, str]] = []
        await LogReader(self.session.storage, run_id, num_hosts, lambda h, line: got.append((h, line)),
                        None).follow(follow=False)
        return got


def run(coro: Any) -> Any:
    return asyncio.run(coro)
