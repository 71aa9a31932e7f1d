"""What each fake host has done, kept on the world's node (so it outlives the host: a
maintenance, a reboot): startup-scripts run, SSH connections accepted, commands run.
The admin API's `hosts` shows them. Apart from hosts.py so that boot.py and host_ssh.py,
which count, need not import the module that imports them."""

from __future__ import annotations

from typing import Any

COUNTERS = ("boots", "ssh_total", "sessions_total")


def count(node: dict[str, Any], counter: str, worker: int) -> None:
    """One more of COUNTER (COUNTERS) for WORKER, kept on the world's node: it outlives
    the host (a maintenance, a reboot) and goes with the node."""
    table = node.setdefault(f"_{counter}", {})
    table[str(worker)] = int(table.get(str(worker), 0)) + 1


def host_counters(node: dict[str, Any], worker: int) -> dict[str, int]:
    """{"worker": W, "boots": startup-scripts run, "ssh_total": SSH connections
    accepted, "sessions_total": commands (channels) run}."""
    return {"worker": worker, **{c: int((node.get(f"_{c}") or {}).get(str(worker), 0))
                                 for c in COUNTERS}}
