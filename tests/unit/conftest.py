"""The unit tier: no fake cloud, no subprocess, no network. `.ci/run` runs it first and
stops at its first failure, so a one-line change hears back in a minute or two.

Held here, not by convention: every test of this folder runs with process creation and
sockets refused (an OSError naming the rule). A test that needs either belongs in
tests/fake (the library against an in-process fake) or tests/e2e (the CLI, hosts, JAX).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest


def _refused(what: str) -> Any:
    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise OSError(f"tests/unit may not {what}: move the test to tests/fake or tests/e2e")
    return refuse


@pytest.fixture(autouse=True)
def _no_processes_no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(subprocess.Popen, "__init__", _refused("start a process"))
    monkeypatch.setattr(os, "fork", _refused("fork"))
    monkeypatch.setattr(os, "posix_spawn", _refused("start a process"))
    monkeypatch.setattr(asyncio, "create_subprocess_exec", _refused("start a process"))
    monkeypatch.setattr(asyncio, "create_subprocess_shell", _refused("start a process"))
    monkeypatch.setattr(socket.socket, "bind", _refused("open a server (a fake cloud)"))
    monkeypatch.setattr(socket.socket, "connect", _refused("connect to a server"))
    yield
