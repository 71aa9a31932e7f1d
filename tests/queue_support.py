"""A queue around the in-process fake cloud, for the queue's tests and benchmark:
real store, real tick, real clients; only the tick's clock can be moved."""

from __future__ import annotations

import io
import json
import socket
import time
from pathlib import Path
from typing import Any, Callable

from podctl.base._sync import run_sync
from podctl.queue import add as adding
from podctl.queue import tick as ticking
from podctl.queue.context import TickContext
from podctl.queue.log import configure
from podctl.queue.machine import needs_cleanup
from podctl.queue.entry import Entry
from podctl.queue.interface import QueueStore
from podctl.queue.place import open_store
from podctl.base.settings import FAKE_BUCKET, Settings
from podctl.steps import RunSpec
from podctl.steps.session import Session
from podctl.cloud.storage import Storage

SCRIPTS = Path(__file__).parent / "scripts"
PROJECT = "test-project"
ZONE = "us-central1-a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clock:
    """The tick's clock: real time plus an offset a test may move forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


class Queue:
    def __init__(self, fake: Any, api: Any, home: Path, url: str | None = None):
        self.fake, self.api, self.url = fake, api, url  # url: a PostgreSQL queue; None: SQLite
        self.state_dir = home / "state"
        self.clock = Clock()
        self.out = io.StringIO()
        self.storage = Storage.connect(FAKE_BUCKET, endpoint=fake.gcs_url)
        # A session for this in-process fake: its ports and its GCS, so that no fake
        # daemon is started; OS Login off, as podctl's own user logs in to its hosts.
        settings = Settings(backend="fake", project=PROJECT, zone=ZONE, config_dir=home / "config",
                            state_dir=self.state_dir, bucket=FAKE_BUCKET, oslogin=False)
        self.session = Session(settings, api, ports=(fake.hosts.ssh_port, 8476),
                               storages={FAKE_BUCKET: self.storage})
        self.ctx = TickContext(self.session, log=configure(self.out, tty=False), now=self.clock)

    def store(self) -> QueueStore:
        return open_store(self.state_dir, self.url)

    def add(self, script: str, *args: str, slice_type: str = "v5p-8", workdir: Path | None = None,
            owner: str = "alice@example.com", zone: str = ZONE, **options: Any) -> Entry:
        spec = RunSpec(script=SCRIPTS / script if workdir is None else workdir / script,
                       args=args, workdir=workdir, env=options.pop("env", {}))
        request = adding.AddRequest(slice_type=slice_type, spec=spec, **options)
        adding.validate(request)
        digest, inside = run_sync(adding.bundle_now(self.session, request, lambda text: None))
        with self.store() as store:
            return adding.add(store, request, project=PROJECT, zone=zone, bucket=FAKE_BUCKET,
                              bundle_hash=digest, script=inside, owner=owner)

    def tick(self) -> ticking.PassResult:
        return ticking.tick(self.ctx, self.store)

    def entries(self) -> dict[int, Entry]:
        with self.store() as store:
            return {e.id: e for e in store.entries()}

    def entry(self, entry_id: int) -> Entry:
        with self.store() as store:
            return store.get(entry_id)

    def until(self, done: Callable[[dict[int, Entry]], bool], what: str, limit: float = 90) -> dict[int, Entry]:
        deadline = time.monotonic() + limit
        while True:
            self.tick()
            entries = self.entries()
            if done(entries):
                return entries
            assert time.monotonic() < deadline, f"never {what}: {entries}"
            time.sleep(0.1)

    def settle(self, limit: float = 90) -> dict[int, Entry]:
        """Tick until every entry has ended and nothing it made is left in the fake."""
        return self.until(lambda es: all(e.terminal and not needs_cleanup(e) for e in es.values())
                          and self.fake.admin.is_empty(), "settled", limit)

    def events(self) -> list[dict]:
        return [json.loads(line) for line in self.out.getvalue().splitlines()]
