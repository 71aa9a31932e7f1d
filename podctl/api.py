"""podctl from Python (a notebook, a script): the CLI's lifecycle as objects.

    import podctl

    with podctl.connect(backend="fake") as cloud:        # or backend="gcp", project=..., zone=...
        with cloud.up("v5p-16") as slice:                 # deleted when the block ends, always
            run = slice.run("train.py", args=["--steps", "20"])
            run.wait()                                    # one status line, not a flood
            run.logs()                                    # host 0's lines, from GCS
            run.checkpoints()

Every method is synchronous and works inside a running event loop (a Jupyter kernel):
the async core runs on a loop of podctl's own in a helper thread (`_sync.LoopThread`).
The steps are `podctl.steps`' (one Session, the same steps the CLI takes).
"""

from __future__ import annotations

import asyncio
import html
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podctl import steps
from podctl.base import settings as settings_mod
from podctl.base._display import StatusLine
from podctl.base._sync import Background, LoopThread
from podctl.base.errors import JobError, NotFoundError, UsageError
from podctl.base.settings import Settings
from podctl.base.signals import restore, route_stop_signals
from podctl.base.vocabulary import DEFAULT_WAIT
from podctl.steps import lines as host_lines
from podctl.steps.elastic import ElasticPolicy
from podctl.steps.replay import replay
from podctl.steps.run_cost import run_cost
from podctl.steps.slow_hosts import SlowHostPolicy
from podctl.steps.stall import StallPolicy
from podctl.steps.supervise import Supervised, Supervision, run_supervised

if TYPE_CHECKING:
    from podctl.jobs.checkpoints import Checkpoint
    from podctl.jobs.job import Job
    from podctl.jobs.run_record import RunRecord

__all__ = ["connect", "Cloud", "Slice", "Run"]

KEPT_LINES = 200


def connect(backend: str | None = None, *, project: str | None = None, zone: str | None = None,
            bucket: str | None = None, api: str | None = None) -> Cloud:
    """Open podctl on Google Cloud (`backend="gcp"`) or the local fake cloud (`"fake"`,
    started in the background if it is not running). Settings not given come from the
    environment, podctl.toml and gcloud's config, as for the CLI. API: "tpu" (the Cloud
    TPU API) or "compute" (Compute Engine, which serves TPU7x: docs/compute-engine.md)."""
    return Cloud(settings_mod.resolve(backend=backend, project=project, zone=zone, bucket=bucket, api=api))


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Cloud:
    """A connection: one project, zone and bucket. Use it as a context manager to
    delete, at the end, every slice it created (and stop a fake cloud it started)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._started_fake = False
        if settings.backend == "fake":
            self._started_fake = not steps.fake_running(settings)
        self._loop = LoopThread()
        self.session = steps.Session.open(settings)
        self._created: list[Slice] = []
        self._signals: dict[int, object] | None = None

    # ---- the sync face over the async core ----
    def _run(self, coro: Any, status: StatusLine | None = None) -> Any:
        return self._loop.run(coro, poll=status.render if status is not None else None)

    def up(self, slice_type: str, *, name: str | None = None, spot: bool = False,
           queued: bool = False, timeout: str = DEFAULT_WAIT, **options: Any) -> Slice:
        """Create (or reuse) a slice and wait until it is ready, e.g. `cloud.up("v5p-16")`.
        Used as `with cloud.up(...) as slice:`, the slice is deleted when the block ends."""
        request = steps.up_request(self.settings, steps.SliceOptions(
            slice_type=slice_type, name=name, spot=spot, queued=queued, timeout=timeout, **options))
        self._route_signals()
        status = StatusLine(f"{request.name} ({request.spec.describe()})")
        result = self._run(steps.up(self.session, request, progress=status), status)
        status.done("ready" if result.created else "ready (reused)")
        made = Slice(self, result.info)
        if result.created:
            self._created.append(made)
        return made

    def _route_signals(self) -> None:
        """From here this process may own a slice or a run: SIGTERM and SIGHUP end it as
        Ctrl-C does (an `up` under way undoes its creation, a run waited on stops, a
        `with` block's exit deletes the slice), unless the program handles them itself
        or its parent ignored them. Undone by close()."""
        if self._signals is None:
            self._signals = route_stop_signals(only_defaults=True)

    def slice(self, name: str) -> Slice:
        """An existing slice by name."""
        return Slice(self, self._run(steps.describe_slice(self.session, name)))

    def slices(self) -> SliceList:
        """The slices in the zone (nodes and queued resources)."""
        infos = self._run(steps.slices_in(self.session, self.settings.parent))
        return SliceList(Slice(self, info) for info in infos)

    def run(self, run_id: str) -> Run:
        """An earlier run by id (see `runs()`)."""
        record = self._run(steps.load_run(self.session, run_id))
        return Run(self, run_id, record.num_hosts, slice_name=record.slice_name)

    def runs(self) -> RunList:
        """Run records, newest first (podctl.jobs.run_record.RunRecord): one line each, a table
        in a notebook; `cloud.run(record.run_id)` for its logs and checkpoints."""
        return RunList(self._run(steps.list_runs(self.session, as_shown=True)))

    def close(self) -> None:
        """Delete the slices this connection created that still exist, stop a fake cloud
        it started, and end its helper thread."""
        try:
            for made in list(self._created):
                made.down(missing_ok=True)
        finally:
            if self._signals is not None:
                restore(self._signals)
                self._signals = None
            self._loop.close()
            self.session.close()
            if self._started_fake:
                steps.stop_fake(self.settings)

    def __enter__(self) -> Cloud:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self.settings
        return f"<podctl.Cloud {s.backend} project={s.project} zone={s.zone} bucket={s.bucket}>"


class Slice:
    """A TPU slice. `run()` starts a script on every host; `down()` deletes it."""

    def __init__(self, cloud: Cloud, info: steps.SliceInfo):
        self.cloud, self.info = cloud, info
        self.deleted = False

    @property
    def name(self) -> str:
        return self.info.name

    def refresh(self) -> Slice:
        self.info = self.cloud._run(steps.describe_slice(self.cloud.session, self.name))
        return self

    def run(self, script: str | Path, args: Sequence[str] = (), *, env: dict[str, str] | None = None,
            workdir: str | Path | None = None, setup: str | None = None, resume: str | Run | None = None,
            fail_fast: bool = True, recover: int = 0, retry_errors: bool = False,
            max_hours: float | None = None, on_stall: str | None = None,
            stall_after: float | None = None, stall_startup: float | None = None,
            on_slow_host: str | None = None,
            slow_host_after: float = 300.0, requirements: str | Path | None = None,
            python: str | None = None, elastic: ElasticPolicy | None = None,
            via: str | None = None) -> Run:
        """Ship SCRIPT's directory (or WORKDIR) and start SCRIPT on every host; returns
        once all have started. `resume=` an earlier run (or its id) continues from its
        checkpoints. Follow it with `wait()` or `logs(follow=True)`. The hosts' packages:
        `requirements=` a file (default: requirements.txt in the workdir), locked here for
        `python=` "3.10".."3.13" (default: podctl chooses, as `podctl run` does). `via=`
        "auto" (the default, else PODCTL_VIA: the slice's watchers where they answer, else
        SSH), "boot" or "ssh": how the run reaches its hosts, as `podctl run --via`.

        `recover=N`: when the infrastructure ends the run (a preemption, a host lost),
        podctl makes the slice again and relaunches from the latest checkpoint, up to N
        times, as `podctl run --recover N` does (`retry_errors=True`: also after the
        script's own failure). `max_hours=H`: after H hours the run is stopped with a
        checkpoint and the slice deleted. `on_stall="wait"|"stop"|"recover"` (and
        `stall_after=` seconds): a run with no step for that long is reported, with every
        host's stacks in GCS, then waited for, ended, or relaunched (`podctl run
        --on-stall`); so is one with no first step `stall_startup=` seconds (default:
        `stall_after`, else 30 minutes) after its script started on every host. A host
        slower than its peers is named among the run's notices; `on_slow_host="recover"`
        (with `recover=N`) checkpoints once it stayed slow for `slow_host_after` seconds
        and makes the slice again on other hardware. With any of these podctl watches the
        run from this process (in the background) until it ends: call `wait()`.
        `elastic=ElasticPolicy(min_slices=, shrink_batch=, grow_deadline=)` (with
        `recover=N`, on a multislice): go on on the surviving slices when one is lost,
        and grow back when it answers again (`podctl run --elastic`)."""
        cloud = self.cloud
        cloud._route_signals()
        kept: deque[tuple[int, str]] = deque(maxlen=KEPT_LINES)
        spec = steps.RunSpec(
            script=Path(script), args=tuple(str(a) for a in args), workdir=Path(workdir) if workdir else None,
            env=dict(env or {}), setup=setup, requirements=Path(requirements) if requirements else None,
            python=python)
        options = steps.RunOptions(spec, hosts="all", fail_fast=fail_fast, via=via,
                                   resume=resume.run_id if isinstance(resume, Run) else resume)
        notices: list[str] = []
        holder: dict[str, Any] = {}

        def sink(host: int, line: str) -> None:
            kept.append((host, line))
            if "run" in holder:
                holder["run"]._saw(host, line)

        if (recover or retry_errors or max_hours is not None or on_stall or stall_after
                or stall_startup or on_slow_host or elastic):
            if retry_errors and not recover:
                raise UsageError("retry_errors=True goes with recover=N.")
            how = Supervision(recover=recover, retry_errors=retry_errors, max_hours=max_hours,
                              stall=StallPolicy(action=on_stall or "wait", after=stall_after,
                                                startup=stall_startup),
                              slow=SlowHostPolicy(action=on_slow_host or "report",
                                                  after=slow_host_after), elastic=elastic)
            run = Run._supervised(cloud, self.name, options, how, sink, notices, kept)
            holder["run"] = run
            return run

        async def start() -> Any:
            info = await steps.ready_slice(cloud.session, self.name)
            return await steps.start_run(cloud.session, info, options, sink=sink,
                                         notice=notices.append)

        job = cloud._run(start())
        run = Run(cloud, job.run_id, len(job.targets), slice_name=self.name, job=job, lines=kept)
        holder["run"] = run
        return run

    def down(self, *, missing_ok: bool = False) -> None:
        """Delete the slice and wait until it is gone."""
        if self.deleted:
            return
        status = StatusLine(f"deleting {self.name}")
        try:
            self.cloud._run(steps.down(self.cloud.session, self.name, progress=status), status)
        except NotFoundError:
            if not missing_ok:
                raise
        self.deleted = True
        status.done("deleted")

    def __enter__(self) -> Slice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down(missing_ok=True)

    def __repr__(self) -> str:
        i = self.info
        state = "deleted" if self.deleted else i.state
        return (f"<podctl.Slice {i.name} {i.accelerator_type} {state}: {len(i.hosts)} hosts, "
                f"{i.chips} chips, {i.tier}>")

    def _repr_html_(self) -> str:
        i = self.info
        head = (f"<b>{html.escape(i.name)}</b> {html.escape(i.accelerator_type)} "
                f"({html.escape(i.topology)}), {html.escape('deleted' if self.deleted else i.state)}, "
                f"{i.chips} chips, {html.escape(i.tier)}")
        return head + _table(["worker", "address"], ((h.worker, f"{h.ip}:{h.port}") for h in i.hosts[:16]))


class RunList(list["RunRecord"]):
    def __repr__(self) -> str:
        return "[" + ",\n ".join(repr(r) for r in self) + "]"

    def _repr_html_(self) -> str:
        import time

        return _table(["run", "state", "exit", "slice", "hosts", "started (UTC)", "script"],
                      ((r.run_id, r.state, "" if r.exit_code is None else r.exit_code, r.slice_name,
                        r.num_hosts, time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.created)),
                        r.script or r.kind) for r in self))


class SliceList(list["Slice"]):
    def _repr_html_(self) -> str:
        return _table(["name", "type", "state", "hosts", "chips", "tier"],
                      ((s.name, s.info.accelerator_type, s.info.state, len(s.info.hosts), s.info.chips,
                        s.info.tier) for s in self))


class Run:
    """A run of a script on every host of a slice; its logs and status live in GCS."""

    def __init__(self, cloud: Cloud, run_id: str, num_hosts: int, *, slice_name: str,
                 job: Job | None = None, lines: deque[tuple[int, str]] | None = None,
                 supervisor: Background[Supervised] | None = None):
        self.cloud, self.run_id, self.num_hosts, self.slice_name = cloud, run_id, num_hosts, slice_name
        self._job = job
        # A run podctl watches in the background (recover=, max_hours=): its attempts.
        self._supervisor = supervisor
        self.recovered: Any = None  # podctl.steps.recovery.RecoveredRun, once it ended
        self.lines: deque[tuple[int, str]] = lines if lines is not None else deque(maxlen=KEPT_LINES)
        self.metrics: list[dict[str, Any]] = []  # host 0's metric lines seen while waiting
        self.exit_code: int | None = None
        self._status: StatusLine | None = None
        self._echo: list[str] | None = None  # host 0's lines to print, while wait(echo=) runs
        self._lock = threading.Lock()
        self.timings: dict[str, float] = dict(getattr(job, "timings", {}) or {})

    @classmethod
    def _supervised(cls, cloud: Cloud, slice_name: str, options: steps.RunOptions, how: Supervision,
                    sink: steps.LineSink, notices: list[str], lines: deque[tuple[int, str]]) -> Run:
        """Start OPTIONS on SLICE_NAME under podctl's watch (budget, recoveries), in the
        background on podctl's loop; return once its first attempt has started."""
        started: list[Any] = []
        supervisor = cloud._loop.start(run_supervised(
            cloud.session, slice_name, options, how, sink=sink, notice=notices.append,
            on_start=started.append))
        supervisor.wait(until=lambda: bool(started))  # a start that failed raises here
        job = started[0]
        return cls(cloud, job.run_id, len(job.targets), slice_name=slice_name, lines=lines,
                   supervisor=supervisor)

    def _saw(self, host: int, line: str) -> None:
        if host == 0 and self._echo is not None:
            with self._lock:
                self._echo.append(line)
        metric = host_lines.metric(line) if host == 0 else None
        if metric is None:
            return
        self.metrics.append(metric)
        if self._status is not None and metric["kind"] == "step":
            self._status.update(host_lines.step_summary(metric))

    def wait(self, *, check: bool = False, echo: Any = None) -> int:
        """Block until every host has ended, showing one status line; -> the exit code
        (0 when every host exited 0). With check=True a failure raises JobError.
        ECHO, a function, is given each of host 0's lines as they arrive (in this thread)."""
        status = self._status = StatusLine(f"run {self.run_id}")
        status.update("running")
        self._echo = [] if echo is not None else None

        def poll() -> None:
            if echo is not None:
                with self._lock:
                    lines, self._echo = self._echo or [], []
                for line in lines:
                    echo(line)
            status.render()

        try:
            if self._supervisor is not None:
                supervised = self._supervisor.wait(poll=poll)
                assert supervised is not None
                self._supervisor, code = None, supervised.exit_code
                self.recovered = supervised.recovered
            elif self._job is not None:
                job, self._job = self._job, None
                try:
                    result = self.cloud._loop.run(steps.follow_run(job), poll=poll)
                except (KeyboardInterrupt, asyncio.CancelledError):
                    # As Ctrl-C in the CLI: the run stops on every host. follow_run stops it
                    # itself once it ran, but a Ctrl-C that came before this wait began (the
                    # caller's task cancelled, in a notebook) can cancel it before its first
                    # step, and then nothing did: stop it here too (a second stop is a no-op).
                    try:
                        self.cloud._run(_stop_job(job))
                    finally:  # whatever the own connections did, the hosts hear the stop
                        self.cloud._run(_stop_elsewhere(self.cloud.session, self.slice_name, self.run_id))
                    raise
                code = result.exit_code
            else:
                def keep(host: int, line: str) -> None:
                    self.lines.append((host, line))
                    self._saw(host, line)

                code = self.cloud._loop.run(
                    steps.follow_from_gcs(self.cloud.session, self.run_id, self.num_hosts, keep), poll=poll)
        finally:
            poll()
            self._echo = None
        self.exit_code = code
        self._status.done("succeeded" if code == 0 else f"failed (exit code {code})")
        if check and code != 0:
            raise JobError(f"run {self.run_id} failed with exit code {code}; see run.logs().")
        return code

    def logs(self, *, follow: bool = False, hosts: str | Sequence[int] = (0,)) -> None:
        """Print the run's lines from GCS (host 0's by default, `hosts="all"` for every
        host), every attempt of a recovered run in turn; with follow=True keep printing
        until the run ends."""
        import sys

        from podctl.steps.lines import label, process_of

        text = hosts if isinstance(hosts, str) else ",".join(str(h) for h in hosts)
        pending: list[str] = []
        lock = threading.Lock()

        def sink(host: int, line: str) -> None:  # on podctl's loop: keep, print below
            with lock:
                pending.append(f"[{label(host, process_of(line))}] {line}\n")

        def notice(text: str) -> None:
            with lock:
                pending.append(f"podctl: {text}\n")

        def flush() -> None:  # in the caller's thread, so a notebook shows it in this cell
            with lock:
                out = "".join(pending)
                pending.clear()
            if out:
                sys.stdout.write(out)
                sys.stdout.flush()

        try:
            self.cloud._loop.run(replay(self.cloud.session, self.run_id, sink, hosts=text,
                                        follow=follow, notice=notice), poll=flush)
        finally:
            flush()

    def goodput(self, *, price: float | None = None) -> Any:
        """Where the run's chip-hours went (podctl.steps.goodput.Goodput: buckets that add
        up to its billed time, each in seconds, chip-hours and dollars; `.to_json()`), as
        `podctl goodput RUN_ID` shows it."""
        from podctl.steps.goodput import run_goodput

        return self.cloud._run(run_goodput(self.cloud.session, self.run_id, price=price))

    def cost(self, *, price: float | None = None) -> Any:
        """What the run cost so far (podctl.steps.run_cost.RunBill: billed hours, dollars,
        goodput, tokens, MFU), as `podctl cost RUN_ID` shows it; PRICE: USD per chip-hour."""
        return self.cloud._run(run_cost(self.cloud.session, self.run_id, price=price))

    def checkpoints(self) -> CheckpointList:
        """The run's checkpoint steps in GCS (podctl.jobs.checkpoints.Checkpoint)."""
        _, _, found = self.cloud._run(steps.run_checkpoints(self.cloud.session, self.run_id))
        return CheckpointList(found)

    def plot(self, path: str | Path | None = None) -> Any:
        """Loss, step time, tokens/s and MFU over steps, from GCS (podctl.policy.plot): shown
        in a notebook; also written to PATH (.png or .html) when given."""
        from podctl.policy.plot import Picture, plot_runs

        fig, series = self.cloud._run(plot_runs(self.cloud.session.storage, [self.run_id],
                                                Path(path) if path is not None else None))
        return Picture(fig, series)

    def stop(self) -> None:
        """Stop the run on every host (the script gets SIGTERM: the template saves a
        checkpoint first). A stop is final: the run is not recovered after it, here or by
        anyone else following it (its stop request is in GCS)."""
        if self._supervisor is not None:  # its own cancel stops the run on every host
            supervisor, self._supervisor = self._supervisor, None
            self.cloud._run(_request_stop(self.cloud.session, self.run_id))
            supervisor.cancel()
            return
        if self._job is not None:
            job, self._job = self._job, None

            async def stop_and_close() -> None:
                try:
                    await _request_stop(self.cloud.session, job.run_id)
                    await job.stop(by=STOPPED_BY)
                finally:
                    await job.close()

            self.cloud._run(stop_and_close())
            return
        self.cloud._run(_stop_elsewhere(self.cloud.session, self.slice_name, self.run_id))

    def __repr__(self) -> str:
        state = "running" if self.exit_code is None else (
            "succeeded" if self.exit_code == 0 else f"failed (exit {self.exit_code})")
        last = next((m for m in reversed(self.metrics) if m["kind"] == "step"), None)
        where = f", {host_lines.step_summary(last)}" if last else ""
        return f"<podctl.Run {self.run_id} on {self.slice_name}: {state}{where}>"


async def _stop_elsewhere(session: steps.Session, slice_name: str, run_id: str) -> None:
    """Stop a run this object did not start (`podctl stop RUN_ID` does the same)."""
    await steps.stop_run(session, run_id, wait=False, by=STOPPED_BY)


async def _stop_job(job: Job) -> None:
    """Stop JOB on every host over its own connections, then close them."""
    try:
        await job.stop()
    finally:
        await job.close()


async def _request_stop(session: steps.Session, run_id: str) -> None:
    """The owner's stop, in GCS: whoever else follows the run does not recover it."""
    await steps.ask_stop(session, [run_id], by=STOPPED_BY)


STOPPED_BY = "Run.stop()"


class CheckpointList(list["Checkpoint"]):
    def __repr__(self) -> str:
        return "[" + ", ".join(f"step {c.step}{'' if c.complete else ' (incomplete)'}" for c in self) + "]"

    def _repr_html_(self) -> str:
        return _table(["step", "size (bytes)", "files", "complete"],
                      ((c.step, c.size_bytes, c.objects, "yes" if c.complete else "no") for c in self))
