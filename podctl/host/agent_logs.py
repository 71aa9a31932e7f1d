"""The host agent's log shipper (stdlib only: shipped with agent.py, run by a bare
host's python3): every line the script prints goes to a local file at once and to GCS
in numbered chunks every few seconds (run_layout.chunk_object:
podctl/runs/RUN_ID/logs/host-NNNN/NNNNNN.log), with a heartbeat
(run_layout.heartbeat_object) that also says which phase the agent is in, when each
phase began, and what the script is doing (agent_watch.py)."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # on a host: agent_gcs is a sibling module; the type is for mypy only
    from podctl.host.agent_gcs import Bucket

try:  # on a host: the agent's zip holds its sibling modules at the top level
    import run_layout
except ImportError:  # imported by podctl itself
    from podctl.host import run_layout

TAIL_LINES = 20
TAIL_IN_STATUS = 20  # a failure's last lines in its status: podctl reads a chip error there
TAIL_CHARS = 4096  # each tail line is cut to this: the status stays small whatever was printed
# A native abort's cause: the first glog FATAL line ("F1207 04:38:43.871840  716 client.h:86]
# ...": a CHECK failure, JAX's coordination service ending the process) and the lines after
# it, kept for the status however long the stack dump that follows is (the tail is not).
GLOG_FATAL = re.compile(r"F\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")
FATAL_LINES = 12
# At the run's end the agent ships every line left (and then its status) through a GCS
# outage of up to this long, retrying with backoff and beating meanwhile; only after it
# does it give up, the lines staying in the host's local log.
SHIP_PATIENCE_SECONDS = 6 * 3600.0
SHIP_RETRY_MAX_SECONDS = 8.0


def process_mark(host: int, process: int) -> str:
    """The line the agent logs once its script's JAX process index is known: readers
    (podctl/jobs/host_label.py parses it) label this host's later lines by it too."""
    return f"[podctl] {run_layout.host_tag(host)} is JAX process {process}"


class LogShipper:
    """Lines in, GCS chunks out: a local file for every line, an upload every few seconds."""

    def __init__(self, cfg: dict[str, Any], bucket: Bucket, run_dir: Path):
        self.run_id, self.host = cfg["run_id"], int(cfg["host"])
        self.tag = run_layout.host_tag(self.host)
        self.bucket = bucket
        self.flush_seconds = float(cfg.get("flush_seconds", 2.0))
        self.heartbeat_seconds = float(cfg.get("heartbeat_seconds", 10.0))
        self.patience = float(cfg.get("ship_patience_seconds", SHIP_PATIENCE_SECONDS))
        self.local = open(run_dir / "output.log", "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (the shipper's life)
        self.pending: list[str] = []
        self.lines = 0
        self.chunk = run_layout.FIRST_CHUNK - 1  # the last chunk shipped
        # When each phase began (starting, environment, setup, running, done): where the
        # host's time went, for `podctl goodput`; in every heartbeat and in the status.
        self.phases: dict[str, float] = {}
        # the script's progress and process state, for the stall watch
        self.watch: Callable[[], dict[str, Any]] = lambda: {}
        self.process_index: int | None = None  # the script's JAX process index, once it says
        self.phase = "starting"
        self.lock = threading.Lock()
        self.flushing = threading.Lock()  # one flush at a time: chunk numbers stay in order
        self.tail: list[str] = []
        self.fatal: list[str] = []  # GLOG_FATAL's line and those after it
        self._fatal_left = 0
        self.refused = ""  # GCS's 401/403 to the host's account, once met (the agent ends the run)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="podctl-log-shipper", daemon=True)
        self._last_heartbeat = 0.0

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        self._phase = name
        self.phases.setdefault(name, time.time())

    def start(self) -> None:
        self._thread.start()

    def line(self, text: str) -> None:
        text = text.rstrip("\n")
        with self.lock:
            if not self.local.closed:  # a line after the end (a late process mark): GCS only
                self.local.write(text + "\n")
            self.pending.append(text + "\n")
            self.lines += 1
            self.tail = (self.tail + [text[:TAIL_CHARS]])[-TAIL_LINES:]
            if self._fatal_left:
                self.fatal.append(text[:TAIL_CHARS])
                self._fatal_left -= 1
            elif not self.fatal and GLOG_FATAL.match(text):
                self.fatal, self._fatal_left = [text[:TAIL_CHARS]], FATAL_LINES - 1

    def _upload(self, name: str, data: str, content_type: str = "text/plain",
                attempts: int = 6) -> bool:
        for attempt in range(attempts):  # GCS hiccups pass
            try:
                self.bucket.upload(name, data.encode(), content_type)
                return True
            except Exception as e:  # agent_gcs.GcsError, or anything urllib raises
                if getattr(e, "refused", False):  # 401/403: no retry passes it; say it once
                    if not self.refused:
                        sys.stderr.write(f"podctl agent: GCS refused {name}: {e}\n")
                    self.refused = str(e).splitlines()[0][:300]
                    return False
                if attempt == attempts - 1:
                    sys.stderr.write(f"podctl agent: could not upload {name}: {e}\n")
                    return False
                time.sleep(min(8.0, 0.5 * 2 ** attempt))
        return False

    def flush(self, attempts: int = 6) -> bool:
        """Ship what is pending as the next chunk -> whether nothing is left pending. A
        chunk number is used only once its upload succeeded; on failure the lines go back
        to the front of the queue and travel with the next flush, so the reader never
        meets a gap (which would hide every later line of this host) and no line is lost."""
        with self.flushing:
            with self.lock:
                data, self.pending = "".join(self.pending), []
                self.local.flush()
            if not data:
                return True
            if self._upload(run_layout.chunk_object(self.run_id, self.host, self.chunk + 1), data,
                            attempts=attempts):
                self.chunk += 1
                return True
            with self.lock:
                self.pending.insert(0, data)
            return False

    @property
    def unshipped(self) -> int:
        """How many lines are not in GCS yet."""
        with self.lock:
            return sum(chunk.count("\n") for chunk in self.pending)

    def heartbeat(self, force: bool = False, attempts: int = 6) -> None:
        now = time.time()
        if force or now - self._last_heartbeat >= self.heartbeat_seconds:
            self._last_heartbeat = now
            beat = {"time": now, "lines": self.lines, "phase": self.phase, "pid": os.getpid(),
                    "phases": self.phases, **self.watch(), "process_index": self.process_index}
            self._upload(run_layout.heartbeat_object(self.run_id, self.host), json.dumps(beat),
                         "application/json", attempts=attempts)

    def persist(self, attempt: Callable[[], bool]) -> bool:
        """ATTEMPT (one try at an upload -> whether it is done) until it is done, through
        an outage of up to `patience` seconds: backing off, and beating between tries so
        that readers know this host is alive once GCS answers -> whether it was done."""
        deadline = time.monotonic() + self.patience
        wait = 0.5
        while not attempt():
            if self.refused or time.monotonic() > deadline:  # a refusal is no outage: it stays
                return False
            self.heartbeat(attempts=1)
            time.sleep(wait)
            wait = min(SHIP_RETRY_MAX_SECONDS, wait * 2)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.flush_seconds):
            self.flush()
            self.heartbeat()

    def close(self) -> bool:
        """Ship every line left (through an outage: `persist`), then close the local log
        -> whether every line reached GCS. The run's end (its status) is written after
        this, so a reader that sees the status has every line there is."""
        self._stop.set()
        self._thread.join(timeout=60)
        shipped = self.persist(lambda: self.flush(attempts=3))
        if not shipped:
            why = (f"GCS refused this host's account ({self.refused})" if self.refused
                   else f"in {self.patience:.0f} s")  # a refusal is given up at once, not waited out
            sys.stderr.write(f"podctl agent: {self.unshipped} line(s) never reached GCS: {why}; "
                             f"they are in {self.local.name}\n")
        self.local.close()
        return shipped
