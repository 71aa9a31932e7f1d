"""podctl preflight; the preflight parts of plan, run and queue add."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from podctl.vocabulary import PREFLIGHT_TIMEOUT_SECONDS
from podctl.cli.common import Context, ScriptCommand, guarded
from podctl.cli.slice_cmds import json_option, pass_context


def _notice(text: str) -> None:
    click.echo(f"podctl: {text}", err=True)


def _mib_or_gib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB" if abs(n) < 2**30 else f"{n / 2**30:,.2f} GiB"


def render(r: Any, err: bool = False) -> None:
    """The human report of one PreflightResult: each figure with its working."""
    from podctl.cost import fmt_count

    j = r.to_json()
    t, h, f, p = r.target, j["hbm"], j["flops"], j["predicted"]
    where = f"{t.slice_type}{'' if t.num_slices == 1 else f' x {t.num_slices}'}"
    compiled = "compiled" if j["compiled"] else "stopped by the compiler"
    rows = [("preflight", f"{r.script} on {where} ({t.topology_name}, {t.chips} chips), "
                          f"{compiled} in {j['compile_seconds']} s (lowered in {j['lower_seconds']} s)")]
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


def compile_checked(slice_type: str, script: Path, args: list[str], *, num_slices: int = 1,
                    mfu: float | None = None, quiet: bool = False) -> Any:
    """Compile; print one line (fits) or the report (does not fit), then raise
    DoesNotFitError (exit 1) when it does not fit. Used by run/queue add --preflight."""
    from podctl import preflight
    from podctl.cost import check_mfu

    _notice(f"preflight: compiling {script.name} for {slice_type}"
            f"{'' if num_slices == 1 else f' x {num_slices}'} with libtpu ...")
    result = preflight.compile_for(slice_type, script, list(args), num_slices=num_slices,
                                   mfu=check_mfu(mfu) if mfu is not None else preflight.DEFAULT_MFU)
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
@click.option("--num-slices", default=1, show_default=True, type=int, metavar="K",
              help="Multislice: K slices over the data-center network.")
@click.option("--mfu", type=float, default=None,
              help="MFU for the predicted step time (default 0.45, assumed).")
@click.option("--timeout", "timeout_s", default=PREFLIGHT_TIMEOUT_SECONDS, show_default=True, type=float,
              metavar="SECONDS", help="Give up on a compile after this long.")
@json_option
@pass_context
def preflight(ctx: Context, script: Path, args: tuple[str, ...], slice_type: str, num_slices: int,
              mfu: float | None, timeout_s: float, as_json: bool) -> None:
    """Compile SCRIPT's training step for a TPU slice with the real TPU compiler, here,
    with no cloud: HBM per chip (fits or not), FLOPs per step, predicted step time.

    \b
    podctl preflight --slice v5p-8 templates/train_pjit.py --d-model 1024 --layers 24
    podctl preflight --slice v5p-4096 train.py ... --json > pre.json
    podctl plan --from-preflight pre.json --tokens 1T

    Exits 1 when the step does not fit. SCRIPT defines preflight(argv, devices): see
    README.md, "Preflight" (templates/train_pjit.py has it).
    """

    def action() -> None:
        from podctl import preflight as lib
        from podctl.cli.render import emit_json
        from podctl.cost import check_mfu

        chosen = check_mfu(mfu) if mfu is not None else lib.DEFAULT_MFU
        result = lib.compile_for(slice_type, script, list(args), num_slices=num_slices,
                                 mfu=chosen, timeout=timeout_s)
        if as_json:
            emit_json(result.to_json())
        else:
            render(result)
            if mfu is None:
                _notice(f"MFU {lib.DEFAULT_MFU} assumed for the prediction; pass --mfu")
        lib.require_fit(result)

    guarded(action)


def _compiled_fit(data: dict[str, Any]) -> dict[str, Any] | None:
    """The compiled memory figure (per chip, x chips) in the shape of `plan`'s fit: it
    replaces plan's rule of thumb (podctl/planner/fit.py) when a preflight file is given."""
    hbm, chips = data.get("hbm") or {}, int(data.get("chips") or 0)
    if not hbm.get("needed_bytes") or not hbm.get("per_chip_bytes") or not chips:
        return None
    need, have = float(hbm["needed_bytes"]) * chips, float(hbm["per_chip_bytes"]) * chips
    return {"fits": need <= have, "needed_bytes": need, "capacity_bytes": have,
            "rule": "compiled by podctl preflight, per chip x chips", "suggestion": None}


def plan_from_preflight(ctx: Context, path: Path, tokens_text: str, slice_name: str | None,
                        mfu: float | None, spot: bool, price: float | None, zone: str | None,
                        as_json: bool) -> None:
    """`podctl plan --from-preflight FILE --tokens D`: the run priced with the compiled
    FLOPs per step (FLOPs/step x D / tokens per step) instead of 6·N·D."""
    from podctl import cost
    from podctl import preflight as lib
    from podctl.cli.plan_cmd import plan_zone as _plan_zone
    from podctl.cli.plan_render import short_source as _short_source
    from podctl.cli.render import emit_json
    from podctl.errors import InvalidValueError

    data = lib.load_result(path)
    tokens = cost.parse_count(tokens_text, "--tokens")
    if slice_name and cost.parse_slice(slice_name).name != data["slice"]:
        raise InvalidValueError(f"{path} was compiled for {data['slice']}, not {slice_name}: "
                                f"run `podctl preflight --slice {slice_name} ...` for that size.")
    chosen, source = ((cost.check_mfu(mfu), "--mfu") if mfu is not None
                      else (cost.DEFAULT_MFU, "assumed; pass --mfu"))
    cost.check_price(price)
    where = _plan_zone(ctx, zone)
    generation = cost.generation_of(data["slice"])
    chip_price = (cost.chip_hour_price(where, spot=spot, override=price, generation=generation)
                  if where else cost.chip_hour_price("-", spot=spot, override=price,
                                                     generation=generation) if price else None)
    per_step, per_step_tokens = float(data["flops"]["per_step"]), int(data["tokens_per_step"])
    chips = int(data["chips"])
    peak = float((data.get("predicted") or {}).get("peak_flops_per_chip")
                 or cost.parse_slice(data["slice"]).generation.peak_flops_per_chip)
    steps = tokens / per_step_tokens
    flops = per_step * steps
    hours = flops / (chips * peak * chosen) / 3600
    per_hour = chips * chip_price.usd_per_chip_hour if chip_price else None
    total = per_hour * hours if per_hour is not None else None
    six = data["flops"].get("six_n_tokens")
    report = {"slice": data["slice"], "num_slices": data.get("num_slices", 1), "chips": chips,
              "tokens": tokens, "tokens_per_step": per_step_tokens, "steps": steps,
              "flops_per_step": per_step, "flops": flops,
              "six_n_d": six * steps if six else None, "mfu": chosen, "mfu_source": source,
              "peak_flops_per_chip": peak, "hours": hours, "days": hours / 24,
              "usd_per_hour": per_hour, "total_usd": total,
              "usd_per_million_tokens": total / (tokens / 1e6) if total is not None else None,
              "price": chip_price.to_json() if chip_price else None, "zone": where,
              "price_note": None if chip_price else cost.unknown_price_message(where, generation),
              "from_preflight": str(path), "fit": _compiled_fit(data)}
    if as_json:
        emit_json(report)
        return
    rows = [
        ("FLOPs/step", f"{per_step:.3e} compiled for {data['slice']} ({path}; XLA cost_analysis "
                       "+ loop trips)"),
        ("steps", f"{cost.fmt_count(tokens)} tokens / {per_step_tokens:,} tokens per step = "
                  f"{steps:,.0f}"),
        ("FLOPs", f"{per_step:.3e} x {steps:,.0f} = {flops:.3e}"
                  + (f" (6·N·D would be {six * steps:.3e})" if six else "")),
        ("chips", f"{chips} ({data['slice']}) x {peak / 1e12:g} TFLOP/s peak (bf16) = "
                  f"{chips * peak:.3e} FLOP/s"),
        ("MFU", f"{chosen:g} ({source})"),
        *([("memory", f"{'fits' if report['fit']['fits'] else 'does NOT fit'}: "
                      f"{report['fit']['needed_bytes'] / 1e12:,.3f} TB needed, "
                      f"{report['fit']['capacity_bytes'] / 1e12:,.3f} TB of HBM "
                      f"({report['fit']['rule']})")] if report["fit"] else []),
        ("time", f"{flops:.3e} / ({chips * peak:.3e} x {chosen:g}) = {hours:,.1f} h "
                 f"({hours / 24:,.1f} days)"),
    ]
    if chip_price:
        p = chip_price
        rows += [("price", f"${p.usd_per_chip_hour:.2f} per chip-hour, {p.tier}, {p.region} "
                           f"({_short_source(p.source)})"),
                 ("$/hour", f"{chips} chips x ${p.usd_per_chip_hour:.2f} = {cost.fmt_usd(per_hour)}"),
                 ("total", f"{cost.fmt_usd(per_hour)} x {hours:,.1f} h = {cost.fmt_usd(total)}"),
                 ("$/M tokens", cost.fmt_usd(report["usd_per_million_tokens"]))]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
    if not chip_price:
        _notice(report["price_note"])


COMMANDS = (preflight,)
