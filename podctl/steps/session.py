"""One Session: what every step needs, opened once — the settings, the slice provider
(cloud/provider.py: the Cloud TPU API today, chosen from the providers' registry),
GCS (per bucket), the SSH key and the host-key pins, the ports a job uses, and who to
log in to a slice's hosts as (OS Login's user where the project turns it on).

The CLI, the Python API and the queue's tick each open one (`Session.open(settings)`)
and pass it down; tests and notebooks on an in-process fake build one around its
clients (`Session(settings, api, ports=...)`), so no daemon is started for them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from functools import partial

from podctl.base.settings import Settings
from podctl.cloud.connect import fake_running as fake_running  # the Python API: start/stop it
from podctl.cloud.connect import job_ports, oslogin_client, storage_endpoint
from podctl.cloud.connect import stop_fake as stop_fake
from podctl.cloud.oslogin import login_user
from podctl.cloud.provider import SliceProvider, open_provider
from podctl.cloud.sshkey import SSH_USER, SshKey, ensure_ssh_key
from podctl.cloud.storage import Storage
from podctl.cloud.types import SliceInfo
from podctl.jobs import channels
from podctl.jobs.channels.base import HostAccess
from podctl.jobs.ssh import HostPins, pins_for


class Session:
    def __init__(self, settings: Settings, api: SliceProvider | None = None, *,
                 ports: tuple[int | None, int] | None = None,
                 storages: dict[str, Storage] | None = None):
        self.settings = settings
        self._api = api  # None: connected on first use (`podctl ckpt` needs GCS only)
        # (SSH port, JAX coordinator port) of the cloud this session talks to; None: ask
        # the settings (22 and 8476 on Google Cloud, the fake daemon's). A session on an
        # in-process fake (tests, notebooks) gives its own.
        self.ports = ports
        self.storages: dict[str, Storage] = dict(storages or {})  # bucket -> its client
        self._key: SshKey | None = None

    @classmethod
    def open(cls, settings: Settings) -> Session:
        """Connect now (the fake backend starts its daemon here), so a bad setting or a
        cloud that does not answer is said before anything else is done."""
        if settings.via is not None:  # a channel no registry line names (PODCTL_VIA)
            channels.checked(settings.via, settings.via_from)
        return cls(settings, open_provider(settings))

    def at(self, *, project: str, zone: str, bucket: str) -> Session:
        """This session for another project, zone and bucket (the queue's entries name
        their own): the same clients, key and ports, so a tick opens each only once.
        Closing it closes the shared clients: close the session it came from instead."""
        other = Session(dataclasses.replace(self.settings, project=project, zone=zone, bucket=bucket),
                        self._api, ports=self.ports)
        other.storages = self.storages  # shared, not copied: one GCS client per bucket
        other._key = self._key
        return other

    @property
    def api(self) -> SliceProvider:
        """The slice provider (whatever makes this session's slices)."""
        if self._api is None:
            self._api = open_provider(self.settings)
        return self._api

    @property
    def storage(self) -> Storage:
        """GCS of the session's own bucket (a one-line error when none is set)."""
        return self.storage_for(self.settings.require_bucket())

    def storage_for(self, bucket: str) -> Storage:
        """GCS for BUCKET, one client per bucket for the session's life."""
        if bucket not in self.storages:
            self.storages[bucket] = Storage.connect(bucket, endpoint=storage_endpoint(self.settings))
        return self.storages[bucket]

    def job_ports(self) -> tuple[int | None, int]:
        if self.ports is None:
            self.ports = job_ports(self.settings)
        return self.ports

    def ssh_key(self) -> SshKey:
        if self._key is None:
            self._key = ensure_ssh_key(self.settings.config_dir)
        return self._key

    def pins(self, info: SliceInfo) -> HostPins:
        """The host keys first seen on this very slice (its project, zone, name, birth)."""
        return pins_for(self.settings.config_dir, info)

    async def ssh_user(self, info: SliceInfo) -> str:
        """Who to log in to INFO's hosts as: with OS Login on for them (and not turned off
        by PODCTL_OSLOGIN=off), the POSIX username OS Login gives podctl's key, imported
        now; else podctl's own user, whose key `up` put in the nodes' ssh-keys."""
        if not self.settings.oslogin:
            return SSH_USER
        user = await login_user(oslogin_client(self.settings, self.api), info, self.ssh_key().public_key)
        return user or SSH_USER

    def host_access(self, info: SliceInfo) -> HostAccess:
        return HostAccess(self.ssh_key().private_path, self.pins(info), self.job_ports()[0],
                          who=partial(self.ssh_user, info))

    def close_api(self) -> None:
        """Close the slice provider's connections only (a session that shares another's
        GCS clients leaves them to that one)."""
        if self._api is not None:
            with contextlib.suppress(Exception):
                self._api.close()

    def close(self) -> None:
        """Close the HTTP connections. They are keep-alive: the fake's single-threaded
        GCS emulator would otherwise wait on them when asked to stop."""
        for storage in list(self.storages.values()):  # taken whole: a loop thread may add one
            with contextlib.suppress(Exception):
                storage.client._http.close()
        if self._api is not None:
            with contextlib.suppress(Exception):
                self._api.close()
