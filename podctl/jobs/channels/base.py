"""What every channel is: the one seam between a Job and the hosts (`Channel`), what a
channel is given to reach them (`Reach`), and a kind of channel as the registry holds it
(`ChannelKind`: its name, what it needs of the slice, how it opens).

    claim (the chips are free) · check_access (the nodes may use the bucket) · start
    (every host's agent begins the run) · halt (SIGTERM to the script, SIGKILL after a
    grace) · stacks (every script's stacks into GCS) · explain_silence · close

A stop for good is not a channel's business: it is the stop request in GCS
(run_files.request_stop), which every agent reads whatever the channel, and which a
halt is not (a halted attempt may be relaunched by `--recover`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from podctl.cloud.sshkey import SSH_USER
from podctl.cloud.storage import Grant, Storage, gcloud_grant
from podctl.cloud.types import SliceInfo
from podctl.jobs import launch
from podctl.jobs.ssh import HostPins, Target

if TYPE_CHECKING:
    from podctl.cloud.provider import SliceProvider


@dataclass(frozen=True)
class HostAccess:
    """How to reach a slice's hosts: the SSH key, the host-key pins, the SSH port, and
    the user (podctl's own, or OS Login's POSIX username: cloud/oslogin.py)."""

    private_key: Path
    pins: HostPins
    ssh_port: int | None
    user: str = SSH_USER
    # asked at connection time instead of USER, so that an OS Login import that fails
    # fails inside the SSH step, which a stop survives by asking through GCS
    who: Callable[[], Awaitable[str]] | None = None

    async def login(self) -> str:
        return await self.who() if self.who is not None else self.user


@dataclass(frozen=True)
class Reach:
    """Everything a channel may use to reach a run's hosts; each kind takes what it needs
    (SSH: ACCESS; the watchers: the API, PARENT and the nodes)."""

    api: SliceProvider
    storage: Storage
    parent: str  # projects/P/locations/Z
    info: SliceInfo
    access: HostAccess
    # a denied node's fix: gcloud's command, or the fake cloud's (chosen with the backend)
    grant: Grant = gcloud_grant
    notice: Callable[[str], None] = lambda text: None
    # where this client's pointer-signing key lives (jobs/pointer_sign.py): the watchers
    # start only runs signed by a key pinned at the slice's creation
    config_dir: Path | None = None
    # the registered channels that reach these hosts without SSH (the registry fills it):
    # said after a host SSH cannot reach
    without_ssh: tuple[str, ...] = ()

    @property
    def targets(self) -> list[Target]:
        return launch.targets_for(self.info, self.access.ssh_port)


class Channel(Protocol):
    name: str  # its kind's name: said in the run's record (`via`) and its notices

    async def claim(self, run_id: str, slice_name: str) -> None:
        """Before anything is uploaded: the chips are free for RUN_ID (owner.py);
        SliceBusyError when another run holds them."""

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


class ChannelKind(Protocol):
    """A way to reach a slice's hosts, as the registry (channels/__init__.py) holds it."""

    name: str
    needs_ssh: bool  # the slice's VPC must admit SSH from here (cloud/firewall.check_run)
    # may carry a secret to the hosts (--build-on host's signing key): over SSH, never
    # through GCS or the metadata, which others may read
    carries_secrets: bool

    def unusable(self, info: SliceInfo) -> str | None:
        """Why INFO cannot take a run this way, in words for a refusal; None: it can."""

    async def answers(self, reach: Reach) -> str | None:
        """For `auto`: None when the slice's hosts answer this way now; else why not, in
        words for auto's one line (a kind may wait a while for hosts still booting)."""

    def open(self, reach: Reach) -> Channel:
        """A channel for one run on REACH's slice (nothing is connected yet)."""

    async def signal(self, storage: Storage, info: SliceInfo, access: HostAccess,
                     run_ids: list[str], grace_seconds: float | None) -> bool:
        """SIGTERM RUN_IDS (runs this process does not follow: `podctl stop`, a budget,
        the queue) on every host of INFO -> True when the hosts were asked directly, False
        when they read it from GCS within their poll (the caller waits that much longer)."""
