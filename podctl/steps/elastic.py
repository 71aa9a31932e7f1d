"""Elastic multislice (`podctl run --recover N --elastic`): a K-slice run that loses a
slice goes on on the survivors instead of waiting for all K to be made again, and
grows back to K when the lost slice answers again.

In data-parallel multislice every slice holds the whole training state, so the
survivors have all of it: each host keeps its copy in the template's local tier
(templates/local_ckpt.py), and the relaunch on the K-1 survivors (MEGASCALE_* renumbered
by host/host_config.py) restores from there, with no GCS restore on the way.

    a host fails (JAX ends the survivors for a lost peer) -> the fail-fast ends once every
        host still silent takes no SSH connection (gone_check), not after its 45 s
    attempt ends (the infrastructure) -> which slices answer (one SSH `true` per host)
        all of them                  -> today's recovery (relaunch in place, or make again)
        none, or 1 slice of 1        -> today's recovery, said in one line
        fewer than --min-slices      -> wait (no step) for lost slices to answer again
        the rest                     -> relaunch on the survivors (PODCTL_ELASTIC_SLICES=K:
                                        the template keeps the global batch by accumulation)
    while on fewer than K: the lost slices are asked every POLL seconds; one that answers
    again ends the attempt with SIGTERM (the template saves at the next step) and the run
    relaunches on every slice that answers, until the deadline (then it stays smaller).

A multislice queued resource (one for all K, `multisliceParams`) that loses a slice to a
preemption is suspended whole (the API has one state per queued resource): no survivor,
the whole re-create. `up --elastic` makes K single-slice queued resources instead
(cloud/create.py): a preempted one is suspended alone, the others train on, and the lost
slice is asked for again on its own in the background (`:reset` of its SUSPENDED queued
resource: the same tier, node spec and validity window), until it answers, its window
closes (FAILED), or the deadline (--grow-deadline). Past the deadline, at the run's end,
and under SIGINT/SIGTERM/SIGHUP, a request still pending is deleted (Requests.withdraw):
nothing queued or billing is left for a slice no run will use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from podctl.base.errors import NotFoundError, SliceDeletedError, UsageError
from podctl.base.signals import stop_signals_ignored
from podctl.cloud.types import SliceInfo
from podctl.jobs.answering import answering_hosts
from podctl.jobs.job import GoneCheck, Job, RunResult
from podctl.steps.runs import Notice, signal_stop
from podctl.steps.session import Session

# The template reads these (templates/train_pjit.py): the run's full slice count, and
# whether the global batch shrinks with the slices.
FULL_SLICES_ENV = "PODCTL_ELASTIC_SLICES"
BATCH_ENV = "PODCTL_ELASTIC_BATCH"
# During a fail-fast, a host that has not taken an SSH connection this long is gone (a
# live sshd answers in well under a second; a preempted host's, never)
GONE_ANSWER_SECONDS = 5.0


@dataclass(frozen=True)
class ElasticPolicy:
    min_slices: int = 1  # below it the run waits for lost slices, no step on fewer
    shrink_batch: bool = False  # the global batch shrinks with the slices (default: kept)
    grow_deadline: float = 6 * 3600.0  # after this long, lost slices are no longer asked for
    poll_seconds: float = 10.0  # how often a lost slice is asked whether it answers

    def check(self, num_slices: int) -> None:
        if not 1 <= self.min_slices <= num_slices:  # one slice: --min-slices 1 only
            raise UsageError(f"--min-slices {self.min_slices}: the run has {num_slices} "
                             f"slice{'' if num_slices == 1 else 's'}; "
                             f"give 1 to {num_slices}.")

    def env(self, num_slices: int) -> dict[str, str]:
        return {FULL_SLICES_ENV: str(num_slices), BATCH_ENV: "shrink" if self.shrink_batch else "keep"}


def slice_ids(info: SliceInfo) -> list[int]:
    return sorted({h.slice_index for h in info.hosts})


def serving_slices(info: SliceInfo) -> set[int]:
    """The slices of INFO whose node is READY, by the cloud's word alone (no host asked):
    what the queue's tick, which asks no host, goes by."""
    return info.ready_slices


def never_back(info: SliceInfo, lost: set[int]) -> set[int]:
    """Of LOST, the slices of an elastic slice (one queued resource each) that can no
    longer come back: their request FAILED (its window closed), is being deleted, or is
    gone. None for any other slice (a lost host may answer again)."""
    if not info.members:
        return set()
    asked = {m.index for m in info.members if m.state not in ("FAILED", "DELETING")}
    return lost - asked


def on_slices(info: SliceInfo, ids: set[int]) -> SliceInfo:
    """INFO with only the nodes of slices IDS (their hosts keep their slice index:
    host_config renumbers them)."""
    return replace(info, nodes=tuple(n for n in info.nodes
                                     if n.hosts and n.hosts[0].slice_index in ids))


async def answering_slices(session: Session, info: SliceInfo, ids: set[int] | None = None) -> set[int]:
    """The slices (of IDS, default all) whose node is READY and every host answers."""
    ids = set(slice_ids(info)) if ids is None else ids
    ready = on_slices(info, ids)
    ready = replace(ready, nodes=tuple(n for n in ready.nodes if n.state == "READY"))
    if not ready.nodes:
        return set()
    answered = await answering_hosts(ready, session.host_access(ready))
    hosts = ready.hosts
    return {i for i in slice_ids(ready)
            if all(p in answered for p, h in enumerate(hosts) if h.slice_index == i)}


def gone_check(session: Session, on: SliceInfo) -> GoneCheck:
    """Which of the hosts (positions in ON) take no SSH connection now: what a
    fail-fast need not wait for (a host whose processes only died still answers)."""
    access = session.host_access(on)

    async def gone(hosts: set[int]) -> set[int]:
        return hosts - await answering_hosts(on, access, timeout=GONE_ANSWER_SECONDS, only=hosts)

    return gone


@dataclass(frozen=True)
class Shrink:
    """Where the next attempt runs: SLICES of the full run's (all of them: grown back)."""

    info: SliceInfo  # the full slice as described now, narrowed to SLICES
    slices: set[int]
    lost: set[int]


def _named(ids: set[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))


class Requests:
    """The background requests for an elastic slice's lost slices (SliceInfo.members:
    one queued resource per slice; a slice without members has none to make)."""

    def __init__(self, session: Session, notice: Notice) -> None:
        self.session, self.notice = session, notice
        self.pending: dict[str, int] = {}  # queued resource asked for again -> its slice

    async def ask(self, current: SliceInfo, lost: set[int]) -> None:
        """Ask again for each lost slice whose queued resource is SUSPENDED (one still
        SUSPENDING is asked at the next poll: the API resets only SUSPENDED); stop asking
        for one whose window closed (FAILED)."""
        parent = self.session.settings.parent
        for member in current.members:
            if member.index not in lost:
                continue
            if member.state == "SUSPENDED":
                await self.session.api.ask_again(parent, member.name)
                self.pending[member.name] = member.index
                self.notice(f"elastic: asking for slice {member.index} of {current.name} again on its "
                            f"own (queued resource {member.name}: its tier and window kept)")
            elif member.state == "FAILED":
                self.pending.pop(member.name, None)
                self.notice(f"elastic: the request for slice {member.index} of {current.name} failed "
                            f"({current.error or 'FAILED'}): deleting {member.name}, no longer asked for")
                await self.session.api.stop_asking(parent, member.name)

    def answered(self, live: set[int]) -> None:
        """Slices LIVE answer: their requests are done."""
        self.pending = {name: i for name, i in self.pending.items() if i not in live}

    async def withdraw(self, why: str, current: SliceInfo | None = None, lost: set[int] | None = None) -> None:
        """Delete the requests still pending (and, with CURRENT, every lost slice's queued
        resource: the deadline), a signal unable to cut it short."""
        names = dict(self.pending)
        if current is not None and lost:
            names.update({m.name: m.index for m in current.members if m.index in lost})
        self.pending = {}
        if not names:
            return
        with stop_signals_ignored():
            for name, index in sorted(names.items()):
                self.notice(f"elastic: deleting the request for slice {index} ({name}): {why}")
                await self.session.api.stop_asking(self.session.settings.parent, name)


async def plan(session: Session, full: SliceInfo, policy: ElasticPolicy, notice: Notice,
               requests: Requests | None = None) -> Shrink | None:
    """After an attempt of FULL ended for the infrastructure: the slices to go on on,
    or None for today's recovery (every slice answers, or none does), said in one line.
    Below POLICY.min_slices this waits for lost slices to answer again."""
    k = full.num_slices
    if k < 2:
        notice(f"elastic: {full.name} has one slice, none to go on on: making it again as without --elastic")
        return None
    try:
        current = await session.api.describe(session.settings.parent, full.name)
    except Exception:  # noqa: BLE001 - gone: today's recovery makes it again
        notice(f"elastic: {full.name} is gone: making all {k} slices again")
        return None
    live = await answering_slices(session, current)
    if len(live) == k:
        return None
    if not live:
        notice(f"elastic: no slice of {full.name} answers ({current.state}): making all {k} "
               "slices again")
        return None
    requests = requests or Requests(session, notice)
    await requests.ask(current, set(range(k)) - live)
    deadline = time.monotonic() + policy.grow_deadline
    said = False
    while len(live) < policy.min_slices:
        never = never_back(current, set(range(k)) - live)
        if time.monotonic() > deadline or k - len(never) < policy.min_slices:
            await requests.withdraw("past --grow-deadline", current, set(range(k)) - live)
            why = (f"the request for slice {_named(never)} failed" if never and k - len(never)
                   < policy.min_slices else "past the deadline")
            notice(f"elastic: {len(live)} of {k} slices answer, below --min-slices "
                   f"{policy.min_slices}, {why}: making all {k} again")
            return None
        if not said:
            said = True
            notice(f"elastic: {len(live)} of {k} slices of {full.name} answer (lost: slice "
                   f"{_named(set(range(k)) - live)}), below --min-slices {policy.min_slices}: "
                   "waiting, no step, for a lost slice to answer again")
        await asyncio.sleep(policy.poll_seconds)
        try:
            current = await session.api.describe(session.settings.parent, full.name)
        except NotFoundError as e:  # `podctl down` while it waited: never made again
            raise SliceDeletedError(f"slice {full.name} was deleted (by `podctl down` or another "
                                    "delete) while the run waited for its lost slices: not "
                                    "making it again") from e
        live = await answering_slices(session, current)
        await requests.ask(current, set(range(k)) - live)
    lost = set(range(k)) - live
    requests.answered(live)
    if lost:
        notice(f"elastic: slice {_named(lost)} of {full.name} lost; going on on the {len(live)} "
               f"that answer (slice {_named(live)}) from their local state")
    return Shrink(on_slices(current, live), live, lost)


GrowBack = Callable[[Awaitable[RunResult], Job], Awaitable[RunResult]]


def grow_watch(session: Session, full: SliceInfo, shrink: Shrink, policy: ElasticPolicy,
               since: float, notice: Notice, back: set[int], requests: Requests | None = None) -> GrowBack:
    """Wraps the follow of an attempt on SHRINK's slices: every POLL seconds until the
    deadline (from SINCE, the loss), ask the lost slices (and ask again for those whose
    queued resource was suspended: REQUESTS); when one answers again, note it in BACK and
    end the attempt with SIGTERM (the template checkpoints at the next step), for the run
    to relaunch on every slice that answers. Past the deadline the requests are deleted."""
    requests = requests or Requests(session, notice)

    async def poll(past: bool) -> set[int]:
        """One look at the lost slices: those that answer again (none past the deadline,
        where only a slice with a queued resource per slice has requests to delete)."""
        if past:
            notice(f"elastic: slice {_named(shrink.lost)} of {full.name} not back within "
                   f"{policy.grow_deadline / 3600:.2g} h: no longer asked for; going on on "
                   f"{len(shrink.slices)}")
            if full.members or requests.pending:
                current = await session.api.describe(session.settings.parent, full.name)
                await requests.withdraw("past --grow-deadline", current, shrink.lost)
            return set()
        current = await session.api.describe(session.settings.parent, full.name)
        returned = await answering_slices(session, current, shrink.lost)
        requests.answered(returned)
        await requests.ask(current, shrink.lost - returned)
        return returned

    async def watched(follow: Awaitable[RunResult], job: Job) -> RunResult:
        task = asyncio.ensure_future(follow)
        given_up = False
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=policy.poll_seconds)
                if done:
                    return task.result()
                if given_up:
                    continue
                past = time.time() - since > policy.grow_deadline
                try:
                    returned = await poll(past)
                except Exception:  # noqa: BLE001 - asked again at the next poll (a deletion ends the attempt)
                    continue
                given_up = past
                if returned:
                    back.update(returned)
                    notice(f"elastic: slice {_named(returned)} of {full.name} answers again; "
                           "growing back at the next step (a checkpoint first)")
                    await job.channel.halt(job.run_id)
                    return await task
        except BaseException:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise

    return watched


async def grow(session: Session, full: SliceInfo, notice: Notice) -> Shrink:
    """After a grow-back stop: every slice of FULL that answers now (LOST: those that do not)."""
    current = await session.api.describe(session.settings.parent, full.name)
    live = await answering_slices(session, current)
    lost = set(range(full.num_slices)) - live
    notice(f"elastic: growing back to {len(live)} of {full.num_slices} slices of {full.name}")
    return Shrink(on_slices(current, live), live, lost)


Wrap = Callable[[Awaitable[RunResult], Job, SliceInfo], Awaitable[RunResult]]


class ElasticRun:
    """An elastic run's state across its attempts, for steps/recovery.py: the full slice,
    the slices the present attempt runs on, and lost slices seen back. With no POLICY (a
    run without --elastic) it changes nothing."""

    def __init__(self, session: Session, full: SliceInfo, policy: ElasticPolicy | None,
                 notice: Notice) -> None:
        self.session, self.full, self.policy, self.notice = session, full, policy, notice
        if policy is not None:
            policy.check(full.num_slices)
            if full.num_slices < 2:  # said now, not first at a loss hours later
                notice(f"elastic: {full.name} is one slice, none to go on on at a loss: a lost "
                       "slice is made again, as without --elastic")
            elif full.kind == "queued-resource" and not full.members:
                notice(f"elastic: {full.name} is one queued resource for its {full.num_slices} "
                       "slices, suspended whole if one is preempted (`up --elastic` makes one "
                       "per slice)")
        self.requests = Requests(session, notice)  # lost slices asked for again
        self.shrink: Shrink | None = None  # on fewer than every slice: which
        self.lost_at = 0.0  # when those were lost (the grow-back deadline runs from there)
        self.back: set[int] = set()  # lost slices that answered again during the attempt

    def wrap(self, wrap: Wrap | None) -> Wrap | None:
        """WRAP, with the lost-host check (a fail-fast ends once the hosts it waits for
        take no SSH connection: `gone_check`), and on fewer slices than the run's, the
        grow-back watch around it."""
        if self.policy is None or self.full.num_slices < 2:
            return wrap
        shrink, policy = self.shrink, self.policy
        watch = None if shrink is None or not shrink.lost else grow_watch(
            self.session, self.full, shrink, policy, self.lost_at, self.notice, self.back,
            self.requests)

        def watched(follow: Awaitable[RunResult], job: Job, on: SliceInfo) -> Awaitable[RunResult]:
            job.gone = gone_check(self.session, on)
            inner = wrap(follow, job, on) if wrap else follow
            return watch(inner, job) if watch else inner

        return watched

    def options_env(self, env: dict[str, str]) -> dict[str, str]:
        """A run's environment with what the template reads of an elastic run (every
        attempt's: the full slice count, whether the batch shrinks)."""
        return env if self.policy is None else {**env, **self.policy.env(self.full.num_slices)}

    async def regrown(self, ended_badly: bool) -> SliceInfo | None:
        """Where the next attempt runs when podctl ended this one to grow back (None: it
        did not, or no slice answers now: the attempt's end is judged as any other)."""
        back, self.back = self.back, set()
        if not back or not ended_badly:
            return None
        try:
            grown = await grow(self.session, self.full, self.notice)
        except NotFoundError:  # deleted meanwhile (`podctl down`): judged as any other end
            return None
        if not grown.slices:
            return None
        self.requests.answered(grown.slices)
        self.shrink = grown if grown.lost else None
        return grown.info

    async def after_loss(self, judged_elsewhere: bool, ended: str | None = None) -> SliceInfo | None:
        """Where the next attempt runs after the infrastructure ended this one (run id
        ENDED): the surviving slices, or None for today's recovery (JUDGED_ELSEWHERE: a
        maintenance or podctl's own stop, which recovery handles as before). A survivor
        whose script outlived the slice's death (one that does not end for a lost peer,
        as JAX does) is asked to stop, so that the relaunch waits for it to let go."""
        if judged_elsewhere or self.policy is None:
            self.shrink = None
            return None
        shrunk = await plan(self.session, self.full, self.policy, self.notice, self.requests)
        if shrunk is not None and shrunk.lost and (self.shrink is None or shrunk.lost != self.shrink.lost):
            self.lost_at = time.time()
        self.shrink = shrunk if shrunk is not None and shrunk.lost else None
        if shrunk is not None and ended is not None:
            try:
                await signal_stop(self.session, shrunk.info, ended)
            except Exception as e:  # noqa: BLE001 - the relaunch then says which run holds a host
                self.notice(f"elastic: could not ask run {ended} to stop on the survivors ({e})")
        return shrunk.info if shrunk is not None else None

    async def withdraw(self, why: str) -> None:
        """At the run's end (or a stop signal): delete the requests still pending."""
        await self.requests.withdraw(why)
