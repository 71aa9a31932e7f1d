"""A run's requests through the nodes' metadata and GCS: no SSH, no inbound connection.

    start: launch.json to GCS (the run-wide config, --env values included) -> one
           nodes.patch per node setting `podctl-run` to a pointer (bucket, object,
           hashes, the node's first host: no secrets), signed for that node, that
           slice's pin and an hour (pointer_sign.py) -> every host's watcher
           (host_watch.py, started by the slice's startup-script) checks it against
           the pin it kept at first boot (host_pin.py), fetches both, checks their
           hashes and starts the agent -> podctl waits for every host's first
           heartbeat in GCS
    halt:  control/halt.json (the agents poll control/ every agent_control.POLL_SECONDS)
    stacks: control/stacks.json, a fresh id per capture

On a Compute Engine slice (one node: its MIG) the pointer is written into each VM's own
metadata, in parallel (providers/compute_metadata.py: setMetadata with each VM's
fingerprint); a VM the MIG made again has only its template's map, and a recovery's
start writes the pointer again as every start does.

A slice carries a watcher when podctl made it (boot_script.boot_metadata, in every
create); `usable_on` says whether this podctl knows the watcher's version. A start
that does not come up says per host why, from what the watchers published as guest
attributes (podctl/watch, podctl/beat, podctl/run): booting (nothing said yet: the host
has not run its startup-script, which on big slices comes minutes after READY; waited
for up to vocabulary.boot_wait_seconds, the hosts named while podctl waits), failed (the
watcher could not start, and said why), dead (its beat is older than
vocabulary.WATCH_DEAD_SECONDS), refused (a hash, a GCS answer, a full disk), busy
(another run holds the chips).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable

from podctl.base.errors import JobError, PodctlError, SliceBusyError
from podctl.base.vocabulary import (
    WATCH_BEAT_SECONDS,
    WATCH_DEAD_SECONDS,
    boot_wait_seconds,
    pointer_valid_seconds,
)
from podctl.cloud.provider import SliceProvider
from podctl.cloud.storage import Grant, Storage, gcloud_grant
from podctl.cloud.types import GuestEntry, NodeInfo, SliceInfo
from podctl.host import run_layout
from podctl.jobs import boot_script, identity, launch, owner, pointer_sign, run_files
from podctl.jobs.channels.base import HostAccess, Reach
from podctl.jobs.ssh import Target

# From the patches to every host's agent beating: the metadata's propagation to the
# hosts (Google: "some time"; gcloud retries SSH for 50 s after its key's patch), the
# watcher's two GCS reads, the agent's start. Past it, the start fails, naming why.
START_SECONDS = 180.0
# While waiting: what the watchers said, this often (one getGuestAttributes per node), so
# that a refusal published within seconds (a full disk) is said within 15 s of the start
GUEST_CHECK_SECONDS = 10.0
FIRST_CHECK_SECONDS = 5.0  # the first look: a refusal (the nodes' account, a busy host) is said soon
SHOWN_HOSTS = 3  # hosts named in a line (then "and N more")
POLL_SECONDS = 1.0
# The watchers whose pointers this podctl writes (their BOOT_VERSION): a slice made by
# another version of podctl is started over SSH.
COMPATIBLE_BOOTS = frozenset({boot_script.BOOT_VERSION})
# A denial in podctl/roles older than the run is asked again by its watcher every beat:
# podctl waits this long for a word said after it looked (host_watch.check_roles)
ROLES_FRESH_SECONDS = 2 * WATCH_BEAT_SECONDS + 10.0
# claim: how long podctl waits for every watcher's podctl/chips said after it looked,
# where a host's words name another run (said with each beat)
CHIPS_FRESH_SECONDS = WATCH_BEAT_SECONDS + 10.0
ANSWER_POLL_SECONDS = 2.0  # auto, while a new slice's watchers boot: how often it looks
STATUS_EACH_WORKER = 16  # `status` asks worker by worker (to name who has no watcher) up to this many


def usable_on(info: SliceInfo) -> bool:
    """Every node of INFO carries a watcher this podctl can start runs through."""
    return bool(info.nodes) and all(n.boot_version in COMPATIBLE_BOOTS for n in info.nodes)


def unusable_why(info: SliceInfo) -> str | None:
    """Why INFO cannot take a run through its watchers, in a refusal's words; None: it can."""
    if usable_on(info):
        return None
    return (f"slice {info.name} carries no podctl watcher this version knows (made by another "
            "podctl, or not by podctl): start with --via ssh, or make it again with `podctl up`.")


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
    roles_fresh_seconds = ROLES_FRESH_SECONDS
    chips_fresh_seconds = CHIPS_FRESH_SECONDS
    guest_check_seconds = GUEST_CHECK_SECONDS
    first_check_seconds = FIRST_CHECK_SECONDS

    def __init__(self, api: SliceProvider, storage: Storage, *, parent: str, info: SliceInfo,
                 targets: list[Target], signer: pointer_sign.Signer,
                 grant: Grant = gcloud_grant,
                 notice: Callable[[str], None] | None = None):
        self.api, self.storage, self.parent = api, storage, parent
        self.signer = signer  # signs each node's pointer (the hosts accept only pinned keys)
        self.info = info
        self.grant = grant  # a denied node's fix: gcloud's command, or the fake cloud's
        self.nodes = first_hosts(info, targets)
        self.targets = targets
        self.notice = notice or (lambda text: None)  # the hosts still booting, while it waits
        # a host that has said nothing yet is booting, for up to this long (base/vocabulary.py)
        self.boot_seconds = boot_wait_seconds(len(info.hosts) or len(targets))
        self.beats: dict[int, str] = {}  # host -> its watcher's podctl/beat at the last look

    def _node_path(self, node: NodeInfo) -> str:
        return f"{self.parent}/nodes/{node.name}"

    async def claim(self, run_id: str, slice_name: str) -> None:
        """Before anything is uploaded: another run holding a host's chips is refused in
        owner.py's line, as over SSH. Each watcher says with every beat which runs' agents
        hold its host's chips (podctl/chips, owner.py's rule, a stopping run left out: the
        watchers wait for it to let go); where a host's words (that, or an agent's
        podctl/state not `done`) name another run, podctl waits up to
        CHIPS_FRESH_SECONDS for every host's word said after it looked (an agent killed a
        moment ago is no owner), and refuses if one still names a run. One
        getGuestAttributes per node a look; what this cannot see (a run started a moment
        ago) each watcher still says at the start (`busy`)."""
        asked, deadline = int(time.time()), time.monotonic() + self.chips_fresh_seconds
        while True:
            words = await self._chips_words()
            if words is None:
                return  # a node's words cannot be read or placed: the start says what is wrong
            named = {other for checked, held, state in words for other in held | state if other != run_id}
            if not named:
                return
            if all(checked >= asked for checked, _, _ in words):
                live = sorted(o for _, held, _ in words for o in held if o != run_id)
                if live:
                    raise SliceBusyError(owner.busy_line(slice_name, live[0]))
                return
            if time.monotonic() >= deadline:
                return  # a watcher that stopped beating: the start says it (dead)
            await asyncio.sleep(POLL_SECONDS * 2)

    async def _chips_words(self) -> list[tuple[int, set[str], set[str]]] | None:
        """Per host: (when its watcher's podctl/chips was said, host clock; the runs it
        names; the run its agent's podctl/state says is under way, if not done)."""
        found: list[tuple[int, set[str], set[str]]] = []
        for node, _ in self.nodes:
            try:
                placed = _placed(await self.api.guest_attributes(
                    self._node_path(node), f"{run_layout.GUEST_NAMESPACE}/"), len(node.hosts))
            except PodctlError:
                return None
            if placed is None:
                return None
            found.extend(chips_word(said) for said in placed)
        return found

    async def check_access(self, run_id: str) -> None:
        """Before anything is uploaded or patched: the bucket exists, the nodes' scopes (the
        API's record of the node) let them write to it, and their roles do, as the first
        node's worker 0 said in podctl/roles (host_watch.check_roles: identity.py's four
        calls on the pinned bucket, made before its watcher said `ready`). A denial is
        believed once said after this look (the watcher asks again every beat while denied,
        so a grant made just now is seen): up to roles_fresh_seconds. The run's host 0 asks
        again once the pointer is there (podctl/access, _raise_if_refused), for roles taken
        away since."""
        await self.storage.require_bucket()
        made = await self.api.placement(self.parent, self.info)
        access = identity.NodeAccess(email=made.service_account or "the default compute service account",
                                     scopes=made.scopes, refused="write", status=403, message="scope")
        if made.scopes and not access.can_write:  # none recorded: the API's defaults, judged on the host
            self._refuse(access)
        denial = await self._standing_denial()
        if denial is not None:
            self._refuse(denied_access(denial))

    def _refuse(self, access: identity.NodeAccess) -> None:
        error = identity.refusal_error(access, bucket=self.storage.bucket_name, slice_name=self.info.name,
                                       slice_type=self.info.accelerator_type, grant=self.grant)
        if error is not None:
            raise error

    async def _standing_denial(self) -> str | None:
        """The first node's worker 0's podctl/roles denial ("STEP STATUS PERMISSION EMAIL
        SCOPES"), once said after this call began; None: its roles let it, or it said
        nothing (a pin without a bucket, a watcher of its own mind), or no fresh word came."""
        node, _ = self.nodes[0]
        asked, deadline = int(time.time()), time.monotonic() + self.roles_fresh_seconds
        while True:
            try:
                placed = _placed(await self.api.guest_attributes(
                    self._node_path(node), f"{run_layout.GUEST_NAMESPACE}/"), len(node.hosts))
            except PodctlError:
                return None  # the start's own waits say what is wrong with the node
            said = parse_roles(placed[0].get("roles", "") if placed else "")
            if said is None or said[1] is None:
                return None
            checked, denial = said
            if checked >= asked:
                return denial
            if time.monotonic() >= deadline:
                return None  # a watcher that stopped asking: the start says what it is
            await asyncio.sleep(POLL_SECONDS * 2)

    async def explain_silence(self, run_id: str) -> str | None:
        """A host's agent that GCS refused says so in podctl/access (agent.py
        publish_refusal): the same line as check_access's. Else the silence is said as such."""
        for node, _ in self.nodes:
            try:
                said = await self.api.guest_attributes(self._node_path(node), f"{run_layout.GUEST_NAMESPACE}/")
            except PodctlError:
                continue
            for entries in said:
                word = _words(entries).get("access", "")
                if word.startswith(f"{run_id} "):
                    try:
                        self._refuse(denied_access(word[len(run_id) + 1:]))
                    except PodctlError as e:
                        return str(e)
        return None

    async def start(self, spec: launch.JobSpec, agent_sha: str, *, once: bool) -> None:
        """launch.json, then the pointers, then every host's first heartbeat. ONCE needs
        nothing more: a watcher starts a run id once only, and the same pointer again
        costs no call."""
        run_id = spec.run_id
        pins = self.pins()  # new_job asked first, before the bundle: this is the metadata now
        data = json.dumps(launch.launch_config(spec, self.targets, agent_sha), sort_keys=True).encode()
        launch_object = run_layout.launch_object(run_id)
        await self.storage.upload_bytes(launch_object, data, content_type="application/json")
        digest = hashlib.sha256(data).hexdigest()

        async def point(node: NodeInfo, first: int) -> None:
            pointer = self.signer.pointer({
                "run": run_id, "bucket": spec.bucket, "launch": launch_object,
                "sha256": digest, "agent_sha": agent_sha, "agent_object": run_layout.agent_object(agent_sha),
                "first_host": first, "access": run_layout.identity_check_object(run_id),
                "node": node.name, "pin": pins[node.name], "expires": expires})
            # Not waited for: the hosts' heartbeats are the proof, and a refused patch's
            # operation is read by the next write to the node.
            await self.api.set_metadata_key(self._node_path(node), run_layout.RUN_POINTER_KEY,
                                            pointer, current=node.metadata, wait=False)

        expires = int(time.time() + pointer_valid_seconds(len(self.targets)))
        await asyncio.gather(*(point(node, first) for node, first in self.nodes))
        await self._wait_started(run_id)

    def pins(self) -> dict[str, str]:
        """Node -> its pin's id, as its metadata shows it: JobError in one line where the
        node has no pin, or its pin does not hold this podctl's key (its watchers would
        refuse the pointer; they keep the pin they saw at first boot, whatever the metadata
        says now). Asked before anything of the run is made (steps.new_job)."""
        ours, found = self.signer.numbers, {}
        for node, _ in self.nodes:
            pin = pointer_sign.pin_of(node.metadata)
            if pin is None:
                raise JobError(f"slice {self.info.name} has no pin of the keys its watchers accept (made "
                               "by an older podctl): start the run with --via ssh.")
            if ours not in pin["keys"]:
                raise JobError(f"slice {self.info.name}'s pin (the keys whose runs its watchers accept, "
                               f"set at its creation) does not hold this podctl's key "
                               f"({self.signer.public_path}): start the run with --via ssh, or make the "
                               f"slice with `podctl up --trust-key {self.signer.public_path}`.")
            found[node.name] = pin["id"]
        return found

    async def _wait_started(self, run_id: str) -> None:
        """Until every host's agent beats. The watchers' words are read (one call per node)
        at first_check_seconds, then every guest_check_seconds, and at the deadline (then
        worker by worker where a node's answer leaves workers out, to name them). A
        refusal, a busy host, a failed watcher ends the wait at once, a dead one at the next
        look that finds the same old beat (a watcher starved of its CPU for a while, as 512
        fake hosts on two cores are, beats again); a host that has said nothing is booting
        (named while podctl waits) until boot_seconds. The start's own deadline,
        start_seconds, counts from the last look that found a host booting."""
        began = time.monotonic()
        next_check = began + self.first_check_seconds
        num_hosts, letting_go, booting_since, said_booting = len(self.targets), False, began, 0
        suspects: dict[int, str] = {}  # host -> the old beat that made it look dead
        while True:
            beating = await self._beating(run_id)
            if len(beating) >= num_hosts:
                return
            now = time.monotonic()
            late = now - booting_since > self.start_seconds + (owner.LET_GO_SECONDS if letting_go else 0.0)
            if late or now >= next_check:
                why = await self._why_not(run_id, beating, each_worker=late)
                # a relaunch in place: the hosts wait for the old run to let go, and so does podctl
                letting_go = letting_go or any(kind == "letting-go" for kind, _ in why.values())
                self._raise_if_refused(why)
                booting = sorted(h for h, (kind, _) in why.items() if kind == "booting")
                too_long = now - began >= self.boot_seconds
                if booting and not too_long:
                    booting_since, late = now, False
                    if len(booting) != said_booting:  # named again only when the count moves
                        said_booting = len(booting)
                        self.notice(self._booting_line(booting, now - began))
                fatal = FATAL | ({"booting"} if too_long else set())
                dead = {h for h, (kind, _) in why.items() if kind == "dead"}
                confirmed = {h for h in dead if suspects.get(h) == self.beats.get(h)}
                suspects = {h: self.beats.get(h, "") for h in dead}
                refused = {h: text for h, (kind, text) in why.items()
                           if kind in fatal and (kind != "dead" or h in confirmed or late)}
                if refused or late:
                    shown = refused or {h: text for h, (_, text) in why.items()}
                    kinds = {why[h][0] for h in shown if h in why}
                    raise JobError(self._not_started(run_id, shown, kinds, now - began))
                next_check = now + self.guest_check_seconds
            await asyncio.sleep(POLL_SECONDS)

    def _booting_line(self, booting: list[int], waited: float) -> str:
        """'waiting for 7 of 64 hosts to boot (host 0003, host 0011, host 0042 and 4 more):
        their startup-script has not run yet (12 s of up to 900 s)'."""
        named = ", ".join(f"host {h:04d}" for h in booting[:SHOWN_HOSTS])
        more = f" and {len(booting) - SHOWN_HOSTS} more" if len(booting) > SHOWN_HOSTS else ""
        return (f"waiting for {len(booting)} of {len(self.targets)} hosts to boot ({named}{more}): "
                f"their startup-script has not run yet ({waited:.0f} s of up to {self.boot_seconds:.0f} s)")

    def _not_started(self, run_id: str, shown: dict[int, str], kinds: set[str], waited: float) -> str:
        """The one line a start that did not come up ends with: the first hosts and why,
        and what to do, which depends on why."""
        lines = "; ".join(f"host {h:04d}: {w}" for h, w in sorted(shown.items())[:SHOWN_HOSTS])
        more = f" (and {len(shown) - SHOWN_HOSTS} more)" if len(shown) > SHOWN_HOSTS else ""
        if any(FULL_DISK in text for text in shown.values()):
            todo = (f"Free some space on that host's disk (`podctl exec {self.info.name} -- df -h ~`), "
                    "then run again.")
        elif kinds == {"booting"}:
            todo = (f"Not booted {waited:.0f} s after the start: try --via ssh, "
                    f"or make the slice again (`podctl down {self.info.name}`, `podctl up`).")
        else:
            todo = "Try --via ssh."
        return (f"run {run_id} did not start on {len(shown)} of {len(self.targets)} hosts through the "
                f"slice's watchers: {lines}{more}. {todo}")

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
                                       grant=self.grant)
        if error is not None:  # else not an identity matter after all: said with the others' words
            raise error

    async def _beating(self, run_id: str) -> set[int]:
        """The hosts whose agent has written a heartbeat or a status (it started, maybe ended)."""
        ended = {run_layout.host_of(o.name) for o in await self.storage.list(run_layout.status_prefix(run_id))}
        return set(await run_files.read_heartbeats(self.storage, run_id)) | ended

    async def _why_not(self, run_id: str, beating: set[int], *,
                       each_worker: bool) -> dict[int, tuple[str, str]]:
        """Per host not beating: what its watcher published (podctl/watch, podctl/beat,
        podctl/run), as _explain says it: one call per node, its answer placed by the
        watchers' podctl/worker words (_placed). An answer that cannot be placed is asked
        again worker by worker with EACH_WORKER (the diagnosis at the deadline only), else
        its hosts count as waiting."""
        why: dict[int, tuple[str, str]] = {}
        for node, first in self.nodes:
            waiting = [w for w in range(len(node.hosts)) if first + w not in beating]
            if not waiting:
                continue
            path, query = self._node_path(node), f"{run_layout.GUEST_NAMESPACE}/"
            try:
                placed = _placed(await self.api.guest_attributes(path, query), len(node.hosts))
                if placed is None and each_worker:
                    placed = [_words(entries) for entries in await self.api.guest_attributes(
                        path, query, workers=len(node.hosts))]
            except PodctlError as e:
                for w in waiting:
                    why[first + w] = ("waiting", f"waiting (its guest attributes could not be read: {e})")
                continue
            if placed is None:
                for w in waiting:
                    why[first + w] = ("waiting", "waiting (its node's guest attributes leave workers out)")
                continue
            now = time.time()  # the hosts' beats are on their clocks: NTP-close to this one
            for w in waiting:
                why[first + w] = _explain_words(run_id, placed[w], now)
                self.beats[first + w] = placed[w].get("beat", "")
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


# a start that will not come up by waiting longer
FATAL = frozenset({"denied", "refused", "busy", "failed", "dead"})
FULL_DISK = "No space left on device"  # strerror(ENOSPC), in a watcher's refusal


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


def chips_word(said: dict[str, str]) -> tuple[int, set[str], set[str]]:
    """One host's words for claim: (when its watcher's podctl/chips was said, host clock;
    the runs it names as holding the chips; the run its agent's podctl/state says is under
    way, if not done). A run the chips word names whose own agent on this host has since
    said `done` (podctl/state) is left out: the agent says it only once its script and every
    process it left have ended (agent.py main), so it holds no chips whatever the last beat
    said; else the next run after one that just ended waits up to a beat
    (WATCH_BEAT_SECONDS) for the watcher to say so."""
    checked, _, held = said.get("chips", "").partition(" ")
    other, _, state = said.get("state", "").partition(" ")
    done = bool(other) and state.startswith("done")
    holding = {r for r in held.split(",") if r not in ("", "-", "?") and not (done and r == other)}
    return (int(checked) if checked.isdigit() else 0, holding,
            {other} if other and state and not done else set())


def parse_roles(word: str) -> tuple[int, str | None] | None:
    """podctl/roles (host_watch.roles_word) -> (when it was checked, host clock; the denial
    "STEP STATUS PERMISSION EMAIL SCOPES", or None for ok and unknown); None: no word."""
    checked, _, rest = word.partition(" ")
    if not checked.isdigit() or not rest:
        return None
    return int(checked), (None if rest in ("ok", "unknown") else rest)


def _words(entries: list[GuestEntry]) -> dict[str, str]:
    """What one host's watcher published: key -> value (podctl/watch, podctl/run)."""
    return {e.key: e.value for e in entries if e.namespace == run_layout.GUEST_NAMESPACE}


def _placed(said: list[list[GuestEntry]], workers: int) -> list[dict[str, str]] | None:
    """Per worker, what its watcher published. getGuestAttributes names no worker: an
    answer with one list per worker is in worker order (as Google documents it); one that
    leaves out the hosts that said nothing (those still booting) is placed by each list's
    podctl/worker word; None when a list says no worker (a boot script's `failed` word) and
    so cannot be placed (then ask worker by worker)."""
    words = [_words(entries) for entries in said]
    if len(words) == workers:
        return words
    placed: list[dict[str, str]] = [{} for _ in range(workers)]
    for each in words:
        number = each.get("worker", "")
        if not number.isdigit() or int(number) >= workers or placed[int(number)]:
            return None
        placed[int(number)] = each
    return placed


def beat_age(said: dict[str, str], now: float) -> float | None:
    """Seconds since a watcher's last podctl/beat (its host's clock against NOW); None
    when it has written none or an unreadable one."""
    try:
        return max(0.0, now - float(said["beat"]))
    except (KeyError, ValueError):
        return None


def _watcher(said: dict[str, str], now: float) -> tuple[str, str] | None:
    """What a host's watcher itself is, when that is why it will not start a run: (booting,
    failed or dead, in words); None for a live one."""
    if not said:
        return "booting", ("booting (podctl's watcher has said nothing: the host has not run its "
                           "startup-script yet)")
    watch = said.get("watch", "")
    if watch.startswith("failed"):
        return "failed", f"its watcher could not start: {watch[len('failed'):].strip()}"
    age = beat_age(said, now)
    if "watch" in said and age is not None and age > WATCH_DEAD_SECONDS:
        return "dead", (f"its watcher is dead (its last beat {age:.0f} s ago; "
                        "`podctl exec NAME -- cat ~/.podctl/watch/watch.log` shows why)")
    return None


def _explain(run_id: str, entries: list[GuestEntry], now: float | None = None) -> tuple[str, str]:
    """_explain_words of a host's guest attributes."""
    return _explain_words(run_id, _words(entries), time.time() if now is None else now)


def _explain_words(run_id: str, said: dict[str, str], now: float) -> tuple[str, str]:
    """A host's watcher's words about RUN_ID -> (kind: denied (GCS denied the nodes'
    account: its podctl/access word), refused, busy, letting-go (another run was asked to
    stop and has not ended yet), started, booting (nothing said yet), failed (the watcher
    could not start), dead (its beat is old), or waiting; what to tell the user). NOW: the
    time the beats are read against."""
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
    state_of_watcher = _watcher(said, now)
    if state_of_watcher is not None:
        return state_of_watcher
    if "watch" not in said:
        return "waiting", "waiting (its watcher has not said it is ready yet)"
    return "waiting", f"waiting (watcher {said['watch']}; the run's pointer not seen yet)"


async def watcher_states(api: SliceProvider, parent: str, info: SliceInfo) -> dict[str, list[str]]:
    """Node -> per worker, what its watcher says: "ready", "ready, RUN started" (its last
    run), "dead, last beat N s ago" (its beat older than WATCH_DEAD_SECONDS), "failed:
    WHY" (it could not start), "booting" (nothing said, the node younger than the boot
    wait) or "none" (nothing said, older); {} for a slice without podctl's watcher or not
    ready. One getGuestAttributes per node; a node whose attributes cannot be read is left out."""
    if not info.ready or not all(n.boot_version for n in info.nodes):
        return {}
    boot_seconds = boot_wait_seconds(len(info.hosts))

    def state(said: dict[str, str], node: NodeInfo, now: float) -> str:
        found = _watcher(said, now)
        if found is None:
            return "ready" + (f", {said['run']}" if said.get("run") else "")
        kind, _ = found
        if kind == "booting":  # the API has no READY time: the node's age stands for it
            return "booting" if now - node.created < boot_seconds else "none"
        if kind == "dead":
            return f"dead, last beat {beat_age(said, now):.0f} s ago"
        return "failed: " + said.get("watch", "")[len("failed"):].strip()

    async def one(node: NodeInfo) -> tuple[str, list[str]] | None:
        workers = len(node.hosts)
        try:
            # Worker by worker only where an answer that leaves workers out costs few calls
            said = await api.guest_attributes(f"{parent}/nodes/{node.name}",
                                             f"{run_layout.GUEST_NAMESPACE}/",
                                             workers=workers if workers <= STATUS_EACH_WORKER else None)
        except PodctlError:
            return None
        now = time.time()
        placed = _placed(said, workers)
        if placed is None:  # whose entries are whose cannot be told: counted, not placed
            states = sorted(state(_words(entries), node, now) for entries in said)
            return node.name, states + [state({}, node, now)] * (workers - len(said))
        return node.name, [state(words, node, now) for words in placed]

    found = await asyncio.gather(*(one(n) for n in info.nodes))
    return dict(f for f in found if f is not None)


class BootKind:
    """The registry's entry (channels/__init__.py): a slice podctl made, its watchers alive."""

    name = "boot"
    needs_ssh = False
    carries_secrets = False  # launch.json is in GCS, the pointer in the nodes' metadata

    def unusable(self, info: SliceInfo) -> str | None:
        return unusable_why(info)

    async def answers(self, reach: Reach) -> str | None:
        """None when every host's watcher said `ready` and beats (one getGuestAttributes
        per node); while some are booting (a slice just made: the node younger than the
        boot wait) and none is dead or failed, waited for, looked at every
        ANSWER_POLL_SECONDS; else why not."""
        if not _pinned_for(reach):  # its watchers would refuse this client's pointers
            return (f"slice {reach.info.name}'s pin does not hold this podctl's key "
                    "(made by another client without --trust-key)")
        said_waiting = False
        while True:
            states = await watcher_states(reach.api, reach.parent, reach.info)
            said = [w for node in reach.info.nodes for w in states.get(node.name, [])]
            if len(said) == len(reach.info.hosts) > 0 and all(w.startswith("ready") for w in said):
                return None
            booting = sum(w == "booting" for w in said)
            others = [w for w in said if w != "booting" and not w.startswith("ready")]
            if not booting or others or len(said) != len(reach.info.hosts):
                if len(said) != len(reach.info.hosts):
                    return f"slice {reach.info.name}'s watchers did not answer (its nodes not ready)"
                shown = "not booted within the boot wait" if others[0] == "none" else others[0]
                return (f"{len(others)} of {len(reach.info.hosts)} hosts' watchers are not ready "
                        f"({shown})")
            if not said_waiting:
                said_waiting = True
                reach.notice(f"waiting for {booting} of {len(reach.info.hosts)} hosts' watchers to boot "
                             f"(up to {boot_wait_seconds(len(reach.info.hosts)):.0f} s from the slice's creation)")
            await asyncio.sleep(ANSWER_POLL_SECONDS)

    def open(self, reach: Reach) -> BootChannel:
        channel = BootChannel(reach.api, reach.storage, parent=reach.parent, info=reach.info,
                              targets=reach.targets, signer=_signer(reach), grant=reach.grant,
                              notice=reach.notice)
        channel.pins()  # a slice whose watchers would refuse this client: said before the bundle
        return channel

    async def signal(self, storage: Storage, info: SliceInfo, access: HostAccess,
                     run_ids: list[str], grace_seconds: float | None) -> bool:
        """The halt request each run's agents read from GCS (as BootChannel.halt): no SSH."""
        for run_id in run_ids:
            body = {"grace": grace_seconds, "by": "podctl", "requested": time.time()}
            await storage.upload_bytes(run_layout.halt_request_object(run_id),
                                       json.dumps(body).encode(), content_type="application/json")
        return False


def _signer(reach: Reach) -> pointer_sign.Signer:
    if reach.config_dir is None:
        raise JobError("a run through the watchers needs podctl's config directory (its signing key)")
    return pointer_sign.Signer.load(reach.config_dir)


def _pinned_for(reach: Reach) -> bool:
    """Every node's pin (its metadata, as made at creation) holds this client's key."""
    if reach.config_dir is None:
        return False
    ours = _signer(reach).numbers
    pins = [pointer_sign.pin_of(node.metadata) for node in reach.info.nodes]
    return bool(pins) and all(pin is not None and ours in pin["keys"] for pin in pins)


KIND = BootKind()
