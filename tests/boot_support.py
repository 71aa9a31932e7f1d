"""In-process looks at a CLI test's fake daemon (tests/conftest.Podctl): its admin, its
Cloud TPU API, its bucket, read as `podctl status`, `runs` and `logs` read them, but
from the test's own process. A wait on a watcher's word or a log line then costs an HTTP
call per look, not a `podctl` process (about a second of CPU each, the imports, on 2
cores); the CLI's own words stay checked by one `podctl` call once the wait is over."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from podctl.cloud.connect import api_for_endpoint
from podctl.cloud.storage import Storage
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.fake.storage.gcs import DEFAULT_BUCKET
from podctl.host import run_layout
from podctl.jobs.channels.boot import watcher_states
from podctl.jobs.run_files import list_runs
from tests.conftest import FAST_RETRY, Podctl


def fake_status(cli: Podctl) -> dict[str, Any]:
    """`podctl fake status --json`, read once per CLI (its daemon's endpoints stay while it lives)."""
    if not hasattr(cli, "fake_status"):
        cli.fake_status = json.loads(cli("fake", "status", "--json").stdout)  # type: ignore[attr-defined]
    return cli.fake_status  # type: ignore[attr-defined]


def admin(cli: Podctl) -> FakeAdmin:
    return FakeAdmin(fake_status(cli)["admin"])


def tpu_api(cli: Podctl):
    """The Cloud TPU API of CLI's fake, in this process (one client per CLI)."""
    if not hasattr(cli, "tpu_api"):
        cli.tpu_api = api_for_endpoint(fake_status(cli)["tpu_api"], retry=FAST_RETRY)  # type: ignore[attr-defined]
    return cli.tpu_api  # type: ignore[attr-defined]


def parent(cli: Podctl) -> str:
    return f"projects/{fake_status(cli)['project']}/locations/{fake_status(cli)['zone']}"


def watchers(cli: Podctl, name: str) -> list[str]:
    """Per worker, what NAME's watchers say: the call `podctl status` makes, in this process."""
    async def read() -> dict[str, list[str]]:
        api = tpu_api(cli)
        return await watcher_states(api, parent(cli), await api.describe(parent(cli), name))
    return asyncio.run(read()).get(name, [])


def store(cli: Podctl) -> Storage:
    return Storage.connect(DEFAULT_BUCKET, endpoint=fake_status(cli)["gcs"])


def logged(cli: Podctl, run_id: str) -> str:
    """RUN_ID's log chunks so far, every host's, from GCS as `podctl logs` reads them."""
    async def read() -> str:
        bucket = store(cli)
        found = await bucket.list(run_layout.log_prefix(run_id))
        return "".join([(await bucket.download_bytes(o.name)).decode(errors="replace") for o in found])
    return asyncio.run(read())


def run_states(cli: Podctl) -> dict[str, str]:
    """Run id -> state, every run's record in GCS (what `podctl runs` lists)."""
    return {r.run_id: r.state for r in asyncio.run(list_runs(store(cli)))}


def eventually(check, timeout: float = 60.0, every: float = 1.0) -> bool:
    """CHECK() true within TIMEOUT s, looking every EVERY s: a second where a look is a
    `podctl` process (not a busy loop of them on 2 cores), less where it is an HTTP call."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(every)
    return check()
