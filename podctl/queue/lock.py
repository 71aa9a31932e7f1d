"""One tick at a time: an exclusive flock on `queue.lock` next to the database.

The kernel drops the lock when its holder dies, SIGKILL included, so a killed
tick never leaves the queue locked. A tick that finds it held gives up at once
(cron starts the next one soon enough); `queue cancel` waits a little for it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from podctl.base.errors import QueueBusyError


class QueueLock:
    def __init__(self, state_dir: Path):
        self.path = state_dir / "queue.lock"
        self.fd: int | None = None

    def acquire(self, wait: float = 0.0) -> bool:
        """True once held; False if another process holds it for longer than WAIT seconds."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.fd = fd
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.1)

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def hold(self, wait: float, what: str) -> QueueLock:
        if not self.acquire(wait):
            raise QueueBusyError(f"a `podctl queue tick` holds {self.path} (more than {wait:g} s); "
                                 f"try {what} again in a moment.")
        return self

    def __enter__(self) -> QueueLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
