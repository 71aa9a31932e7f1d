"""Where a fake host lives: its own loopback address, as a TPU VM has its own IP.

All of 127.0.0.0/8 is loopback on Linux, so every fake host gets an address of its
own (127.A.B.C) and serves SSH on port 22 there, as a TPU VM does, when this process
may bind it (root, nothing else on 22); otherwise on one port shared by every host,
which `podctl fake status --json` reports as `ssh_port`. The metadata server takes
port 80 (or one shared port) on the same addresses. Where only 127.0.0.1 is
loopback (macOS), every host shares 127.0.0.1 and gets ports of its own; the SSH
port is then the endpoint's (`ssh_port` None), and settings take it from there.
"""

from __future__ import annotations

import errno
import hashlib
import socket

BACKLOG = 128
SSH_PORT = 22
METADATA_PORT = 80
TPU_RUNTIME_PORT = 8470  # what networkEndpoints[].port names on Google Cloud


def _try_bind(address: str, port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError:
        sock.close()
        return None
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def many_loopbacks() -> bool:
    """True where 127.0.0.2 can be bound (Linux), False where only 127.0.0.1 can (macOS)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.2", 0))
        return True
    except OSError as e:
        return e.errno != errno.EADDRNOTAVAIL
    finally:
        sock.close()


def _probe_port(address: str, port: int) -> int:
    for wanted in (port, 0):
        sock = _try_bind(address, wanted)
        if sock is not None:
            got = sock.getsockname()[1]
            sock.close()
            return got
    raise OSError(f"cannot bind {address}")


class AddressPlan:
    """Hands out (address, SSH socket, metadata socket) per host, never the same twice.

    SEED (the hosts root) picks where in 127.0.0.0/8 this fake cloud starts looking,
    so that two fake clouds on one machine rarely try the same addresses; an address
    whose ports are taken (by another fake cloud) is skipped."""

    def __init__(self, seed: str):
        self.shared = many_loopbacks()
        digest = hashlib.sha256(seed.encode()).digest()
        # 127.A.B.C with A in 16..250, leaving 127.0.x.x and 127.1.x.x to others
        self._next = (16 + digest[0] % 234) << 16 | digest[1] << 8 | 1
        # Decided now, so that `fake status` can say it before any host exists: 22 (80)
        # where this process may bind it, else a free port, the same on every address.
        self.ssh_port: int | None = None
        self.metadata_port: int | None = None
        if self.shared:
            probe = self._candidate()
            self.ssh_port = _probe_port(probe, SSH_PORT)
            self.metadata_port = _probe_port(probe, METADATA_PORT)

    def _candidate(self) -> str:
        while True:
            n = self._next
            self._next = (self._next + 1) & 0xFFFFFF
            a, b, c = n >> 16, (n >> 8) & 0xFF, n & 0xFF
            if a >= 16 and 0 < c < 255:
                return f"127.{a}.{b}.{c}"
            if a < 16:
                self._next = 16 << 16 | 1

    def take(self, wanted: str = "") -> tuple[str, socket.socket, socket.socket]:
        """Sockets for one host: on WANTED (its address before a restart) if free."""
        if not self.shared:
            ssh, meta = _try_bind("127.0.0.1", 0), _try_bind("127.0.0.1", 0)
            if ssh is None or meta is None:
                raise OSError("no free loopback port for a fake host")
            return "127.0.0.1", ssh, meta
        for attempt in range(4096):
            keep = wanted.startswith("127.") and wanted != "127.0.0.1"
            address = wanted if attempt == 0 and keep else self._candidate()
            got = self._bind_pair(address)
            if got is not None:
                return (address, *got)
        raise OSError("no free loopback address for a fake host")

    def _bind_pair(self, address: str) -> tuple[socket.socket, socket.socket] | None:
        ssh = _try_bind(address, self.ssh_port or 0)
        if ssh is None:
            return None
        meta = _try_bind(address, self.metadata_port or 0)
        if meta is None:
            ssh.close()
            return None
        return ssh, meta
