"""podctl run / logs / runs / exec."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from podctl.base.vocabulary import EXIT_HOST_LOST
from podctl.cli.common import (
    Context,
    Number,
    ScriptCommand,
    bucket_option,
    exit_interrupted,
    guarded,
    hosts_checked,
    refuse_blank,
)
from podctl.cli.slice_cmds import json_option, pass_context, where_options
from podctl.cli.text import shown


def _line_printer(stream: Any) -> Any:
    """One write per line, so lines of different hosts never split or interleave. On a
    terminal control characters are made visible; elsewhere (a file, a pipe) the line
    is written as the host printed it, as `podctl logs` keeps it in GCS."""
    from podctl.steps.lines import is_progress, label, process_of

    terminal = bool(getattr(stream, "isatty", lambda: False)())
    progress_shown = False

    def sink(host: int, line: str) -> None:  # `[host 0003 p5]`: with its JAX process index
        nonlocal progress_shown
        text = f"[{label(host, process_of(line))}] {shown(line, tabs=True) if terminal else line}"
        if terminal and is_progress(line):  # an install's progress: one line, rewritten
            stream.write(f"\r\x1b[K{text}")
            progress_shown = True
        else:
            stream.write(f"\r\x1b[K{text}\n" if progress_shown else f"{text}\n")
            progress_shown = False
        stream.flush()

    return sink


def _notice(text: str) -> None:
    click.echo(f"podctl: {text}", err=True)


# podctl's options go before SCRIPT; every word after SCRIPT is the script's (ScriptCommand).
@click.command(cls=ScriptCommand)
@click.argument("name")
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--workdir", type=click.Path(path_type=Path), default=None,
              help="Directory to ship (default: the script's directory).")
@click.option("--env", "env_pairs", multiple=True, metavar="K=V|K",
              help="Environment for the script on every host (values are never printed); K alone: "
              "its value from podctl's own environment, out of argv.")
@click.option("--env-file", "env_files", multiple=True, type=click.Path(path_type=Path),
              metavar="FILE", help="KEY=VALUE lines (# comments) for the script's environment; --env wins.")
@click.option("--setup", default=None, metavar="CMD", help="Run once per host per bundle first.")
@click.option("--requirements", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="The hosts' Python packages (default: requirements.txt in the workdir); "
              "locked here with uv, built once, shipped through GCS, kept for later runs.")
@click.option("--python", "python", default=None, type=click.Choice(["3.10", "3.11", "3.12", "3.13"]),
              help="The hosts' environment's Python (default: the image's 3.10 unless the "
              "requirements resolve to newer versions on a current CPython, which uv then installs).")
@click.option("--relock", is_flag=True, help="Resolve the requirements anew instead of reusing the "
              "lock an earlier run made for them.")
@click.option("--build-on", "build_on", type=click.Choice(["client", "host"]), default="client",
              show_default=True, help="Where the hosts' environment is built: here, from the package "
              "index (the hosts then need only GCS), or on host 0 (for a package with no wheel; the "
              "hosts need the index; not with --via boot).")
@click.option("--hosts", "hosts_text", default="0", show_default=True, callback=hosts_checked,
              help="Whose lines to show: all, or host numbers like 0,3.")
@click.option("--detach", is_flag=True, help="Return once every host has started.")
@click.option("--keep-going", is_flag=True, help="Do not stop the other hosts when one fails.")
@click.option("--via", default=None, metavar="CHANNEL",
              help="How the run reaches its hosts: boot (the slice's watchers, one metadata "
                   "patch per node, no SSH), ssh (a session per host), auto (boot where the "
                   "slice's watchers answer, else ssh). Default: PODCTL_VIA, else auto.")
@click.option("--resume", default=None, metavar="RUN_ID",
              help="Continue from RUN_ID's checkpoints: its PODCTL_CHECKPOINT_DIR becomes this run's.")
@click.option("--recover", default=0, show_default=True, type=Number(whole=True, low=0, high=100), metavar="N",
              help="If the slice is preempted or a host is lost, make the slice again and "
              "relaunch from the latest checkpoint, up to N times.")
@click.option("--retry-errors", is_flag=True,
              help="With --recover: also relaunch after the script's own non-zero exit.")
@click.option("--elastic", is_flag=True,
              help="With --recover, on a multislice: when a slice is lost (its hosts gone), go on "
              "on the surviving slices from their local state (the template's --local-every), and "
              "grow back when it answers again; the template keeps the global batch by gradient "
              "accumulation.")
@click.option("--min-slices", default=None, type=Number(whole=True, low=1, high=4096), metavar="N",
              help="With --elastic: below N slices the run waits (no step) for lost ones "
              "(default 1).")
@click.option("--shrink-batch", is_flag=True,
              help="With --elastic: the global batch shrinks with the slices instead of being kept.")
@click.option("--grow-deadline", default=None, metavar="DURATION",
              help="With --elastic: stop asking for lost slices after this long (default 6h).")
@click.option("--max-hours", default=None, metavar="H",
              help="Budget: after H hours (or the slice's own budget, if sooner) stop the run "
              "with a checkpoint and delete the slice; enforced while this command follows.")
@click.option("--on-stall", type=click.Choice(["wait", "stop", "recover"]), default="wait",
              show_default=True, help="When no step comes for --stall-after: report it (stacks "
              "of every host to GCS, the hosts behind named) and wait, stop the run, or "
              "relaunch it from its checkpoint (with --recover).")
@click.option("--stall-after", default=None, metavar="DURATION",
              help="No step for this long is a stall (default: 10x the median step, at least 5m).")
@click.option("--stall-startup", default=None, metavar="DURATION",
              help="No first step this long after the script started on every host (the "
              "environment build not counted) is a stall too (default: --stall-after if "
              "given, else 30m).")
@click.option("--on-slow-host", type=click.Choice(["report", "recover"]), default="report",
              show_default=True, help="A host slower than its peers step after step is named "
              "(console, run record); recover: once it stayed slow for --slow-host-after, "
              "checkpoint, make the slice again on other hardware, resume (with --recover).")
@click.option("--slow-host-after", default="5m", show_default=True, metavar="DURATION",
              help="How long a host stays slow before --on-slow-host recover acts.")
@click.option("--preflight", "preflight", is_flag=True,
              help="Compile the step for the slice first (podctl preflight); refuse to start "
              "one that does not fit in HBM.")
@click.option("--xla-dump", is_flag=True, help="Dump each host's HLO (XLA_FLAGS=--xla_dump_to) "
              "into gs://BUCKET/podctl/runs/RUN_ID/xla_dump/host-NNNN/ when the script ends.")
@where_options
@bucket_option
@json_option
@pass_context
def run(ctx: Context, name: str, script: Path, args: tuple[str, ...], workdir: Path | None,
        env_pairs: tuple[str, ...], env_files: tuple[Path, ...], setup: str | None,
        requirements: Path | None, python: str | None, relock: bool, build_on: str, hosts_text: str,
        detach: bool,
        keep_going: bool, via: str | None, resume: str | None, recover: int, retry_errors: bool,
        elastic: bool, min_slices: int | None, shrink_batch: bool, grow_deadline: str | None,
        max_hours: str | None, on_stall: str, stall_after: str | None,
        stall_startup: str | None, on_slow_host: str,
        slow_host_after: str, preflight: bool,
        xla_dump: bool, project: str | None,
        zone: str | None, bucket: str | None, as_json: bool) -> None:
    """Run SCRIPT on every host of slice NAME as one multi-host job; stream its logs.

    The exit code is the job's: 0 when every host exits 0, else the first failure's.
    """

    def action() -> None:
        from podctl import steps
        from podctl.base._sync import run_sync
        from podctl.base.durations import parse_duration
        from podctl.cli.render import emit_json
        from podctl.steps.slow_hosts import SlowHostPolicy
        from podctl.steps.stall import StallPolicy
        from podctl.steps.supervise import Supervision, run_hours, run_supervised

        for option, text in (("--stall-after", stall_after), ("--stall-startup", stall_startup)):
            refuse_blank(text, option)  # '' is a mistake, not "the default"
        hours = run_hours(max_hours, detach)  # checked before anything starts
        _check_watching(detach=detach, recover=recover, retry_errors=retry_errors,
                        stall=on_stall != "wait" or bool(stall_after or stall_startup),
                        slow=on_slow_host != "report")
        stall = StallPolicy(action=on_stall, after=parse_duration(stall_after, "--stall-after")
                            if stall_after else None,
                            startup=parse_duration(stall_startup, "--stall-startup")
                            if stall_startup else None)
        slow = SlowHostPolicy(action=on_slow_host,
                              after=parse_duration(slow_host_after, "--slow-host-after"))
        how = Supervision(recover=recover, retry_errors=retry_errors, max_hours=hours, stall=stall,
                          slow=slow, elastic=_elastic_policy(elastic, recover, min_slices, shrink_batch,
                                                             grow_deadline))
        spec = steps.RunSpec(script=script, args=tuple(args), workdir=workdir,
                             env={**steps.parse_env(list(env_pairs), env_files),
                                  **({"PODCTL_XLA_DUMP": "1"} if xla_dump else {})},
                             setup=setup, requirements=requirements, python=python, relock=relock,
                             build_on=build_on)
        options = steps.RunOptions(spec, hosts=hosts_text, fail_fast=not keep_going, resume=resume,
                                   detach=detach, via=via)
        session = steps.Session.open(ctx.settings(project, zone, bucket))
        if preflight:  # before anything is uploaded or started
            from podctl.cli.preflight_cmds import compile_checked

            info = run_sync(steps.ready_slice(session, name))
            compile_checked(info.accelerator_type, spec, num_slices=info.num_slices)
        out = sys.stderr if as_json else sys.stdout
        started: list[Any] = []

        async def go() -> Any:
            if detach:
                info = await steps.ready_slice(session, name)
                job = await steps.start_run(session, info, options, sink=_line_printer(out),
                                            notice=_notice)
                started.append(job)  # detached: its connections closed, the run left to GCS
                return None
            return await run_supervised(
                session, name, options,
                how,
                sink=_line_printer(out), notice=_notice, on_start=started.append)

        try:
            supervised = run_sync(go())
        except KeyboardInterrupt:
            exit_interrupted(f"run {started[0].run_id} stopped on every host" if started else "")
        job = started[0]
        if supervised is None:
            if as_json:
                emit_json({"run_id": job.run_id, "state": "running", "hosts": len(job.targets)})
            else:
                click.echo(job.run_id)
            return
        _say_end(session, supervised, name=name, script=script, as_json=as_json)

    guarded(action)


def _elastic_policy(elastic: bool, recover: int, min_slices: int | None, shrink_batch: bool,
                    grow_deadline: str | None) -> Any:
    """--elastic and its options as the step's ElasticPolicy (None without --elastic)."""
    from podctl.base.durations import parse_duration
    from podctl.base.errors import UsageError
    from podctl.steps.elastic import ElasticPolicy

    refuse_blank(grow_deadline, "--grow-deadline")  # '' is a mistake, not the default 6h
    if not elastic:
        given = [flag for flag, value in (("--min-slices", min_slices), ("--shrink-batch", shrink_batch),
                                          ("--grow-deadline", grow_deadline)) if value]
        if given:
            raise UsageError(f"{given[0]} goes with --elastic.")
        return None
    if not recover:
        raise UsageError("--elastic goes with --recover N: it acts when the infrastructure ends an attempt.")
    return ElasticPolicy(min_slices=min_slices or 1, shrink_batch=shrink_batch,
                         grow_deadline=parse_duration(grow_deadline, "--grow-deadline")
                         if grow_deadline else ElasticPolicy.grow_deadline)


def _check_watching(*, detach: bool, recover: int, retry_errors: bool, stall: bool, slow: bool) -> None:
    """What needs podctl to watch the run is refused with --detach, before anything starts."""
    from podctl.base.errors import UsageError

    if (recover or retry_errors) and detach:
        raise UsageError("--recover needs podctl to watch the run: drop --detach (or queue "
                         "it: podctl queue add --max-attempts K).")
    if retry_errors and not recover:
        raise UsageError("--retry-errors goes with --recover N.")
    if detach and stall:
        raise UsageError("--on-stall/--stall-after need podctl to watch the run: drop --detach.")
    if detach and slow:
        raise UsageError("--on-slow-host recover needs podctl to watch the run: drop --detach.")


def _say_end(session: Any, supervised: Any, *, name: str, script: Path, as_json: bool) -> NoReturn:
    """A watched run's end: its JSON or its lines, then its exit code."""
    from podctl import steps
    from podctl.base._sync import run_sync
    from podctl.cli.render import emit_json
    from podctl.policy import maintenance
    from podctl.steps.lines import host_name

    recovered, result = supervised.recovered, supervised.result
    if result is None:  # the last attempt's follower was cut off by its slice
        _notice(f"run {supervised.run_id} lost its slice; exit code {supervised.exit_code}")
        sys.exit(supervised.exit_code)
    if as_json:
        emit_json({"run_id": recovered.run_id if recovered else result.run_id,
                   "exit_code": result.exit_code,
                   "failed_host": result.failed.host if result.failed else None,
                   "processes": {str(h): s.process for h, s in sorted(result.statuses.items())},
                   "hosts": {str(h): s.exit_code for h, s in sorted(result.statuses.items())},
                   **({"attempts": [a.to_json() for a in recovered.attempts],
                       "recoveries": recovered.recoveries, "steps_lost": recovered.steps_lost}
                      if recovered else {})})
    if recovered and recovered.recoveries:
        _notice(f"run {recovered.run_id}: {recovered.recoveries} "
                f"recover{'y' if recovered.recoveries == 1 else 'ies'}, "
                f"{recovered.steps_lost} steps lost")
    plan = None if recovered or not result.failed else run_sync(
        maintenance.stopped_for(session.storage, result.run_id))
    if plan is not None:  # stopped cleanly before host maintenance: say how to resume
        _notice(maintenance.stop_message(result.run_id, name, str(script), plan))
    elif supervised.record is not None:  # its end as the record says it (`runs` too)
        _notice(f"run {supervised.run_id} {steps.end_words(supervised.record)}")
    elif result.failed:
        failed = result.failed
        _notice(f"run {result.run_id} failed: {host_name(failed.host, failed.process)} exited "
                f"{result.exit_code}")
    else:
        _notice(f"run {result.run_id} succeeded on {len(result.statuses)} hosts")
    sys.exit(result.exit_code)


@click.command()
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep reading until the run ends.")
@click.option("--host", "host_text", default="0", show_default=True, callback=hosts_checked,
              help="N, N,M or all (host 0 by default, as `podctl run` shows).")
@where_options
@bucket_option
@pass_context
def logs(ctx: Context, run_id: str, follow: bool, host_text: str, project: str | None,
         zone: str | None, bucket: str | None) -> None:
    """Replay a run's logs from GCS from the start (and follow them with --follow).

    A recovered run (--recover) shows each attempt in turn; --follow follows the last."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.steps import Session
        from podctl.steps.lines import host_name
        from podctl.steps.replay import replay

        session = Session.open(ctx.settings(project, zone, bucket))
        replayed = run_sync(replay(session, run_id, _line_printer(sys.stdout), hosts=host_text,
                                   follow=follow, notice=_notice))
        record = replayed.record
        if follow:
            code, failed = replayed.ended()
            if failed is not None:  # say why, as `run` does: an exit code alone says little
                why = ("stopped by podctl" if failed.stopped
                       else failed.error or f"exit code {failed.exit_code}")
                hint = (f"; is slice {record.slice_name} still there? (`podctl status "
                        f"{record.slice_name}`)" if failed.exit_code == EXIT_HOST_LOST else "")
                _notice(f"run {run_id} ended: {host_name(failed.host, failed.process)} failed ({why}){hint}")
            sys.exit(code)

    guarded(action)


@click.command(name="runs")
@where_options
@bucket_option
@json_option
@pass_context
def runs_cmd(ctx: Context, project: str | None, zone: str | None, bucket: str | None,
             as_json: bool) -> None:
    """List runs with their state (newest first); a recovered run once, with its
    recoveries and the steps they cost (its later attempts: --json, or `podctl logs`)."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.cli.render import emit_json
        from podctl.steps import Session, end_words, list_runs

        records = run_sync(list_runs(Session.open(ctx.settings(project, zone, bucket)),
                                     as_shown=True))
        if as_json:
            emit_json([r.to_json() for r in records])
            return
        records = [r for r in records if not r.extra.get("parent")]
        if not records:
            click.echo("no runs yet")
            return
        import time

        click.echo(f"{'RUN':48s} {'STATE':10s} {'EXIT':>8s}  SLICE (HOSTS)  STARTED  SCRIPT")
        for r in records:
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.created))
            code = "-" if r.exit_code is None else str(r.exit_code)
            recoveries = r.extra.get("recoveries") or 0
            recovered = (f"  {recoveries} recover{'y' if recoveries == 1 else 'ies'}, "
                         f"{r.extra.get('steps_lost', 0)} steps lost" if recoveries else "")
            share = r.extra.get("goodput")
            recovered += f"  goodput {share:.0%}" if isinstance(share, (int, float)) else ""
            why = f"  {shown(end_words(r))}" if r.state in ("failed", "stopped", "lost") else ""
            via = shown(str(r.extra.get("via") or "ssh"))  # a record from before channels: ssh
            click.echo(f"{r.run_id:48s} {r.state:10s} exit {code:>3s}  {shown(r.slice_name)} "
                       f"({r.num_hosts} hosts, via {via})  {when} UTC  {shown(r.script or '')}{recovered}{why}")

    guarded(action)


@click.command()
@click.argument("run_id")
@click.option("--no-wait", is_flag=True, help="Return once every host was told to stop.")
@where_options
@bucket_option
@pass_context
def stop(ctx: Context, run_id: str, no_wait: bool, project: str | None, zone: str | None,
         bucket: str | None) -> None:
    """Stop a run (a detached one, or one another terminal follows) on every host, for good.

    As Ctrl-C does: the script gets SIGTERM (the template saves a checkpoint first), and
    when it exits, whatever it left running ends too. Waits until every host has ended.
    A stop is final: `run --recover` and the queue never relaunch a stopped run; a
    recovered run's first id stops its live attempt."""

    def action() -> None:
        from podctl import steps
        from podctl.base._sync import run_sync

        session = steps.Session.open(ctx.settings(project, zone, bucket))
        try:
            result = run_sync(steps.stop_run(session, run_id, wait=not no_wait, notice=_notice))
        finally:
            session.close()
        if not result.stopped:
            _notice(f"run {run_id} is not running ({result.state}, or its slice is gone); "
                    "nothing to stop")
        elif result.between:
            _notice(f"run {result.run_id} stopped: it was between attempts, and none will be "
                    "started (a stop is final)")
        else:
            _notice(f"run {result.run_id} stopped on every host" if not no_wait
                    else f"run {result.run_id}: every host was told to stop")

    guarded(action)


@click.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--hosts", "hosts_text", default="all", show_default=True, callback=hosts_checked,
              help="all, or 0,3.")
@where_options
@pass_context
def exec_cmd(ctx: Context, name: str, command: tuple[str, ...], hosts_text: str,
             project: str | None, zone: str | None) -> None:
    """Run a plain command on the hosts (no bundle), e.g. podctl exec NAME -- python3 -V."""

    def action() -> None:
        from podctl.base._sync import run_sync
        from podctl.steps import Session, exec_on_slice

        session = Session.open(ctx.settings(project, zone))
        codes = run_sync(exec_on_slice(session, name, list(command), _line_printer(sys.stdout),
                                       hosts=hosts_text))
        failed = [(h, c) for h, c in sorted(codes.items()) if c != 0]
        if failed:
            host, code = failed[0]
            _notice(f"host {host:04d} exited {code}" + (f" ({len(failed)} hosts failed)"
                                                         if len(failed) > 1 else ""))
            sys.exit(code)

    guarded(action)


COMMANDS = (run, logs, runs_cmd, stop, exec_cmd)
