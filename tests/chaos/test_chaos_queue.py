"""The team queue's chaos case (slow: PODCTL_CHAOS_ALL=1): three `queue tick --loop` on a
real PostgreSQL for a minute, each SIGKILLed at random moments, over 50 entries of two
users with quotas and mixed priorities; then a quiet tick. Every entry ends exactly
once, no slice is doubled or left over, and no quota is ever exceeded.
(tests/test_queue_team.py runs a small version of it in CI.)"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from pathlib import Path

import pytest

from podctl.queue.place import open_store
from tests.conftest import stop_fake_and_check
from tests.e2e.test_queue import SCRIPTS, TERMINAL, QueueCli
from tests.e2e.test_queue_team import ALICE, BOB, TICKER, _add, _ticker
from tests.pg_support import role_url

QUOTAS = {ALICE: 8, BOB: 4}  # chips at once: two v5p-8 for alice, one for bob
ENTRIES = 50


@pytest.mark.slow
def test_three_tickers_killed_at_random_over_fifty_entries_of_two_users(tmp_path: Path, pg_url: str):
    cli = QueueCli(tmp_path)
    cli.env.update(PODCTL_BACKEND="fake", PODCTL_QUEUE_URL=pg_url)
    open_store(tmp_path, pg_url).close()  # the schema and its group roles, then the logins
    cli.role_urls = {ALICE: role_url(pg_url, ALICE, "podctl_user"), BOB: role_url(pg_url, BOB, "podctl_user"),
                     TICKER: role_url(pg_url, TICKER, "podctl_ticker")}
    try:
        _chaos(cli, tmp_path, pg_url)
    finally:
        stop_fake_and_check(cli)


def _chaos(cli: QueueCli, tmp_path: Path, pg_url: str) -> None:
    chance = random.Random(2026)
    for who, chips in QUOTAS.items():
        cli("queue", "quota", "set", who, "--max-chips", str(chips))
    first = _add(cli, ALICE, str(SCRIPTS / "many_lines.py"), "2")
    # the rest as `queue add` makes them, quicker; each owned by the login that adds it
    with open_store(tmp_path, pg_url) as admin:
        model = admin.get(first["id"])
    with open_store(tmp_path, cli.role_urls[ALICE]) as alice, \
            open_store(tmp_path, cli.role_urls[BOB]) as bob:
        for i in range(1, ENTRIES):
            chance.choice([alice, bob]).add(dataclasses.replace(
                model, id=0, created=0.0, name=f"e{i}", priority=chance.choice([-100, 0, 0, 100])))
    logs = [tmp_path / f"ticker{i}.log" for i in range(3)]
    tickers = [_ticker(cli, log) for log in logs]
    chaos_until, deadline, kills = time.monotonic() + 60, time.monotonic() + 900, 0
    try:
        while time.monotonic() < chaos_until:
            time.sleep(chance.uniform(0.3, 4.0))
            victim = chance.randrange(3)
            tickers[victim].kill()
            tickers[victim].wait(timeout=10)
            tickers[victim] = _ticker(cli, logs[victim])
            kills += 1
        while not all(e["state"] in TERMINAL for e in cli.entries()):
            assert time.monotonic() < deadline
            time.sleep(2)
    finally:
        for t in tickers:
            t.terminate()
            t.wait(timeout=60)
    entries = cli.settle()  # the quiet ticks
    assert kills >= 10 and len(entries) == ENTRIES
    assert {e["state"] for e in entries} == {"succeeded"}, [e for e in entries if e["state"] != "succeeded"]
    assert all(e["attempt"] == 1 and len(e["attempts"]) == 1 for e in entries)
    assert cli.admin().stats()["by_call"]["nodes.create"] == ENTRIES  # none doubled
    for e in chance.sample(entries, 10):  # each run started once
        assert len(cli("logs", e["run_id"]).stdout.splitlines()) == 2
    for who, limit in QUOTAS.items():  # never more chips at once than the quota
        spans = [(a["requested"], a["ended"]) for e in entries if e["owner"] == who for a in e["attempts"]]
        for start, _ in spans:
            held = sum(4 for s, end in spans if s <= start < end)
            assert held <= limit, (who, start, held)
    assert cli.admin().is_empty()
    print(json.dumps({"kills": kills, "entries": ENTRIES}))
