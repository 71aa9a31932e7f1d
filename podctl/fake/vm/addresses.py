"""Where a fake host lives: its own loopback addresses, as a TPU VM has its own IPs.

All of 127.0.0.0/8 is loopback on Linux, so every fake host gets an internal address
of its own (127.A.B.C, A in 16..127: the node's `ipAddress`) and, on a node with
external IPs, an external one (A in 128..250: `accessConfig.externalIp`). It serves
SSH on port 22 on both, as a TPU VM does, when this process may bind it (root,
nothing else on 22); otherwise on one port shared by every host, which
`podctl fake status --json` reports as `ssh_port`. The metadata server takes port 80
(or one shared port) on the internal address only. What a host's scripts open binds
the internal address, so the external one answers on SSH alone: the default VPC's
firewall (tpu_vm/sitecustomize.py and fake/README.md say how far this goes). Where
only 127.0.0.1 is loopback (macOS), every host shares 127.0.0.1 and gets ports of its
own; the SSH port is then the endpoint's (`ssh_port` None), and internal and external
addresses are the same.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import socket

BACKLOG = 128
SSH_PORT = 22
METADATA_PORT = 80
TPU_RUNTIME_PORT = 8470  # what networkEndpoints[].port names on Google Cloud


EXTERNAL_NET = "127.128.0.0/9"  # fake hosts' external addresses; internal ones below it
EXTERNAL_FIRST = 128  # its first 127.A: internal addresses have A in 16..127


def is_external(address: str) -> bool:
    """Whether ADDRESS is a fake host's external address (in EXTERNAL_NET)."""
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(EXTERNAL_NET)
    except ValueError:
        return False


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


def bind_again(address: str, port: int) -> socket.socket:
    """A listening socket on ADDRESS:PORT again (a host's SSH after `no-ssh --off`)."""
    sock = _try_bind(address, port)
    if sock is None:
        raise OSError(f"cannot bind {address}:{port} again")
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
            got: int = sock.getsockname()[1]
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
        # 127.A.B.C with A in 16..127 (internal) or 128..250 (external), leaving 127.0.x.x
        # and 127.1.x.x to others
        self._next = {False: (16 + digest[0] % 112) << 16 | digest[1] << 8 | 1,
                      True: (EXTERNAL_FIRST + digest[2] % 123) << 16 | digest[3] << 8 | 1}
        # Decided now, so that `fake status` can say it before any host exists: 22 (80)
        # where this process may bind it, else a free port, the same on every address.
        self.ssh_port: int | None = None
        self.metadata_port: int | None = None
        if self.shared:
            probe = self._candidate()
            self.ssh_port = _probe_port(probe, SSH_PORT)
            self.metadata_port = _probe_port(probe, METADATA_PORT)

    def _candidate(self, external: bool = False) -> str:
        low, high = (EXTERNAL_FIRST, 250) if external else (16, EXTERNAL_FIRST - 1)
        while True:
            n = self._next[external]
            self._next[external] = n + 1
            a, b, c = n >> 16, (n >> 8) & 0xFF, n & 0xFF
            if low <= a <= high and 0 < c < 255:
                return f"127.{a}.{b}.{c}"
            if not low <= a <= high:
                self._next[external] = low << 16 | 1

    def take(self, wanted: str = "") -> tuple[str, socket.socket, socket.socket]:
        """Sockets for one host: on WANTED (its address before a restart) if free."""
        if not self.shared:
            ssh, meta = _try_bind("127.0.0.1", 0), _try_bind("127.0.0.1", 0)
            if ssh is None or meta is None:
                raise OSError("no free loopback port for a fake host")
            return "127.0.0.1", ssh, meta
        for attempt in range(4096):
            keep = wanted.startswith("127.") and wanted != "127.0.0.1" and not is_external(wanted)
            address = wanted if attempt == 0 and keep else self._candidate()
            got = self._bind_pair(address)
            if got is not None:
                return (address, *got)
        raise OSError("no free loopback address for a fake host")

    def take_external(self, wanted: str = "") -> tuple[str, socket.socket]:
        """An external address and its SSH socket (on WANTED if free); the macOS
        fallback has one address, so a port of its own on 127.0.0.1 there."""
        if not self.shared:
            ssh = _try_bind("127.0.0.1", 0)
            if ssh is None:
                raise OSError("no free loopback port for a fake host")
            return "127.0.0.1", ssh
        for attempt in range(4096):
            keep = is_external(wanted)
            address = wanted if attempt == 0 and keep else self._candidate(external=True)
            ssh = _try_bind(address, self.ssh_port or 0)
            if ssh is not None:
                return address, ssh
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
