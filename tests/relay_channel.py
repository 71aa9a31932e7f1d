"""A stand-in channel for tests/e2e/test_channel_registry.py: what a new channel is, one
module with a `KIND` (jobs/channels/base.py's ChannelKind) and one registry line.

`relay` reaches the hosts as SSH does (it wraps the SSH channel: a real run on real fake
hosts), and writes down every step the Job and the stop asked of it, so the test sees
that the run went through it and through nothing else."""

from __future__ import annotations

from podctl.cloud.types import SliceInfo
from podctl.jobs import launch
from podctl.jobs.channels import ssh
from podctl.jobs.channels.base import HostAccess, Reach
from podctl.cloud.storage import Storage

ASKED: list[str] = []  # every step asked of a relay channel or of the kind, in order


class RelayChannel:
    name = "relay"

    def __init__(self, inner: ssh.SshChannel):
        self.inner = inner

    async def claim(self, run_id: str, slice_name: str) -> None:
        ASKED.append("claim")
        await self.inner.claim(run_id, slice_name)

    async def check_access(self, run_id: str) -> None:
        ASKED.append("check_access")
        await self.inner.check_access(run_id)

    async def start(self, spec: launch.JobSpec, agent_sha: str, *, once: bool) -> None:
        ASKED.append("start")
        await self.inner.start(spec, agent_sha, once=once)

    async def halt(self, run_id: str, grace_seconds: float | None = None) -> None:
        ASKED.append("halt")
        await self.inner.halt(run_id, grace_seconds)

    async def stacks(self, run_id: str) -> None:
        ASKED.append("stacks")
        await self.inner.stacks(run_id)

    async def explain_silence(self, run_id: str) -> str | None:
        return await self.inner.explain_silence(run_id)

    async def close(self) -> None:
        ASKED.append("close")
        await self.inner.close()


class RelayKind:
    name = "relay"
    needs_ssh = True
    carries_secrets = False

    def unusable(self, info: SliceInfo) -> str | None:
        return None if len(info.hosts) == 1 else f"relay takes one-host slices; {info.name} has {len(info.hosts)}"

    async def answers(self, reach: Reach) -> str | None:
        return None

    def open(self, reach: Reach) -> RelayChannel:
        ASKED.append("open")
        return RelayChannel(ssh.KIND.open(reach))

    async def signal(self, storage: Storage, info: SliceInfo, access: HostAccess,
                     run_ids: list[str], grace_seconds: float | None) -> bool:
        ASKED.append("signal")
        return await ssh.KIND.signal(storage, info, access, run_ids, grace_seconds)


KIND = RelayKind()
