"""How a run's requests reach its hosts' agents: the one seam between a Job and the hosts.

    claim (the chips are free) · check_access (the nodes may use the bucket) · start
    (every host's agent begins the run) · halt (SIGTERM to the script, SIGKILL after a
    grace) · stacks (every script's stacks into GCS) · explain_silence · close

`SshChannel` is the path every slice has: one SSH session per host (launch.py). A
stop for good is not a channel's business: it is the stop request in GCS
(run_files.request_stop), which every agent reads whatever the channel, and which a
halt is not (a halted attempt may be relaunched by `--recover`).
"""

from __future__ import annotations

from typing import Protocol

from podctl.cloud.types import SliceInfo
from podctl.errors import HostKeyError, JobError, StoragePermissionError
from podctl.jobs import identity, launch, owner
from podctl.jobs.ssh import Fleet
from podctl.storage import Storage


class Channel(Protocol):
    name: str  # "ssh" or "boot": said in the run's record and its notices

    async def claim(self, run_id: str, slice_name: str) -> None:
        """Before anything is uploaded: the chips are free for RUN_ID (owner.py), or a
        channel whose hosts check it themselves says nothing here."""

    async def check_access(self, run_id: str) -> None:
        """Before anything is uploaded for the hosts: the bucket exists, and (where the
        channel can ask a host) the nodes' account may use it; StoragePermissionError
        naming the account and the fix if not."""

    async def start(self, spec: launch.JobSpec, agent_sha: str, *, once: bool) -> None:
        """Every host's agent starts the run; returns once each host has it."""

    async def halt(self, run_id: str, grace_seconds: float | None = None) -> None:
        """SIGTERM RUN_ID's script on every host (SIGKILL after GRACE_SECONDS; None: the
        agent's own grace); best effort: a host that is gone has nothing to stop."""

    async def stacks(self, run_id: str) -> None:
        """Every host's agent captures its script's stacks into the run's stacks/ folder."""

    async def explain_silence(self, run_id: str) -> str | None:
        """Why the hosts went quiet mid-run, if it is GCS refusing the nodes' account (the
        line check_access would say); None: no explanation (the silence is said as such)."""

    async def close(self) -> None: ...


class SshChannel:
    """Over SSH, one session per host (the fleet opens its connections on first use)."""

    name = "ssh"

    def __init__(self, fleet: Fleet, storage: Storage, info: SliceInfo, *, fake: bool = False):
        self.fleet, self.storage, self.info = fleet, storage, info
        self.fake = fake  # the fake backend: the identity check's fix is `podctl fake grant`
        # Said after a host SSH cannot reach or that refuses the key, where the slice's
        # watchers could start the run without SSH (steps/runs.new_job sets it).
        self.unreachable_hint: str | None = None

    async def _open(self) -> None:
        if not self.fleet.connections:
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
                                         fake=self.fake)

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
