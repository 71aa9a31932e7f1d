"""What a tick works with: a steps.Session (the clouds, the SSH key, the host-key pins,
who to log in as), the queue's clock and its log.

`TickContext.connect(settings)` builds it for the CLI; tests build it around a Session
on the in-process fake cloud, with a clock of their own (the only thing they mock).
Every side effect of a tick goes through steps/ with that session, as the CLI's do.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from podctl.base.settings import Settings
from podctl.queue.entry import Entry
from podctl.queue.interface import Quota
from podctl.steps.session import Session

KILL_ENV = "PODCTL_QUEUE_KILL_AT"  # test-only: SIGKILL the tick at this phase (see tick.py)


@dataclass
class TickContext:
    session: Session
    log: Any
    now: Callable[[], float] = time.time
    kill_at: str | None = None
    # podctl.toml's [queue.quotas] and [queue.teams] (the queue's own win over them)
    toml_shares: tuple[list[Quota], dict[str, str]] = field(default_factory=lambda: ([], {}))
    preempt: bool = False  # [queue] preempt = true: a higher priority may preempt (shares.py)
    # one session per (project, zone, bucket) that entries name, sharing SESSION's clients
    _places: dict[tuple[str, str, str], Session] = field(default_factory=dict)

    def session_for(self, entry: Entry) -> Session:
        """The session at ENTRY's project, zone and bucket (an entry names its own, as
        `queue add` found them), so that steps see them as their settings."""
        place = (entry.project, entry.zone, entry.bucket)
        if place not in self._places:
            self._places[place] = self.session.at(project=entry.project, zone=entry.zone,
                                                  bucket=entry.bucket)
        return self._places[place]

    def phase(self, name: str) -> None:
        """A point between writing an intent and doing it (or after doing it). With
        PODCTL_QUEUE_KILL_AT=NAME the process dies here, as a SIGKILLed cron job would:
        tests use it to show that the next tick finishes what this one began."""
        if self.kill_at == name:
            os.kill(os.getpid(), signal.SIGKILL)

    @classmethod
    def connect(cls, settings: Settings, log: Any) -> TickContext:
        """The tick's context over a steps.Session: the same clients, key and pins as
        every other command (entries name their own project, zone and bucket)."""
        from podctl.queue.place import toml_preempt, toml_shares

        return cls(Session.open(settings), log, kill_at=os.environ.get(KILL_ENV) or None,
                   toml_shares=toml_shares(), preempt=toml_preempt())
