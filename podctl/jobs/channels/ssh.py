"""The SSH channel: one SSH session per host (launch.py), the path every slice has.

The channel's seam itself (`Channel`, what each step means) is base.py's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from podctl.base.errors import HostKeyError, JobError, StoragePermissionError
from podctl.cloud.storage import Grant, Storage, gcloud_grant
from podctl.cloud.types import SliceInfo
from podctl.jobs import identity, launch, owner
from podctl.jobs.channels.base import Channel as Channel
from podctl.jobs.channels.base import HostAccess, Reach
from podctl.jobs.ssh import Fleet


class SshChannel:
    """Over SSH, one session per host (the fleet opens its connections on first use)."""

    name = "ssh"

    def __init__(self, fleet: Fleet, storage: Storage, info: SliceInfo, *,
                 grant: Grant = gcloud_grant,
                 who: Callable[[], Awaitable[str]] | None = None):
        self.fleet, self.storage, self.info = fleet, storage, info
        # who to log in as, asked when the first connection opens (OS Login imports the
        # key then: cloud/oslogin.py); None: the fleet's user
        self.who = who
        self.grant = grant  # the identity check's fix: gcloud's command, or the fake cloud's
        # Said after a host SSH cannot reach or that refuses the key, where another channel
        # could start the run without SSH (SshKind.open, from the registry's Reach).
        self.unreachable_hint: str | None = None

    async def _open(self) -> None:
        if not self.fleet.connections:
            if self.who is not None:
                self.fleet.user = await self.who()
            try:
                await self.fleet.open()
            except HostKeyError:
                raise  # a changed host key is no matter for another path
            except JobError as e:
                if self.unreachable_hint is None:
                    raise
                said = str(e) if str(e).endswith((".", "?")) else f"{e}."
                raise JobError(f"{said} {self.unreachable_hint}") from e

    async def claim(self, run_id: str, slice_name: str) -> None:
        await self._open()
        await owner.wait_for_the_chips(self.fleet, run_id, slice_name)

    async def _ask_worker_0(self, run_id: str) -> None:
        await identity.check_node_access(self.fleet, bucket=self.storage.bucket_name, run_id=run_id,
                                         slice_name=self.info.name, slice_type=self.info.accelerator_type,
                                         grant=self.grant)

    async def check_access(self, run_id: str) -> None:
        """Worker 0 writes, reads and deletes under the run's prefix with the nodes' token (identity.py)."""
        await self._open()
        try:
            await self._ask_worker_0(run_id)
        except StoragePermissionError:
            # GCS answers 403 for a bucket that does not exist too ("or it may not
            # exist"): a mistyped --bucket is no matter of the nodes' roles
            await self.storage.require_bucket()
            raise

    async def explain_silence(self, run_id: str) -> str | None:
        """Worker 0 asked again as before the start, so the line is the same one."""
        try:
            await self._ask_worker_0(run_id)
        except StoragePermissionError as e:
            return str(e)
        except Exception:  # noqa: BLE001 (no answer is no explanation: the silence is said as such)
            return None
        return None

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


class SshKind:
    """The registry's entry (channels/__init__.py): every slice takes it."""

    name = "ssh"
    needs_ssh = True
    carries_secrets = True

    def unusable(self, info: SliceInfo) -> str | None:
        return None

    async def answers(self, reach: Reach) -> str | None:
        return None  # the last resort of `auto`: a host SSH cannot reach says so when it opens

    def open(self, reach: Reach) -> SshChannel:
        access = reach.access
        channel = SshChannel(Fleet(reach.targets, access.private_key, access.pins, user=access.user),
                             reach.storage, reach.info, grant=reach.grant, who=access.who)
        if reach.without_ssh:
            other = reach.without_ssh[0]
            channel.unreachable_hint = (f"Or start it without SSH, through --via {other}: "
                                        f"`podctl run {reach.info.name} --via {other} ...`.")
        return channel

    async def signal(self, storage: Storage, info: SliceInfo, access: HostAccess,
                     run_ids: list[str], grace_seconds: float | None) -> bool:
        async with Fleet(launch.targets_for(info, access.ssh_port), access.private_key,
                         access.pins, user=await access.login()) as fleet:
            for run_id in run_ids:
                await launch.stop_agents(fleet, run_id, grace_seconds)
        return True


KIND = SshKind()
