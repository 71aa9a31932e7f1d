"""A run's requests through the nodes' metadata and GCS: no SSH, no inbound connection.

    start: launch.json to GCS (the run-wide config, --env values included) -> one
           nodes.patch per node setting `podctl-run` to a pointer (bucket, object,
           hashes, the node's first host: no secrets) -> every host's watcher
           (host_watch.py, started by the slice's startup-script) fetches both,
           checks their hashes and starts the agent -> podctl waits for every
           host's first heartbeat in GCS
    halt:  control/halt.json (the agents poll control/ every agent_control.POLL_SECONDS)
    stacks: control/stacks.json, a fresh id per capture

A slice carries a watcher when podctl made it (boot_script.boot_metadata, in every
create); `usable_on` says whether this podctl knows the watcher's version. A start
that does not come up says per host why, from what the watchers published as guest
attributes (podctl/watch, podctl/run): no watcher, refused (a hash, a GCS answer),
busy (another run holds the chips).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid

from podctl.cloud import node_metadata
from podctl.cloud.tpu_client import TpuApi
from podctl.cloud.types import GuestEntry, NodeInfo, SliceInfo
from podctl.errors import JobError, PodctlError, SliceBusyError
from podctl.jobs import boot_script, identity, launch, owner, run_files, run_layout
from podctl.jobs.ssh import Target
from podctl.storage import Storage

# From the patches to every host's agent beating: the metadata's propagation to the
# hosts (Google: "some time"; gcloud retries SSH for 50 s after its key's patch), the
# watcher's two GCS reads, the agent's start. Past it, the start fails, naming why.
START_SECONDS = 180.0
GUEST_CHECK_SECONDS = 20.0  # while waiting: what the watchers said, at most this often
FIRST_CHECK_SECONDS = 5.0  # the first look: a refusal (the nodes' account, a busy host) is said soon
# A host where no watcher ever said a word this long after the pointers were written will
# not start by waiting longer (its startup-script did not run, or guest attributes are
# off): the start fails then rather than at START_SECONDS. (A watcher on a slice just
# made writes its first word within seconds of its boot; a slice is READY by then.)
NO_WATCHER_SECONDS = START_SECONDS / 2  # 90 s
POLL_SECONDS = 1.0
# The watchers whose pointers this podctl writes (their BOOT_VERSION): a slice made by
# another version of podctl is started over SSH.
COMPATIBLE_BOOTS = frozenset({boot_script.BOOT_VERSION})
POINTER_VERSION = 1
STATUS_EACH_WORKER = 16  # `status` asks worker by worker (to name who has no watcher) up to this many


def usable_on(info: SliceInfo) -> bool:
    """Every node of INFO carries a watcher this podctl can start runs through."""
    return bool(info.nodes) and all(n.boot_version in COMPATIBLE_BOOTS for n in info.nodes)


def first_hosts(info: SliceInfo, targets: list[Target]) -> list[tuple[NodeInfo, int]]:
    """Each node with the run's index of its worker 0 (a watcher's host is that index plus
    its own worker number): the targets are the slice's hosts in node order."""
    out, position = [], 0
    for node in info.nodes:
        for worker, host in enumerate(node.hosts):
            target = targets[position + worker]
            if target.worker != host.worker or host.worker != worker:
                raise JobError(f"node {node.name}'s hosts are not in worker order; start the run "
                               "with --via ssh.")
        out.append((node, position))
        position += len(node.hosts)
    if position != len(targets):
        raise JobError(f"slice {info.name} has {len(targets)} hosts but its nodes list {position}")
    return out


class BootChannel:
    """Through the nodes' metadata (one patch per node) and the run's control objects."""

    name = "boot"

    start_seconds = START_SECONDS
    no_watcher_seconds = NO_WATCHER_SECONDS
    guest_check_seconds = GUEST_CHECK_SECONDS
    first_check_seconds = FIRST_CHECK_SECONDS

    def __init__(self, api: TpuApi, storage: Storage, *, parent: str, info: SliceInfo,
                 targets: list[Target], fake: bool = False):
        self.api, self.storage, self.parent = api, storage, parent
        self.info = info
        self.fake = fake  # the fake backend: a denied node's fix is `podctl fake grant`
        self.nodes = first_hosts(info, targets)
        self.targets = targets

    def _node_path(self, node: NodeInfo) -> str:
        return f"{self.parent}/nodes/{node.name}"

    async def claim(self, run_id: str, slice_name: str) -> None:
        """Nothing to do from here: each watcher checks its host's chips before it starts the
        agent (owner.py's rule) and says `busy` when another run holds them."""

    async def check_access(self, run_id: str) -> None:
        """The bucket exists. The nodes' access is asked on the host, once the pointer is
        there: the run's host 0 makes identity.py's four calls with its node's token, and a
        denial (podctl/access) ends the start in identity's line (_raise_if_refused)."""
        await self.storage.require_bucket()

    async def explain_silence(self, run_id: str) -> str | None:
        """No host to ask without SSH: the silence is said as such."""
        return None

    async def start(self, spec: launch.JobSpec, agent_sha: str, *, once: bool) -> None:
        """launch.json, then the pointers, then every host's first heartbeat. ONCE needs
        nothing more: a watcher starts a run id once only, and the same pointer again
        costs no call."""
        run_id = spec.run_id
        data = json.dumps(launch.launch_config(spec, self.targets, agent_sha), sort_keys=True).encode()
        launch_object = run_layout.launch_object(run_id)
        await self.storage.upload_bytes(launch_object, data, content_type="application/json")
        digest = hashlib.sha256(data).hexdigest()

        async def point(node: NodeInfo, first: int) -> None:
            pointer = json.dumps({
                "v": POINTER_VERSION, "run": run_id, "bucket": spec.bucket, "launch": launch_object,
                "sha256": digest, "agent_sha": agent_sha, "agent_object": run_layout.agent_object(agent_sha),
                "first_host": first, "access": run_layout.identity_check_object(run_id)},
                sort_keys=True, separators=(",", ":"))
            # Not waited for: the hosts' heartbeats are the proof, and a refused patch's
            # operation is read by the next write to the node.
            await node_metadata.set_key(self.api, self._node_path(node), run_layout.RUN_POINTER_KEY,
                                        pointer, current=node.metadata, wait=False)

        await asyncio.gather(*(point(node, first) for node, first in self.nodes))
        await self._wait_started(run_id)

    async def _wait_started(self, run_id: str) -> None:
        """Until every host's agent beats. The watchers' words are read (one call per node)
        only when no new host began beating for guest_check_seconds, and at the deadline
        (then worker by worker where a node's answer leaves workers out, to name them).
        A refusal, a busy host, or (past no_watcher_seconds) a host with no watcher ends
        the wait at once."""
        began = time.monotonic()
        next_check = began + self.first_check_seconds
        num_hosts, seen, letting_go = len(self.targets), 0, False
        while True:
            beating = await self._beating(run_id)
            if len(beating) >= num_hosts:
                return
            now = time.monotonic()
            if len(beating) > seen:  # progress: nothing to diagnose yet
                seen, next_check = len(beating), now + self.guest_check_seconds
            late = now - began > self.start_seconds + (owner.LET_GO_SECONDS if letting_go else 0.0)
            if late or now >= next_check:
                why = await self._why_not(run_id, beating, each_worker=late)
                # a relaunch in place: the hosts wait for the old run to let go, and so does podctl
                letting_go = letting_go or any(kind == "letting-go" for kind, _ in why.values())
                self._raise_if_refused(why)
                fatal = FATAL | ({"none"} if now - began >= self.no_watcher_seconds else set())
                refused = {h: text for h, (kind, text) in why.items() if kind in fatal}
                if refused or late:
                    shown = refused or {h: text for h, (_, text) in why.items()}
                    lines = "; ".join(f"host {h:04d}: {w}" for h, w in sorted(shown.items())[:3])
                    more = f" (and {len(shown) - 3} more)" if len(shown) > 3 else ""
                    raise JobError(f"run {run_id} did not start on {len(shown)} of {num_hosts} hosts "
                                   f"through the slice's watchers: {lines}{more}. Try --via ssh.")
                next_check = now + self.guest_check_seconds
            await asyncio.sleep(POLL_SECONDS)

    def _raise_if_refused(self, why: dict[int, tuple[str, str]]) -> None:
        """A host is busy with another run (SliceBusyError), or host 0's watcher found GCS
        denying the nodes' account (StoragePermissionError): each in the line the SSH path
        says (owner.py; identity.py: the account, what is missing, the fix)."""
        busy = next((text for kind, text in why.values() if kind == "busy"), None)
        if busy is not None:  # the line the SSH path's claim says (owner.py)
            raise SliceBusyError(owner.busy_line(self.info.name, (busy.split() or ["another run"])[0]))
        word = next((text for kind, text in why.values() if kind == "denied"), None)
        if word is None:
            return
        error = identity.refusal_error(denied_access(word), bucket=self.storage.bucket_name,
                                       slice_name=self.info.name, slice_type=self.info.accelerator_type,
                                       fake=self.fake)
        if error is not None:  # else not an identity matter after all: said with the others' words
            raise error

    async def _beating(self, run_id: str) -> set[int]:
        """The hosts whose agent has written a heartbeat or a status (it started, maybe ended)."""
        ended = {run_layout.host_of(o.name) for o in await self.storage.list(run_layout.status_prefix(run_id))}
        return set(await run_files.read_heartbeats(self.storage, run_id)) | ended

    async def _why_not(self, run_id: str, beating: set[int], *,
                       each_worker: bool) -> dict[int, tuple[str, str]]:
        """Per host not beating: what its watcher published (podctl/watch, podctl/run), as
        _explain says it. A node's answer that leaves workers out cannot say whose entries
        are whose: with EACH_WORKER its workers are asked one by one, else its hosts count
        as waiting (the call per worker is for the diagnosis at the deadline only)."""
        why: dict[int, tuple[str, str]] = {}
        for node, first in self.nodes:
            waiting = [w for w in range(len(node.hosts)) if first + w not in beating]
            if not waiting:
                continue
            try:
                said = await node_metadata.guest_attributes(self.api, self._node_path(node),
                                                            f"{run_layout.GUEST_NAMESPACE}/",
                                                            workers=len(node.hosts) if each_worker else None)
            except PodctlError as e:
                for w in waiting:
                    why[first + w] = ("waiting", f"waiting (its guest attributes could not be read: {e})")
                continue
            if not said:  # no host of the node ever published a word: none has a watcher
                said = [[] for _ in node.hosts]
            elif len(said) != len(node.hosts):
                for w in waiting:
                    why[first + w] = ("waiting", "waiting (its node's guest attributes leave workers out)")
                continue
            for w in waiting:
                why[first + w] = _explain(run_id, said[w])
        return why

    async def halt(self, run_id: str, grace_seconds: float | None = None) -> None:
        body = {"grace": grace_seconds, "by": "podctl", "requested": time.time()}
        await self.storage.upload_bytes(run_layout.halt_request_object(run_id),
                                        json.dumps(body).encode(), content_type="application/json")

    async def stacks(self, run_id: str) -> None:
        await self.storage.upload_bytes(run_layout.stacks_request_object(run_id),
                                        json.dumps({"id": uuid.uuid4().hex}).encode(),
                                        content_type="application/json")

    async def close(self) -> None:
        """No connections to close."""


FATAL = frozenset({"denied", "refused", "busy"})  # a start that will not come up by waiting longer


def denied_access(word: str) -> identity.NodeAccess:
    """podctl/access's "STEP STATUS PERMISSION EMAIL SCOPES" (host_watch.denial_word) ->
    what identity.refusal reads; scopes are the short names the watcher could fit."""
    parts = word.split(" ", 4) + [""] * 5
    step, status, permission, email, scopes = parts[:5]
    return identity.NodeAccess(
        email="" if email == "-" else email,
        scopes=tuple(f"{identity.SCOPE_PREFIX}{s}" for s in scopes.split(",") if s and s != "-"),
        refused=step or None, status=int(status) if status.isdigit() else 0,
        message=f"Permission '{permission}' denied" if permission else "")


def _words(entries: list[GuestEntry]) -> dict[str, str]:
    """What one host's watcher published: key -> value (podctl/watch, podctl/run)."""
    return {e.key: e.value for e in entries if e.namespace == run_layout.GUEST_NAMESPACE}


def _explain(run_id: str, entries: list[GuestEntry]) -> tuple[str, str]:
    """A host's watcher's words about RUN_ID -> (kind: denied (GCS denied the nodes'
    account: its podctl/access word), refused, busy, letting-go (another run was asked to
    stop and has not ended yet), started, none or waiting; what to tell the user)."""
    said = _words(entries)
    if said.get("access", "").startswith(f"{run_id} "):
        return "denied", said["access"][len(run_id) + 1:]
    run = said.get("run", "")
    if run.startswith(f"{run_id} "):
        state = run[len(run_id) + 1:]
        if state.startswith("refused"):
            return "refused", state
        if state.startswith("busy"):
            return "busy", state[5:]
        if state.startswith("letting-go"):
            return "letting-go", f"waiting for run {state[11:]} to let go of its chips (it was asked to stop)"
        return "started", "its watcher started the agent, which has written nothing to GCS yet"
    if "watch" not in said:
        return "none", ("no watcher answers (its startup-script did not run or its watcher died; "
                        "`podctl exec NAME -- cat ~/.podctl/watch/watch.log` shows why)")
    return "waiting", f"waiting (watcher {said['watch']}; the run's pointer not seen yet)"


async def watcher_states(api: TpuApi, parent: str, info: SliceInfo) -> dict[str, list[str]]:
    """Node -> per worker, what its watcher says: "ready", "ready, RUN started" (its last
    run), or "none" (no watcher answers); {} for a slice without podctl's watcher or not
    ready. One getGuestAttributes per node; a node whose attributes cannot be read is left out."""
    if not info.ready or not all(n.boot_version for n in info.nodes):
        return {}

    async def one(node: NodeInfo) -> tuple[str, list[str]] | None:
        workers = len(node.hosts)
        try:
            # Worker by worker only where an answer that leaves workers out costs few calls
            said = await node_metadata.guest_attributes(api, f"{parent}/nodes/{node.name}",
                                                        f"{run_layout.GUEST_NAMESPACE}/",
                                                        workers=workers if workers <= STATUS_EACH_WORKER else None)
        except PodctlError:
            return None
        if len(said) != workers:  # whose entries are whose cannot be told: counted, not placed
            ready = sum(1 for entries in said if "watch" in _words(entries))
            return node.name, ["ready"] * ready + ["none"] * (workers - ready)
        states = []
        for entries in map(_words, said):
            if "watch" not in entries:
                states.append("none")
            else:
                states.append("ready" + (f", {entries['run']}" if entries.get("run") else ""))
        return node.name, states

    found = await asyncio.gather(*(one(n) for n in info.nodes))
    return dict(f for f in found if f is not None)
