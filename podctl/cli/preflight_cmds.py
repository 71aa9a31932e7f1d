"""podctl preflight; the preflight parts of plan, run and queue add."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from podctl.base.vocabulary import PREFLIGHT_TIMEOUT_SECONDS
from podctl.cli.common import COUNT, POSITIVE, Context, Number, ScriptCommand, guarded
from podctl.cli.slice_cmds import json_option, pass_context

if TYPE_CHECKING:
    from podctl.steps import RunSpec


def _notice(text: str) -> None:
    click.echo(f"podctl: {text}", err=True)


def _mib_or_gib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB" if abs(n) < 2**30 else f"{n / 2**30:,.2f} GiB"


def render(r: Any, err: bool = False) -> None:
    """The human report of one PreflightResult: each figure with its working."""
    from podctl.base.numbers import fmt_count

    j = r.to_json()
    t, h, f, p = r.target, j["hbm"], j["flops"], j["predicted"]
    where = f"{t.slice_type}{'' if t.num_slices == 1 else f' x {t.num_slices}'}"
    compiled = "compiled" if j["compiled"] else "stopped by the compiler"
    rows = [("preflight", f"{r.script} on {where} ({t.topology_name}, {t.chips} chips), "
                          f"{compiled} in {j['compile_seconds']} s (lowered in {j['lower_seconds']} s)"),
            ("compiler", r.versions_line())]
    if j["compiled"]:
        rows.append(("HBM/chip", f"arguments {_mib_or_gib(h['arguments_bytes'])} + outputs "
                     f"{_mib_or_gib(h['outputs_bytes'])} - aliased {_mib_or_gib(h['aliased_bytes'])}"
                     f" + temporaries {_mib_or_gib(h['temporaries_bytes'])} + code "
                     f"{_mib_or_gib(h['code_bytes'])} = {_mib_or_gib(h['needed_bytes'])}"))
    else:
        rows.append(("HBM/chip", f"arguments {_mib_or_gib(h['arguments_bytes'])} (from their "
                     f"shardings) + temporaries {_mib_or_gib(h['temporaries_bytes'])} (the "
                     f"compiler: {h['compiler_message']}) = {_mib_or_gib(h['needed_bytes'])}"))
    verdict = (f"fits: {_mib_or_gib(h['headroom_bytes'])} headroom "
               f"({h['headroom_bytes'] / h['per_chip_bytes']:.0%})" if r.fits else
               f"DOES NOT FIT: {_mib_or_gib(-h['headroom_bytes'])} missing")
    rows.append(("fit", f"{_mib_or_gib(h['needed_bytes'])} of {_mib_or_gib(h['per_chip_bytes'])} "
                        f"({t.generation}): {verdict}"))
    if f["per_step"]:
        six = (f"; 6·N·tokens = 6 x {fmt_count(j['params'])} x {j['tokens_per_step']:,} = "
               f"{f['six_n_tokens']:.3e} (compiled/6ND = {f['ratio_to_six_n_tokens']:.2f})"
               if f["six_n_tokens"] else "")
        rows.append(("FLOPs/step", f"XLA cost_analysis {f['xla_cost_analysis']:.3e} + loop trips "
                     f"{f['loop_trips_added']:.3e} = {f['per_step']:.3e}{six}"))
        if f["loops_unknown_trips"]:
            rows.append(("", f"{f['loops_unknown_trips']} while loop(s) of unknown trip count "
                             "counted once"))
        tps = p["tokens_per_second"]
        rows.append(("predicted", f"{f['per_step']:.3e} / ({t.chips} chips x "
                     f"{t.peak_flops_per_chip / 1e12:g} TFLOP/s x MFU {p['mfu']:g}) = "
                     f"{p['step_seconds']:.4g} s/step"
                     + (f", {tps:,.0f} tokens/s" if tps else "")))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}", err=err)


def compile_checked(slice_type: str, spec: RunSpec, *, num_slices: int = 1,
                    mfu: float | None = None, quiet: bool = False) -> Any:
    """Compile with the jax and libtpu the run's hosts will get (its requirements, as the
    run finds them); print one line (fits) or the report (does not fit), then raise
    DoesNotFitError (exit 1) when it does not fit. Used by run/queue add --preflight."""
    from podctl.base.numbers import check_mfu
    from podctl.policy import preflight
    from podctl.steps.preflight_env import compile_env

    env = compile_env(spec, notice=_notice)
    _notice(f"preflight: compiling {spec.script.name} for {slice_type}"
            f"{'' if num_slices == 1 else f' x {num_slices}'} with libtpu ...")
    result = preflight.compile_for(slice_type, spec.script, list(spec.args), num_slices=num_slices,
                                   mfu=check_mfu(mfu) if mfu is not None else preflight.DEFAULT_MFU,
                                   env=env)
    _notice(f"preflight: {result.versions_line()}")
    if result.fits:
        _notice(f"preflight: fits {slice_type}: {preflight.gib(result.hbm_needed)} of "
                f"{preflight.gib(result.hbm_capacity)} HBM per chip "
                f"({preflight.gib(result.headroom)} headroom), compiled in "
                f"{result.raw.get('compile_s')} s")
        return result
    if not quiet:
        render(result, err=True)
    return preflight.require_fit(result)


@click.command(cls=ScriptCommand)
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--slice", "slice_type", required=True, metavar="TYPE",
              help="The slice to compile for, any generation (nothing is created).")
@click.option("--num-slices", default=1, show_default=True, type=COUNT, metavar="K",
              help="Multislice: K slices over the data-center network.")
@click.option("--mfu", type=Number(above=0, high=1), default=None,
              help="MFU for the predicted step time (default 0.45, assumed).")
@click.option("--timeout", "timeout_s", default=PREFLIGHT_TIMEOUT_SECONDS, show_default=True, type=POSITIVE,
              metavar="SECONDS", help="Give up on a compile after this long.")
@click.option("--workdir", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="The run's directory, whose requirements.txt the hosts get (default: the script's).")
@click.option("--requirements", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="The hosts' requirements, as `podctl run --requirements` (default: the workdir's "
                   "requirements.txt).")
@click.option("--python", default=None, metavar="X.Y",
              help="The hosts' Python, as `podctl run --python` (default: as the run would choose).")
@click.option("--relock", is_flag=True, help="Resolve the requirements anew, as `podctl run --relock`.")
@click.option("--client-env", is_flag=True,
              help="Compile with this machine's jax and libtpu, not the hosts' environment.")
@json_option
@pass_context
def preflight(ctx: Context, script: Path, args: tuple[str, ...], slice_type: str, num_slices: int,
              mfu: float | None, timeout_s: float, workdir: Path | None, requirements: Path | None,
              python: str | None, relock: bool, client_env: bool, as_json: bool) -> None:
    """Compile SCRIPT's training step for a TPU slice with the real TPU compiler, here,
    with no cloud: HBM per chip (fits or not), FLOPs per step, predicted step time.

    \b
    podctl preflight --slice v5p-8 templates/train_pjit.py --d-model 1024 --layers 24
    podctl preflight --slice v5p-4096 --json train.py ... > pre.json
    podctl plan --from-preflight pre.json --tokens 1T

    The compile uses the jax and libtpu the run's hosts will get: its requirements
    (the workdir's requirements.txt, or --requirements) locked as `podctl run` locks
    them, built here once with uv; with no requirements, this machine's.

    Exits 1 when the step does not fit. SCRIPT defines preflight(argv, devices): see
    docs/guides/preflight.md (templates/train_pjit.py has it).
    """

    def action() -> None:
        from podctl.base.numbers import check_mfu
        from podctl.cli.render import emit_json
        from podctl.policy import preflight as lib
        from podctl.steps import RunSpec
        from podctl.steps.preflight_env import compile_env

        chosen = check_mfu(mfu) if mfu is not None else lib.DEFAULT_MFU
        spec = RunSpec(script=script, args=args, workdir=workdir, requirements=requirements,
                       python=python, relock=relock)
        spec.check()
        env = compile_env(spec, client=client_env, notice=_notice)
        result = lib.compile_for(slice_type, script, list(args), num_slices=num_slices,
                                 mfu=chosen, timeout=timeout_s, env=env)
        if as_json:
            emit_json(result.to_json())
        else:
            render(result)
            if mfu is None:
                _notice(f"MFU {lib.DEFAULT_MFU} assumed for the prediction; pass --mfu")
        lib.require_fit(result)

    guarded(action)


def plan_from_preflight(ctx: Context, path: Path, tokens_text: str, slice_type: str | None,
                        mfu: float | None, spot: bool, price: float | None, zone: str | None,
                        as_json: bool) -> None:
    """`podctl plan --from-preflight FILE --tokens D`: the run priced with the compiled
    FLOPs per step (FLOPs/step x D / tokens per step) instead of 6·N·D
    (podctl/policy/planner/from_preflight.py)."""
    from podctl.base.numbers import fmt_count, fmt_usd
    from podctl.cli.common import plan_zone as _plan_zone
    from podctl.cli.plan_render import short_source as _short_source
    from podctl.cli.render import emit_json
    from podctl.policy import preflight as lib
    from podctl.policy.planner import from_preflight

    data = lib.load_result(path)
    report = from_preflight.plan_from_preflight(data, path, tokens_text, slice_type, mfu=mfu,
                                                spot=spot, price=price,
                                                zone=lambda: _plan_zone(ctx, zone))
    if as_json:
        emit_json(report)
        return
    per_step, steps, flops = report["flops_per_step"], report["steps"], report["flops"]
    chips, peak, chosen = report["chips"], report["peak_flops_per_chip"], report["mfu"]
    hours, per_hour, p = report["hours"], report["usd_per_hour"], report["price"]
    rows = [
        ("FLOPs/step", f"{per_step:.3e} compiled for {report['slice']} ({path}; XLA cost_analysis "
                       "+ loop trips)"),
        ("steps", f"{fmt_count(report['tokens'])} tokens / {report['tokens_per_step']:,} tokens "
                  f"per step = {steps:,.0f}"),
        ("FLOPs", f"{per_step:.3e} x {steps:,.0f} = {flops:.3e}"
                  + (f" (6·N·D would be {report['six_n_d']:.3e})" if report["six_n_d"] else "")),
        ("chips", f"{chips} ({report['slice']}) x {peak / 1e12:g} TFLOP/s peak (bf16) = "
                  f"{chips * peak:.3e} FLOP/s"),
        ("MFU", f"{chosen:g} ({report['mfu_source']})"),
        *([("memory", f"{'fits' if report['fit']['fits'] else 'does NOT fit'}: "
                      f"{report['fit']['needed_bytes'] / 1e12:,.3f} TB needed, "
                      f"{report['fit']['capacity_bytes'] / 1e12:,.3f} TB of HBM "
                      f"({report['fit']['rule']})")] if report["fit"] else []),
        ("time", f"{flops:.3e} / ({chips * peak:.3e} x {chosen:g}) = {hours:,.1f} h "
                 f"({hours / 24:,.1f} days)"),
    ]
    if p:
        rows += [("price", f"${p['usd_per_chip_hour']:.2f} per chip-hour, {p['tier']}, "
                           f"{p['region']} ({_short_source(p['source'])})"),
                 ("$/hour", f"{chips} chips x ${p['usd_per_chip_hour']:.2f} = {fmt_usd(per_hour)}"),
                 ("total", f"{fmt_usd(per_hour)} x {hours:,.1f} h = {fmt_usd(report['total_usd'])}"),
                 ("$/M tokens", fmt_usd(report["usd_per_million_tokens"]))]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
    if not p:
        _notice(report["price_note"])


COMMANDS = (preflight,)
