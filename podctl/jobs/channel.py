"""How a run's requests reach its hosts' agents: the one seam between a Job and the hosts.

    start (every host's agent begins the run) · halt (SIGTERM to the script, SIGKILL
    after a grace) · stacks (every script's stacks into GCS) · close

`SshChannel` is the path every slice has: one SSH session per host (launch.py). A
stop for good is not a channel's business: it is the stop request in GCS
(run_files.request_stop), which every agent reads whatever the channel, and which a
halt is not (a halted attempt may be relaunched by `--recover`).
"""

from __future__ import annotations

from typing import Protocol

from podctl.jobs import launch, owner
from podctl.jobs.ssh import Fleet


class Channel(Protocol):
    name: str  # "ssh" or "boot": said in the run's record and its notices

    async def claim(self, run_id: str, slice_name: str) -> None:
        """Before anything is uploaded: the chips are free for RUN_ID (owner.py), or a
        channel whose hosts check it themselves says nothing here."""

    async def start(self, spec: launch.JobSpec, agent_sha: str, *, once: bool) -> None:
        """Every host's agent starts the run; returns once each host has it."""

    async def halt(self, run_id: str, grace_seconds: float | None = None) -> None:
        """SIGTERM RUN_ID's script on every host (SIGKILL after GRACE_SECONDS; None: the
        agent's own grace); best effort: a host that is gone has nothing to stop."""

    async def stacks(self, run_id: str) -> None:
        """Every host's agent captures its script's stacks into the run's stacks/ folder."""

    async def close(self) -> None: ...


class SshChannel:
    """Over SSH, one session per host (the fleet opens its connections on first use)."""

    name = "ssh"

    def __init__(self, fleet: Fleet):
        self.fleet = fleet

    async def _open(self) -> None:
        if not self.fleet.connections:
            await self.fleet.open()

    async def claim(self, run_id: str, slice_name: str) -> None:
        await self._open()
        await owner.wait_for_the_chips(self.fleet, run_id, slice_name)

    async def start(self, spec: launch.JobSpec, agent_sha: str, *, once: bool) -> None:
        await self._open()
        await launch.start_agents(self.fleet, spec, agent_sha, once=once)

    async def halt(self, run_id: str, grace_seconds: float | None = None) -> None:
        if self.fleet.connections:  # none open: nothing was started through this channel
            await launch.stop_agents(self.fleet, run_id, grace_seconds)

    async def stacks(self, run_id: str) -> None:
        if self.fleet.connections:
            await launch.ask_for_stacks(self.fleet, run_id)

    async def close(self) -> None:
        await self.fleet.close()
