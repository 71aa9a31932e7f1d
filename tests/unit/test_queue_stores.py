"""The queue's stores come from one registry by URL scheme (podctl/queue/stores/): a new
store is one module and one registry line, and the CLI's add, list, quotas and migrate
then work on it; an unknown scheme is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podctl.queue import stores
from podctl.queue.add import AddRequest, add
from podctl.queue.store import Store, db_path
from podctl.steps import RunSpec
from tests.unit.test_queue_store import _entry


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from click.testing import CliRunner

    from podctl.cli.main import cli as main

    monkeypatch.setenv("PODCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str, url: str = "") -> tuple[int, str, str]:
        result = CliRunner().invoke(main, ["--backend", "fake", *args], prog_name="podctl",
                                    env={"PODCTL_QUEUE_URL": url})
        return result.exit_code, result.stdout, result.stderr

    return invoke


def test_a_new_store_is_one_module_and_one_registry_line(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(stores.REGISTRY, ("memory",), "tests.queue_memory_store")  # the one line
    url = "memory://team-a"
    with stores.open_store(url, tmp_path) as store:
        request = AddRequest(slice_type="v5p-8", spec=RunSpec(script=Path("train.py")), name="first")
        entry = add(store, request, project="p", zone="us-central1-a", bucket="b",
                    bundle_hash="0" * 64, script="train.py", owner="alice")
    code, out, err = cli("queue", "ls", "--json", url=url)
    assert code == 0, err
    assert [(e["id"], e["name"], e["owner"], e["state"]) for e in json.loads(out)] == [
        (entry.id, "first", "alice", "pending")]
    code, out, err = cli("queue", "quota", "set", "alice", "--max-chips", "8", url=url)
    assert (code, out.strip()) == (0, "quota of alice: 8 chips at once"), err
    assert json.loads(cli("queue", "quota", "ls", "--json", url=url)[1])[0]["max_chips"] == 8

    # `queue migrate` goes through the registry too: this machine's SQLite queue into it
    with Store(db_path(tmp_path / "state")) as local:
        local.add(_entry(owner="bob"))
        token = local.token
    code, out, err = cli("queue", "migrate", "--to", "memory://team-b")
    assert code == 0 and out.startswith("moved 1 entries, 0 quotas and 0 team members"), err
    with stores.open_store("memory://team-b", tmp_path) as moved:
        assert moved.token == token and [e.owner for e in moved.entries()] == ["bob"]


def test_an_unknown_scheme_or_a_bad_url_is_one_line(cli):
    code, _, err = cli("queue", "ls", url="mysql://db/queue")
    assert code == 2 and err.count("\n") == 1
    assert "queue_url must be a PostgreSQL URL" in err and "mysql://" in err and "postgresql://" in err
    code, _, err = cli("queue", "migrate", "--to", "memory://x")  # not registered here
    assert code == 2 and "--to must be a PostgreSQL URL" in err and "memory://..." in err
