"""The fake cloud's one rule about addresses: it listens on this machine only."""

from __future__ import annotations

import ipaddress

from podctl.base.errors import FakeCloudError


def require_loopback(host: str) -> None:
    """The fake cloud never listens beyond this machine: no auth guards its servers."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise FakeCloudError(f"the fake cloud binds to loopback only (127.0.0.1), not {host!r}")
