"""The SSH side of a fake host: who may log in, and how a command runs.

One `SshServer` per connection decides auth against the node's `ssh-keys`
metadata as its hosts see it (node_fields.host_metadata: a `nodes.patch` reaches them
`timings.metadata_propagation` after its operation is done, as gcloud's retries expect),
or, with OS Login on, against the keys imported into OS Login (oslogin.py).
One `ShellSession` per channel runs `bash -c COMMAND` (or `bash` for a shell) in its own
process group, pumps stdin/stdout/stderr with flow control both ways, and reports
the exit status, or the signal that killed it, as sshd does. The command's process
group is terminated when the client closes the channel or the connection goes, and
signalled when the client sends a signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import asyncssh

if TYPE_CHECKING:
    from podctl.fake.vm.hosts import Host, NodeHosts

BASH = shutil.which("bash") or "/bin/bash"
_CHUNK = 1 << 16
_STDIN_HIGH_WATER = 1 << 20
KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL when a client goes away


def public_blob(key: str) -> bytes | None:
    """The public key blob of "KEYTYPE BASE64 [COMMENT]"; None if it is no key."""
    parts = key.split()
    if len(parts) < 2:
        return None
    try:
        return bytes(asyncssh.import_public_key(f"{parts[0]} {parts[1]}").public_data)
    except (asyncssh.KeyImportError, ValueError):
        return None  # a malformed key grants nothing, as on GCE


def authorized_keys(metadata: dict[str, Any] | None) -> frozenset[tuple[str, bytes]]:
    """(user, public key blob) for each "USER:KEYTYPE BASE64 [COMMENT]" line of ssh-keys."""
    out = set()
    for line in str((metadata or {}).get("ssh-keys", "")).splitlines():
        user, sep, key = line.strip().partition(":")
        blob = public_blob(key) if sep and user else None
        if blob is not None:
            out.add((user, blob))
    return frozenset(out)


_CLONE_NEWUTS, _CLONE_NEWNS = 0x04000000, 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def uts_preexec(name: str, hosts_file: str) -> Callable[[], None]:
    """In the child before exec: namespaces of its own with the host's hostname and an
    /etc/hosts that resolves every host of the node by name (as a TPU VM's DNS does;
    gloo, JAX's CPU collectives, looks its own hostname up), so that `hostname` and
    socket.gethostname() say what a TPU VM says. Needs root (as the fake runs in CI);
    elsewhere the command keeps the machine's name and only HOSTNAME says it."""
    encoded, hosts = name.encode(), hosts_file.encode()

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWUTS | _CLONE_NEWNS) != 0:
            return
        libc.sethostname(encoded, len(encoded))
        if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) == 0:
            libc.mount(hosts, b"/etc/hosts", None, _MS_BIND, None)

    return preexec


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class SshServer(asyncssh.SSHServer):
    """One connection to one host of a node: public-key auth only."""

    def __init__(self, node: NodeHosts):
        self.node = node
        self.host: Host | None = None
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.host = self.node.by_socket.get(tuple(conn.get_extra_info("sockname")[:2]))
        if self.host is None or not self.host.alive:
            conn.abort()  # the host vanished while this connection waited to be accepted
            return
        self.host.conns.add(conn)
        from podctl.fake.vm.host_counters import count

        count(self.node.node, "ssh_total", self.host.index)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.host is not None and self.conn is not None:
            self.host.conns.discard(self.conn)

    async def begin_auth(self, username: str) -> bool:
        latency = self.node.manager.latency
        if latency > 0:
            await asyncio.sleep(latency)  # a simulated network round trip per connection
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return (username, key.public_data) in self.node.authorized()

    def session_requested(self) -> ShellSession | bool:
        if self.host is None or not self.host.alive or self.conn is None:
            return False
        return ShellSession(self.host, self.conn.get_extra_info("username") or "")


class ShellSession(asyncssh.SSHServerSession[bytes]):
    """One exec (or shell) channel: a local bash in its own process group."""

    def __init__(self, host: Host, user: str):
        self.host, self.user = host, user
        self.chan: asyncssh.SSHServerChannel[bytes] | None = None
        self.command: str | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.pending: list[bytes] = []
        self.eof = False
        self.closed = False
        self.can_write = asyncio.Event()
        self.can_write.set()

    # ---- what the client asks for -------------------------------------------

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self.chan = chan

    def pty_requested(self, *args: object) -> bool:
        return False  # commands run without a terminal; podctl never asks for one

    def shell_requested(self) -> bool:
        return True

    def exec_requested(self, command: str) -> bool:
        self.command = command
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        return False

    def session_started(self) -> None:
        self.host.node.manager.track(asyncio.ensure_future(self._run()))

    def data_received(self, data: bytes, datatype: object) -> None:
        if self.proc is None:
            self.pending.append(data)
        else:
            self._feed(data)

    def eof_received(self) -> bool:
        self.eof = True
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
        return True  # keep the channel open for the command's output

    def signal_received(self, signame: str) -> None:
        sig = getattr(signal, f"SIG{signame}", None)
        if self.proc is not None and sig is not None:
            kill_group(self.proc.pid, sig)

    def break_received(self, msec: int) -> bool:
        return False

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def connection_lost(self, exc: Exception | None) -> None:
        """The client closed the channel or the connection went: end the command."""
        self.closed = True
        self.can_write.set()
        if self.proc is not None and self.proc.returncode is None:
            pid = self.proc.pid
            kill_group(pid, signal.SIGTERM)
            # a preempted host's commands have its whole notice; the manager's SIGKILL ends it
            grace = max(KILL_GRACE, self.host.grace)
            asyncio.get_running_loop().call_later(grace, kill_group, pid, signal.SIGKILL)

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc.pid, signal.SIGKILL)

    # ---- running the command ----------------------------------------------------

    async def _run(self) -> None:
        assert self.chan is not None
        chan = self.chan
        argv = [BASH, "-c", self.command] if self.command is not None else [BASH]
        try:
            env = self.host.environment(self.user, chan.get_environment())
            self.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, cwd=env["HOME"], env=env, start_new_session=True,
                preexec_fn=(uts_preexec(self.host.hostname, str(self.host.node.directory / "etc-hosts"))
                            if os.geteuid() == 0 else None))
        except OSError as e:
            message = f"fake host: cannot run bash: {e}\n".encode()  # `e` ends with the block

            def say_and_exit() -> None:
                chan.write_stderr(message)
                chan.exit(127)

            self._finish(say_and_exit)
            return
        self.host.sessions.add(self)
        from podctl.fake.vm.host_counters import count

        count(self.host.node.node, "sessions_total", self.host.index)
        try:
            if not self.host.alive:
                self.kill()  # the host vanished while bash was starting
            elif self.closed:
                self.connection_lost(None)  # so did the client
            for data in self.pending:
                self._feed(data)
            self.pending.clear()
            if self.eof and self.proc.stdin is not None:
                self.proc.stdin.close()
            assert self.proc.stdout is not None and self.proc.stderr is not None
            await asyncio.gather(self._pump(self.proc.stdout, chan.write),
                                 self._pump(self.proc.stderr, chan.write_stderr))
            code = await self.proc.wait()
        finally:
            self.host.sessions.discard(self)
        if code < 0:
            name = signal.Signals(-code).name[3:]
            self._finish(lambda: chan.exit_with_signal(name))
        else:
            self._finish(lambda: chan.exit(code))

    def _finish(self, action: Callable[[], object]) -> None:
        if self.closed:
            return
        with contextlib.suppress(OSError, asyncssh.Error):
            action()

    def _feed(self, data: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self.chan is not None
        stdin = self.proc.stdin
        if stdin.is_closing():
            return
        stdin.write(data)
        if stdin.transport.get_write_buffer_size() > _STDIN_HIGH_WATER:
            self.chan.pause_reading()
            self.host.node.manager.track(asyncio.ensure_future(self._drain_stdin()))

    async def _drain_stdin(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None and self.chan is not None
        with contextlib.suppress(OSError, ConnectionError):
            await self.proc.stdin.drain()
        if not self.closed:
            self.chan.resume_reading()

    async def _pump(self, reader: asyncio.StreamReader, write: Callable[[bytes], object]) -> None:
        """Copy one output pipe to the channel until EOF (as sshd does, it waits for
        every holder of the pipe, background children included)."""
        while data := await reader.read(_CHUNK):
            await self.can_write.wait()
            if self.closed:
                continue  # drain and drop, so the process is never blocked on a full pipe
            with contextlib.suppress(OSError, asyncssh.Error):
                write(data)

