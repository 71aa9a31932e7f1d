"""A run from start to end: bundle, agents on every host, logs followed, exit code.

    prepare (bundle + agent in GCS, run.json) -> start (the channel: SSH fan-out, or
    one metadata patch per node for the slice's watchers) ->
    follow (logs and status from GCS; fail fast; Ctrl-C stops every host) -> record

`podctl exec` is the light sibling: a plain command on the hosts over SSH, its
output streamed straight back, no bundle, no GCS.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from podctl.base.errors import InvalidValueError, StoragePermissionError
from podctl.base.failures import coordination_abort
from podctl.base.numbers import parse_hosts_text
from podctl.base.signals import name_of_stop, received
from podctl.base.vocabulary import EXIT_HOST_LOST
from podctl.cloud.names import login
from podctl.cloud.sshkey import SSH_USER
from podctl.cloud.storage import Grant, Storage, gcloud_grant
from podctl.cloud.types import SliceInfo
from podctl.host import run_layout
from podctl.jobs import bundle, env_ship, launch, run_files, run_record
from podctl.jobs.channels.base import Channel
from podctl.jobs.channels.ssh import SshChannel
from podctl.jobs.host_label import host_name
from podctl.jobs.logs import LineSink, LogReader
from podctl.jobs.peer_cause import PeerCause, peer_cause
from podctl.jobs.run_files import read_record, read_stop_request, save_record
from podctl.jobs.run_record import HostStatus, RunRecord
from podctl.jobs.run_spec import RunSpec
from podctl.jobs.ssh import Fleet, HostPins, Target

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Fail-fast: once a host failed, the others' scripts get SIGTERM and, this long after,
# SIGKILL (their multi-host job cannot go on, nor save a collective checkpoint, without
# the failed one), and the run ends at most FAIL_FAST_WAIT_SECONDS after the failure,
# with whatever statuses were written by then: a host frozen or hung, its agent
# included, does not hold the run (nor its slice's bill) open.
FAIL_FAST_GRACE_SECONDS = 30.0
FAIL_FAST_WAIT_SECONDS = FAIL_FAST_GRACE_SECONDS + 15.0
GONE_WHY = "gone, no SSH connection taken"
GONE_POLL_SECONDS = 1.0  # during a fail-fast, how often the hosts still without a status are looked at
GONE_SETTLE_SECONDS = 2.0  # the fail-fast's stop, once every host has a status (ended, or gone)
Notice = Callable[[str], None]
# The hosts (positions, of those given) known gone (they take no SSH connection):
# a fail-fast stops waiting for their statuses at once (Job.gone; an elastic run's).
GoneCheck = Callable[[set[int]], Awaitable[set[int]]]
T = TypeVar("T")


def parse_env(pairs: list[str], files: list[Path] | tuple[Path, ...] = (),
              environ: dict[str, str] | None = None) -> dict[str, str]:
    """--env-file FILEs, then --env's: "K=V" -> {K: V}, the value kept as it is, shell
    characters and all; "K" alone takes K's value from podctl's own environment (ENVIRON),
    so a secret need not stand in podctl's argv, where any local user can read it."""
    import os

    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    env: dict[str, str] = {}
    for path in files:
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidValueError(f"--env-file {str(path)!r}: cannot read it ({e}).") from e
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):  # KEY=VALUE a line, as `docker --env-file`
                env.update(_one_env(line, environ, f"--env-file {path}, line {number}"))
    for pair in pairs:
        env.update(_one_env(pair, environ, "--env"))
    return env


def _one_env(pair: str, environ: Any, where: str) -> dict[str, str]:
    key, sep, value = pair.partition("=")
    if not _ENV_KEY.match(key):
        # the words only: a value (a secret) must not be echoed back
        raise InvalidValueError(f"{where}: {key[:40] if sep else pair[:40]!r} is not KEY=VALUE or KEY, "
                                "with KEY made of letters, digits and _ (e.g. --env WANDB_MODE=offline).")
    if not sep:
        if key not in environ:
            raise InvalidValueError(f"{where}: {key} is not set in podctl's environment (--env {key} "
                                    f"takes its value from there; or give --env {key}=VALUE).")
        value = environ[key]
    return {key: value}


def parse_hosts(text: str, num_hosts: int) -> set[int] | None:
    """"all" -> None; "0" or "0,3" -> {0, 3}; refuses hosts the slice does not have."""
    chosen = parse_hosts_text(text)
    if chosen is None:
        return None
    bad = sorted(h for h in chosen if not 0 <= h < num_hosts)
    if not chosen or bad:
        raise InvalidValueError(f"--hosts {text!r}: this slice has hosts 0-{num_hosts - 1}.")
    return chosen


@dataclass
class RunRequest:
    info: SliceInfo
    spec: RunSpec  # what runs (script, args, workdir, env, setup, the hosts' packages)
    hosts: set[int] | None = frozenset({0})  # type: ignore[assignment]
    detach: bool = False
    fail_fast: bool = True
    ssh_port: int | None = 22
    coordinator_port: int = launch.JAX_COORDINATOR_PORT
    flush_seconds: float = 2.0
    poll_seconds: float = 0.5
    checkpoint_dir: str | None = None  # --resume: the earlier run's; None: this run's own
    host_jax_extra: str = "tpu"  # env_lock.jax_extra_for the backend
    # the identity check's fix: gcloud's command, or the fake cloud's (chosen with the backend)
    grant: Grant = gcloud_grant
    ship_python: bool = True  # a CPython from `uv python install` in the environment (offline: none)
    resumed_from: str | None = None
    # A queued run (podctl/queue): its id is fixed in advance, so a repeated start is
    # a no-op on the hosts, and its bundle was uploaded when it was queued; the spec's
    # `script` is then the script's path inside that bundle.
    run_id: str | None = None
    bundle_hash: str | None = None
    record_extra: dict[str, Any] = field(default_factory=dict)  # e.g. a recovery's attempt


@dataclass
class RunResult:
    run_id: str
    exit_code: int
    failed: HostStatus | None  # the host the run's failure is blamed on (its status)
    statuses: dict[int, HostStatus]
    # the first failure was JAX's coordination service ending a host for a peer that
    # stopped answering: that peer is `failed`, and this says both (peer_cause.py)
    cause: PeerCause | None = None

    @property
    def reason(self) -> str | None:
        """Why the run failed, in words (None: it succeeded)."""
        return failure_reason(self.exit_code, self.failed, self.cause)


def failure_reason(code: int, failed: HostStatus | None, cause: PeerCause | None) -> str | None:
    """A failed run's one reason, the same in the client's end line and the record."""
    if cause is not None:
        return cause.describe()
    if failed is None:
        return None
    why = f"{host_name(failed.host, failed.process)} exited {code}"
    return why + (f" ({failed.error.splitlines()[0][:200]})" if failed.error else "")


async def _settle(stopping: list[asyncio.Future[Any]]) -> None:
    """After a follow: the fail-fast's stop (first) gets its time; its watch of gone hosts
    ends. Where that watch is over, every host has a status (it ended, or it is gone),
    and the stop is left only a moment (a dead host's hung connection would hold it 30 s)."""
    watched_out = False
    for watch in stopping[1:]:
        watched_out = watch.done() and not watch.cancelled() and watch.exception() is None
        watch.cancel()
        with contextlib.suppress(BaseException):
            await watch
    if stopping:
        await asyncio.wait({stopping[0]}, timeout=GONE_SETTLE_SECONDS if watched_out
                           else launch.HOST_COMMAND_SECONDS)
        stopping[0].cancel()


class Job:
    """One run's moving parts: storage, the fleet of connections, the log reader."""

    def __init__(self, storage: Storage, request: RunRequest, *, project: str, zone: str,
                 private_key: Path, pins: HostPins, sink: LineSink, notice: Notice,
                 user: str = SSH_USER, channel: Channel | None = None):
        self.storage = storage
        self.request = request
        self.project, self.zone = project, zone
        self.private_key, self.pins = private_key, pins
        self.sink, self.notice = sink, notice
        info = request.info
        self.targets: list[Target] = launch.targets_for(info, request.ssh_port)
        self.run_id = request.run_id or run_record.new_run_id(info.name)
        # how the run reaches its hosts, chosen by the caller from the registry
        # (jobs/channels); none given: SSH as USER
        self.channel: Channel = channel or SshChannel(Fleet(self.targets, private_key, pins, user=user),
                                                      storage, info, grant=request.grant)
        self.record: RunRecord | None = None
        self.timings: dict[str, float] = {}  # seconds per phase (bundle, start), for summaries
        self.starting = False  # agents may be running: a stop must reach them
        self.stopped_by: str | None = None  # who stopped the run (stop()), for its record
        # podctl ended the run for a failure it saw (a stall): its record says failed, why
        self.end_reason: str | None = None
        # Set by an elastic run: which hosts are gone, so that a fail-fast need not wait
        # out FAIL_FAST_WAIT_SECONDS for statuses they will never write.
        self.gone: GoneCheck | None = None

    async def _write_record(self) -> None:
        assert self.record is not None
        # What others noted in the record while the run went (a stall, a slow host) is
        # kept: this copy was read before they wrote.
        stored = await read_record(self.storage, self.run_id)
        if stored is not None:
            self.record.extra = {**stored.extra, **self.record.extra}
        await save_record(self.storage, self.record)

    async def prepare(self) -> launch.JobSpec:
        """Check that the slice is free (owner.py: one TPU owner per host; a relaunch waits
        for the old run to let go) and that its nodes may use the bucket (identity.py), then
        bundle, upload and record the run."""
        request, spec = self.request, self.request.spec
        root: Path | None = None
        if not request.bundle_hash:
            root, script = spec.bundle_root()  # bad input first
        await self.channel.claim(self.run_id, request.info.name)
        # Before anything is uploaded for the hosts: a node that cannot use the bucket fails
        # here. (Through the watchers, a host says so itself: `refused GCS answered 403`.)
        await self.channel.check_access(self.run_id)
        if request.bundle_hash:
            script, bundle_hash = spec.script.as_posix(), request.bundle_hash
        else:
            assert root is not None  # set above when there is no bundle to reuse
            bundle_hash = await bundle.ship(self.storage, root, self.notice)
        environment, env_summary = await env_ship.prepare(
            self.storage, run_id=self.run_id, requirements=spec.requirements, root=root,
            bundle_hash=request.bundle_hash, python=spec.python, jax_extra=request.host_jax_extra,
            relock=spec.relock, build_on=spec.build_on, ship_python=request.ship_python,
            notice=self.notice, timings=self.timings)
        source, sha = launch.agent_source()
        await self.storage.upload_bytes_if_missing(run_layout.agent_object(sha), source)
        self.agent_sha = sha
        info = request.info
        self.record = RunRecord(
            run_id=self.run_id, slice_name=info.name, project=self.project, zone=self.zone,
            num_hosts=len(self.targets), kind="script", script=script, args=list(spec.args),
            env_keys=spec.env_keys, bundle_hash=bundle_hash, created=time.time(),
            extra={"bucket": self.storage.bucket_name, "via": self.channel.name,
                   # who asked, as this machine knows them (the bucket's readers see it)
                   "started_by": f"{login()}@{socket.gethostname()}",
                   "accelerator_type": info.accelerator_type,  # chips after the slice is gone
                   # The slice's identity (its createTime): a later slice of the same name
                   # is another slice, and this run's record is not its run.
                   "slice_created": info.created,
                   "checkpoint_dir": request.checkpoint_dir
                   or run_layout.checkpoint_dir(self.storage.bucket_name, self.run_id),
                   **({"resumed_from": request.resumed_from} if request.resumed_from else {}),
                   **({"environment": env_summary} if env_summary else {}),
                   **request.record_extra})
        await self._write_record()
        return launch.JobSpec(
            run_id=self.run_id, bucket=self.storage.bucket_name, project=self.project,
            script=script, args=tuple(spec.args), env=dict(spec.env), setup=spec.setup,
            bundle_hash=bundle_hash, bundle_object=run_layout.bundle_object(bundle_hash),
            coordinator_port=request.coordinator_port, flush_seconds=request.flush_seconds,
            checkpoint_dir=request.checkpoint_dir, environment=environment)

    async def start(self, spec: launch.JobSpec) -> None:
        self.starting = True
        await self.channel.start(spec, self.agent_sha, once=self.request.run_id is not None)
        assert self.record is not None
        self.record.state = "running"
        await self._write_record()

    async def follow(self) -> RunResult:
        reader = LogReader(self.storage, self.run_id, len(self.targets), self.sink, self.request.hosts,
                           notice=self.notice, explain=self._refusal)
        stopping: list[asyncio.Future[Any]] = []  # the fail-fast's stop (and its watch of gone hosts)
        peers: tuple[dict[int, dict[str, Any]], float] | None = None  # heartbeats when a host was aborted

        async def on_status(status: HostStatus) -> None:
            nonlocal peers
            if status.error is not None and status.error == reader.refusal:
                return  # said once, as the run's error, below
            if (peers is None and not status.stopped and status.exit_code != 0
                    and coordination_abort(status.explanation()) is not None):
                # JAX ended this host for a peer that stopped answering: how the peers
                # stand now, before the fail-fast stop below changes it (peer_cause.py)
                with contextlib.suppress(Exception):
                    peers = (await run_files.read_beats(self.storage, self.run_id), time.time())
            if status.exit_code != 0 and not status.stopped and not stopping:
                what = status.error or f"exit code {status.exit_code}"
                self.notice(f"{host_name(status.host, status.process)} failed ({what})")
                if self.request.fail_fast and not reader.done:
                    stopping.extend(self._fail_fast(reader))

        try:
            statuses = await reader.follow(poll_seconds=self.request.poll_seconds,
                                           on_status=on_status)
        finally:
            await _settle(stopping)
        left = [h for h in range(len(self.targets)) if h not in statuses]
        if left:
            self.notice(f"ending the run without waiting longer for host{'s' if len(left) > 1 else ''} "
                        f"{', '.join(f'{h:04d}' for h in left)} (fail-fast; its agent ends its "
                        f"script: SIGKILL {FAIL_FAST_GRACE_SECONDS:.0f} s after the stop)")
        code, failed = run_record.job_exit_code(statuses)
        cause = peer_cause(statuses, peers[0] if peers else None, len(self.targets),
                           peers[1] if peers else time.time())
        if cause is not None:  # the run's end line says it
            failed = statuses.get(cause.host) or HostStatus(
                host=cause.host, exit_code=code, ended=time.time(), process=cause.process)
        assert self.record is not None
        self.record.state = "succeeded" if code == 0 else "failed"
        self.record.exit_code, self.record.ended = code, time.time()
        self.record.failed_host = failed.host if failed else None
        reason = failure_reason(code, failed, cause)
        stopped_by = None
        if failed is not None and failed.stopped and cause is None:  # every failure was podctl's stop
            if self.end_reason is not None:  # for a failure podctl saw (a stall)
                reason = self.end_reason
            else:  # its owner's: this client's Ctrl-C, or `podctl stop` elsewhere
                asked = await _quietly(read_stop_request(self.storage, self.run_id))
                stopped_by = self.stopped_by or (asked.by if asked else None) or "podctl"
        if stopped_by is not None:
            self.record.state, self.record.failed_host = "stopped", None
            self.record.extra["stopped_by"] = stopped_by
        elif reason is not None:
            self.record.extra["reason"] = reason
        if cause is not None:
            self.record.extra["peer_cause"] = cause.to_json()
        await self._write_record()
        if reader.refusal is not None:  # the role went mid-run: said as a refusal at the start is
            raise StoragePermissionError(reader.refusal)
        return RunResult(self.run_id, code, failed, statuses, cause)

    def _fail_fast(self, reader: LogReader) -> list[asyncio.Future[Any]]:
        """Stop the other hosts and end the follow by FAIL_FAST_WAIT_SECONDS (sooner when
        the hosts left are known gone) -> the stop, and the watch of gone hosts if any."""
        self.notice("stopping the other hosts (fail-fast)")
        # In the background: the reader goes on reading their ends meanwhile, and a host
        # that does not answer cannot hold it.
        started: list[asyncio.Future[Any]] = [asyncio.ensure_future(self.channel.halt(
            self.run_id, grace_seconds=FAIL_FAST_GRACE_SECONDS))]
        reader.end_by(FAIL_FAST_WAIT_SECONDS)
        if self.gone is not None:
            started.append(asyncio.ensure_future(self._end_when_gone(reader, self.gone)))
        return started

    async def _end_when_gone(self, reader: LogReader, gone: GoneCheck) -> None:
        """During a fail-fast: once every host still without a status is known gone, they
        are marked lost (GONE_WHY) and the follow ends, not waiting out the fail-fast."""
        while not reader.done:
            missing = {h for h in range(len(self.targets)) if h not in reader.progress.statuses}
            try:
                away = await gone(missing) if missing else set()
            except Exception:  # noqa: BLE001 - asked again; the fail-fast's own wait still ends it
                away = set()
            if missing and away >= missing:
                many = len(missing) > 1
                self.notice(f"host{'s' if many else ''} {', '.join(f'{h:04d}' for h in sorted(missing))}: "
                            f"{GONE_WHY}; not waiting for {'their' if many else 'its'} end")
                now = time.time()
                for host in missing:
                    reader.progress.statuses.setdefault(host, run_files.lost_status(host, now, GONE_WHY))
                return
            await asyncio.sleep(GONE_POLL_SECONDS)

    async def _refusal(self) -> str | None:
        """Why the hosts went quiet, if it is GCS refusing the nodes' account (the channel's
        word: over SSH, worker 0 asked again as before the start)."""
        return await self.channel.explain_silence(self.run_id)

    async def stop(self, by: str | None = None, *, failed: str | None = None) -> None:
        """Stop the run on every host, and say so in its record: stopped BY whom (None:
        the stop signal this process got, Ctrl-C by default), or, when a start FAILED
        (why), failed."""
        if failed is None:
            self.stopped_by = by or (name_of_stop() if received else "Ctrl-C")
        if self.starting:
            await self.channel.halt(self.run_id)
        if self.record is not None:
            self.record.state, self.record.ended = ("failed" if failed else "stopped"), time.time()
            self.record.extra.update({"reason": failed} if failed else {"stopped_by": self.stopped_by})
            with contextlib.suppress(Exception):
                await self._write_record()

    async def close(self) -> None:
        await self.channel.close()


async def _quietly(read: Awaitable[T]) -> T | None:
    """READ's answer, or None when GCS failed it: an account of the run, never its end."""
    try:
        return await read
    except Exception:  # noqa: BLE001 - GCS gone for a moment: the record says less
        return None


async def exec_on_hosts(targets: list[Target], private_key: Path, pins: HostPins, command: list[str],
                        sink: LineSink, hosts: set[int] | None, *, user: str = SSH_USER) -> dict[int, int]:
    """Run COMMAND on the hosts; stream its lines. One word is a shell command line, run
    as it is (as `ssh HOST 'CMD'` and `gcloud ... --command` do: `exec NAME -- 'echo
    ${HOSTNAME##*-w-}'`); several are argv, each quoted for the remote shell."""
    chosen = [t for t in targets if hosts is None or t.index in hosts]
    line = command[0] if len(command) == 1 else shlex.join(command)
    async with Fleet(chosen, private_key, pins, user=user) as fleet:
        async def one(conn: Any, target: Target) -> int:
            async with conn.create_process(line) as process:
                async def pump(stream: Any) -> None:
                    async for text in stream:
                        if text:  # "" marks the end of the stream, an empty line is "\n"
                            sink(target.index, text.rstrip("\n"))

                await asyncio.gather(pump(process.stdout), pump(process.stderr))
                await process.wait(check=False)
                status = process.exit_status
                return status if status is not None and status >= 0 else EXIT_HOST_LOST

        codes = await fleet.each(one)
    return {t.index: code for t, code in zip(chosen, codes)}
