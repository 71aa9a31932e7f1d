"""Read a run's logs and status back from GCS, from the start, and follow them.

Each host's agent uploads numbered chunks of whole lines; reading them in number
order gives every line once, in order, per host, whether the reader is the `run`
that started the job, a later `podctl logs --follow`, or another machine. The
run is over when every host has written its status (written after its last
chunk, so a final read after that misses nothing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from podctl.base.vocabulary import HEARTBEAT_SECONDS
from podctl.cloud.storage import Storage, StorageUnavailable
from podctl.host import run_layout
from podctl.jobs import run_files
from podctl.jobs.host_label import ProcessMarks
from podctl.jobs.run_files import EXIT_HOST_LOST, HOST_LOST_SECONDS, split_lines
from podctl.jobs.run_record import HostStatus

__all__ = ["LogReader", "LineSink", "EXIT_HOST_LOST", "HOST_LOST_SECONDS", "split_lines"]

LineSink = Callable[[int, str], None]
STATUS_SECONDS = 1.0
# A host whose beat is this late is asked why (`explain`) before HOST_LOST_SECONDS: an
# agent that GCS refuses can write neither its status nor its beat, so its silence is
# all GCS shows of a refusal, and only the host can say what it was.
OVERDUE_SECONDS = 1.5 * HEARTBEAT_SECONDS


@dataclass
class Progress:
    next_chunk: dict[int, int] = field(default_factory=dict)  # host -> next chunk number
    statuses: dict[int, HostStatus] = field(default_factory=dict)
    heartbeats: dict[int, float] = field(default_factory=dict)
    lines: dict[int, int] = field(default_factory=dict)


class LogReader:
    """Polls one run's objects; prints new lines of the chosen hosts through SINK."""

    def __init__(self, storage: Storage, run_id: str, num_hosts: int, sink: LineSink,
                 hosts: set[int] | None = None, notice: Callable[[str], None] | None = None,
                 explain: Callable[[], Awaitable[str | None]] | None = None):
        self.storage = storage
        self.run_id = run_id
        self.num_hosts = num_hosts
        self.sink = sink
        self.hosts = hosts  # None: all
        self.notice = notice or (lambda text: None)
        self.progress = Progress()
        self.marks = ProcessMarks()  # each line goes out with its host's JAX process index
        self.started = time.time()  # no host is lost before HOST_LOST_SECONDS after this
        self.deadline: float | None = None  # (monotonic) end the follow by then: `end_by`
        # Asked when hosts go quiet: the line that says why (GCS refuses the nodes'
        # account: identity.py's), which ends the run's silent hosts at once; None: no idea
        self.explain = explain
        self.refusal: str | None = None  # what explain said, once it said something

    def shown(self, host: int) -> bool:
        return self.hosts is None or host in self.hosts

    async def read_logs(self) -> int:
        """Fetch and emit every chunk not yet seen; returns the number of lines emitted."""
        chunks_by_host = await run_files.list_chunks(self.storage, self.run_id)
        by_host = {h: c for h, c in chunks_by_host.items() if self.shown(h)}
        emitted = 0
        for host in sorted(by_host):
            # chunks are uploaded one after another, so they are read in unbroken order
            for number, name in run_layout.unbroken(
                    by_host[host], self.progress.next_chunk.get(host, run_layout.FIRST_CHUNK)):
                data = await self.storage.download_bytes(name)
                lines = split_lines(data)
                for line in lines:
                    self.sink(host, self.marks.line(host, line))
                emitted += len(lines)
                self.progress.lines[host] = self.progress.lines.get(host, 0) + len(lines)
                self.progress.next_chunk[host] = number + 1
        return emitted

    async def read_statuses(self) -> dict[int, HostStatus]:
        self.progress.statuses = await run_files.read_statuses(self.storage, self.run_id,
                                                               self.progress.statuses)
        return self.progress.statuses

    async def read_heartbeats(self) -> dict[int, float]:
        self.progress.heartbeats.update(await run_files.read_heartbeats(self.storage, self.run_id))
        return self.progress.heartbeats

    def lost_hosts(self, now: float) -> list[int]:
        """Hosts with no status whose agent stopped beating (or never started)."""
        return run_files.silent_hosts(self.num_hosts, self.progress.statuses,
                                      self.progress.heartbeats, self.started, now)

    async def _explained(self, now: float) -> str | None:
        """EXPLAIN's line when a host without a status is late with its beat."""
        if self.explain is None or self.refusal is not None:
            return self.refusal
        late = [h for h in range(self.num_hosts) if h not in self.progress.statuses
                and now - max(self.progress.heartbeats.get(h, self.started), self.started) > OVERDUE_SECONDS]
        if late:
            self.refusal = await self.explain()
        return self.refusal

    @property
    def done(self) -> bool:
        return len(self.progress.statuses) >= self.num_hosts

    def end_by(self, seconds: float) -> None:
        """Follow at most SECONDS more, then end with the statuses written by then (a
        fail-fast: the hosts still going are being stopped, and need not be waited for)."""
        deadline = time.monotonic() + seconds
        self.deadline = deadline if self.deadline is None else min(self.deadline, deadline)

    async def follow(self, *, poll_seconds: float = 0.5,
                     on_status: Callable[[HostStatus], Awaitable[None]] | None = None,
                     follow: bool = True) -> dict[int, HostStatus]:
        """Emit lines until every host has ended (or once, without FOLLOW).

        Following rides out a GCS outage of any length: the run goes on on its hosts
        (their agents keep the lines), so the reader says so once, backs off, and
        catches up when GCS answers again."""
        self._seen: set[int] = set()
        self._last_beat_check = self._last_status_check = 0.0
        outage_began: float | None = None
        backoff = poll_seconds
        while True:
            try:
                statuses = await self._poll(on_status, follow)
            except StorageUnavailable as e:
                if not follow:
                    raise
                # While GCS is away the hosts cannot beat either: their silence counts from
                # the last failed look, so the look that ends the outage cannot call them lost.
                self.started = time.time()
                if outage_began is None:
                    outage_began = time.time()
                    self.notice(f"GCS cannot be reached ({str(e)[:120]}); run {self.run_id} goes on "
                                "on its hosts, which keep its lines: still following, to catch up when "
                                f"GCS answers (or re-attach later: podctl logs {self.run_id} --follow)")
                backoff = min(30.0, backoff * 2)
                await asyncio.sleep(backoff)
                continue
            if outage_began is not None:
                self.notice(f"GCS answers again after {time.time() - outage_began:.0f} s; caught up")
                # the hosts could not beat meanwhile either: give them time to be heard
                self.started, outage_began, backoff = time.time(), None, poll_seconds
            if statuses is not None:
                return statuses
            await asyncio.sleep(poll_seconds)

    async def _poll(self, on_status: Callable[[HostStatus], Awaitable[None]] | None,
                    follow: bool) -> dict[int, HostStatus] | None:
        """One look at GCS: new lines out, statuses in -> every status once all hosts
        have ended (or without FOLLOW), else None."""
        statuses = self.progress.statuses
        # Statuses change once per host per run; logs all the time. Listing the
        # statuses about once a second keeps the load on the store down.
        if time.monotonic() - self._last_status_check >= STATUS_SECONDS or not follow:
            statuses = await self.read_statuses()
            self._last_status_check = time.monotonic()
        await self.read_logs()
        for host, status in sorted(statuses.items()):
            if host not in self._seen:
                self._seen.add(host)
                if on_status:
                    await on_status(status)
        if self.done or not follow or (self.deadline is not None and time.monotonic() > self.deadline):
            await self.read_logs()  # statuses come after the last chunk: drain
            return statuses
        now = time.time()
        if now - self._last_beat_check > 10:
            await self.read_heartbeats()
            self._last_beat_check = now
            # A record closed as lost (`podctl down` deleted the slice under the run): its
            # hosts will write nothing more; waiting out their heartbeats would only stall.
            gone = await run_files.gone_reason(self.storage, self.run_id)
            lost = ([h for h in range(self.num_hosts) if h not in self.progress.statuses]
                    if gone is not None else self.lost_hosts(now))
            why = gone or await self._explained(now) or run_files.SILENT
            if self.refusal is not None:  # every host has the nodes' one account: all are shut out
                lost = [h for h in range(self.num_hosts) if h not in self.progress.statuses]
            for host in lost:  # the next poll reports them, reads the last lines, and ends
                self.progress.statuses[host] = run_files.lost_status(host, now, why)
        return None
