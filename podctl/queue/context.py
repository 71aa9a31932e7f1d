"""What a tick works with: the clouds, the queue's token, its clock and its log.

`TickContext.connect(settings)` builds it for the CLI; tests build it around the
in-process fake cloud, with a clock of their own (the only thing they mock).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Awaitable, Callable

from podctl.jobs.env_lock import jax_extra_for
from podctl.settings import Settings
from podctl.steps.session import Session
from podctl.cloud.api import TpuApi
from podctl.cloud.sshkey import SSH_USER
from podctl.cloud.types import SliceInfo
from podctl.storage import Storage

KILL_ENV = "PODCTL_QUEUE_KILL_AT"  # test-only: SIGKILL the tick at this phase (see tick.py)


async def _podctl_user(info: SliceInfo) -> str:
    return SSH_USER


@dataclass
class TickContext:
    api: TpuApi
    storage_for: Callable[[str], Storage]  # a bucket's GCS
    config_dir: Path
    ssh_keys: str  # the `ssh-keys` metadata every queued slice gets
    private_key: Path
    ssh_port: int | None
    coordinator_port: Callable[[], int]
    log: Any
    now: Callable[[], float] = time.time
    # who to log in to a slice's hosts as (Session.ssh_user: OS Login's user where it is on)
    ssh_user: Callable[[SliceInfo], Awaitable[str]] = _podctl_user
    kill_at: str | None = None
    host_jax_extra: str = "tpu"  # env_lock.jax_extra_for the backend the entries run on
    fake_cloud: bool = False  # the fake backend (the identity check names `podctl fake grant`)
    _storages: dict[str, Storage] = field(default_factory=dict)

    def storage(self, bucket: str) -> Storage:
        if bucket not in self._storages:
            self._storages[bucket] = self.storage_for(bucket)
        return self._storages[bucket]

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
        return cls.over(Session.open(settings), log, kill_at=os.environ.get(KILL_ENV) or None)

    @classmethod
    def over(cls, session: Session, log: Any, **options: Any) -> TickContext:
        key = session.ssh_key()
        return cls(api=session.api, storage_for=session.storage_for,
                   config_dir=session.settings.config_dir, ssh_keys=key.metadata_entry,
                   private_key=key.private_path, ssh_port=session.job_ports()[0],
                   coordinator_port=lambda: session.job_ports()[1], log=log, ssh_user=session.ssh_user,
                   host_jax_extra=jax_extra_for(session.settings.backend),
                   fake_cloud=session.settings.backend == "fake", **options)
