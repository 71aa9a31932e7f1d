"""SSH to a slice's hosts: one asyncio fan-out with bounded concurrency, connection
retries with backoff, and host keys pinned per slice.

Hand-written loops start one `ssh` process per host; here one process holds all
connections, so a 512-host slice costs 512 handshakes and nothing else. Host keys
are trusted on first use and pinned in a file per slice instance (name + creation
time, so a re-created slice starts a new file); a key that changes afterwards is
refused. The key is checked before any command or secret is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from podctl.base.errors import HostKeyError, JobError
from podctl.base.retry import RetryPolicy
from podctl.cloud.sshkey import SSH_USER
from podctl.cloud.types import SliceInfo

T = TypeVar("T")
DEFAULT_CONCURRENCY = 256


@dataclass(frozen=True)
class Target:
    """One host as a process of the job: its global index and where to reach it."""

    index: int  # the job's process id: slices in order, workers in order
    slice_index: int
    worker: int
    address: str  # where podctl reaches it by SSH: the external address when it has one
    port: int
    internal: str = ""  # its internal address: where the other hosts reach it ("": address)

    @property
    def peer_address(self) -> str:
        """Where the slice's other hosts reach this one: its internal address, since the
        VPC's firewall admits only SSH at an external one (fake/README.md)."""
        return self.internal or self.address

    @property
    def name(self) -> str:
        return f"host {self.index:04d}"


class HostPins:
    """Host keys seen for one slice instance, in a 0600 JSON file."""

    def __init__(self, path: Path):
        self.path = path
        self.keys: dict[str, str] = {}
        self.unreadable: str | None = None  # why the pins cannot be trusted: connect to nothing
        try:
            keys = json.loads(path.read_text())
            if not (isinstance(keys, dict) and all(isinstance(v, str) for v in keys.values())):
                raise ValueError("not a JSON object of host keys")
            self.keys = keys
        except FileNotFoundError:
            pass  # no host of this slice met yet: the first keys are pinned
        except (OSError, ValueError) as e:  # a truncated or damaged file must not turn checking off
            self.unreadable = f"{type(e).__name__}: {e}"
        self.new: dict[str, str] = {}

    def check(self, target: Target, key: str) -> None:
        if self.unreadable is not None:
            raise HostKeyError(
                f"the SSH host keys pinned for this slice cannot be read from {self.path} "
                f"({self.unreadable[:80]}); refusing to connect unchecked. If you trust the slice "
                "as it is now, remove that file and podctl pins its keys again.")
        where = f"{target.address}:{target.port}"
        pinned = self.keys.get(where)
        if pinned is None:
            self.new[where] = key
        elif pinned != key:
            raise HostKeyError(
                f"{target.name} ({where}) offered a different SSH host key than podctl pinned; "
                f"refusing to connect. If the slice was re-created, remove {self.path}.")

    def save(self) -> None:
        if not self.new:
            return
        self.keys.update(self.new)
        self.new = {}
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(self.keys, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def pins_path(config_dir: Path, project: str, zone: str, name: str, created: float) -> Path:
    return config_dir / "known_hosts" / f"{project}_{zone}_{name}_{int(created)}.json"


def pins_for(config_dir: Path, info: SliceInfo) -> HostPins:
    """The host keys first seen on this very slice (its project, zone, name and birth):
    every command, the queue's tick included, pins a slice's hosts here."""
    return HostPins(pins_path(config_dir, info.project, info.zone, info.name, info.created))


def _retryable(error: BaseException) -> bool:
    import asyncssh

    if isinstance(error, asyncssh.PermissionDenied):
        return False  # the key is wrong; trying again will not make it right
    return isinstance(error, (OSError, asyncssh.Error, asyncio.TimeoutError))


def refused_hint(user: str) -> str:
    """What to do when a host refuses USER's key: OS Login is the usual cause (a VM then
    ignores the ssh-keys metadata podctl's own user is in)."""
    if user == SSH_USER:
        return ("with OS Login on (enable-oslogin=TRUE in the project's or slice's metadata, or "
                "the org policy compute.requireOsLogin) hosts ignore podctl's ssh-keys metadata; "
                "podctl imports its key through OS Login when the metadata says so, unless "
                "PODCTL_OSLOGIN=off. Else, was the slice made by `podctl up`?")
    return (f"OS Login let podctl import its key, but {user} may not log in: grant the account "
            "roles/compute.osAdminLogin (or roles/compute.osLogin) on the project")


class Fleet:
    """Connections to the hosts of a run, opened together and closed together."""

    def __init__(self, targets: Iterable[Target], private_key: Path, pins: HostPins, *,
                 user: str = SSH_USER, concurrency: int = DEFAULT_CONCURRENCY, attempts: int = 5,
                 connect_timeout: float = 30.0):
        self.targets = list(targets)
        self.private_key = private_key
        # podctl's own, with its key in the nodes' ssh-keys; OS Login's POSIX username
        # when the project turns OS Login on (cloud/oslogin.py)
        self.user = user
        self.pins = pins
        self.concurrency = max(1, concurrency)
        self.attempts = attempts
        self.connect_timeout = connect_timeout
        self.connections: dict[int, Any] = {}
        self._key: Any = None
        self._closed = False  # a connection that completes after close() is closed at once

    async def _connect_one(self, target: Target) -> Any:
        import asyncssh

        # the one retry policy (base/retry.py), paced for a handshake: a host's sshd may be
        # starting; the deadline is every attempt timing out
        policy = RetryPolicy(attempts=self.attempts, initial=0.3, maximum=5.0,
                             deadline=self.attempts * (self.connect_timeout + 5.0))
        async for attempt in policy.retrying(_retryable):
            with attempt:
                conn = await asyncio.wait_for(asyncssh.connect(
                    target.address, target.port, username=self.user, client_keys=[self._key],
                    known_hosts=None, agent_path=None, config=None, preferred_auth="publickey",
                    keepalive_interval=30), self.connect_timeout)
        host_key = conn.get_server_host_key()
        if host_key is None:  # asyncssh gives None only when no host key was exchanged
            conn.close()
            raise HostKeyError(f"{target.address} offered no host key; podctl pins every host's key")
        try:
            self.pins.check(target, host_key.export_public_key().decode().strip())
        except HostKeyError:
            conn.close()
            raise
        return conn

    async def open(self) -> None:
        import asyncssh

        self._key = asyncssh.read_private_key(self.private_key)
        self._closed = False
        limit = asyncio.Semaphore(self.concurrency)

        async def one(target: Target) -> None:
            async with limit:
                try:
                    conn = await self._connect_one(target)
                    if self._closed:  # closed while this host's handshake ran (a stop)
                        conn.close()
                        raise JobError(f"the connections were closed while {target.name} connected")
                    self.connections[target.index] = conn
                except HostKeyError:
                    raise
                except asyncssh.PermissionDenied as e:
                    raise JobError(f"{target.name} ({target.address}:{target.port}) refused "
                                   f"podctl's SSH key for {self.user}; {refused_hint(self.user)}") from e
                except (TimeoutError, OSError, asyncssh.Error) as e:
                    raise JobError(f"cannot reach {target.name} ({target.address}:{target.port}) "
                                   f"over SSH: {e or e.__class__.__name__}") from e

        try:
            await _gather_all([one(t) for t in self.targets])
        except BaseException:
            await self.close()
            raise
        self.pins.save()

    async def each(self, fn: Callable[[Any, Target], Awaitable[T]]) -> list[T]:
        """Run FN(connection, target) on every host at once; results in target order."""
        import asyncssh

        limit = asyncio.Semaphore(self.concurrency)

        async def one(target: Target) -> T:
            async with limit:
                try:
                    return await fn(self.connections[target.index], target)
                except asyncssh.Error as e:  # a host gone since open() (preempted, rebooted)
                    raise JobError(f"lost the SSH connection to {target.name} ({target.address}): "
                                   f"{e or e.__class__.__name__}") from e

        return await _gather_all([one(t) for t in self.targets])

    async def close(self) -> None:
        # Taken whole before the first await: open() may still be adding a host (a stop
        # that came during the handshakes), and what it adds later it closes itself.
        self._closed = True
        conns, self.connections = list(self.connections.values()), {}
        for conn in conns:
            conn.close()
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.wait_closed()

    async def __aenter__(self) -> Fleet:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _gather_all(coros: list[Awaitable[T]]) -> list[T]:
    """Like gather, but the first failure cancels the rest (and is what is raised)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
