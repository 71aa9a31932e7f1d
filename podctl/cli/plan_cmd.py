"""podctl plan: what training a model costs, in dollars and days, on TPU slices and GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from podctl.cli.common import AMOUNT, COUNT, Context, Number, bucket_option, guarded, refuse_blank
from podctl.cli.slice_cmds import json_option, pass_context, where_options


def _notice(text: str) -> None:
    click.echo(f"podctl: {text}", err=True)


def _run_facts(ctx: Context, run_id: str, project: str | None, zone: str | None,
               bucket: str | None) -> tuple[Any, Any]:
    """RUN_ID's measured metrics and bill (steps.run_cost), for --mfu-from / --goodput-from."""
    from podctl.base._sync import run_sync
    from podctl.steps import Session
    from podctl.steps.run_cost import run_cost, run_metrics

    session = Session.open(ctx.settings(project, zone, bucket))
    try:
        bill = run_sync(run_cost(session, run_id))  # a clear error for a run that is not there
        return run_sync(run_metrics(session, run_id)), bill
    finally:
        session.close()


def measured_mfu(metrics: Any, run_id: str) -> Any:
    from podctl.base.errors import InvalidValueError
    from podctl.policy.planner.mfu import MfuFigure

    if metrics.median_mfu is None:
        if not metrics.steps:
            raise InvalidValueError(f"run {run_id} logged no training steps (no JSON step lines "
                                    "on host 0); pass --mfu.")
        raise InvalidValueError(f"run {run_id} measured no MFU (it ran on "
                                f"{metrics.platform or 'an unknown platform'}); pass --mfu.")
    timed = metrics.steps - 1 if metrics.steps > 1 else metrics.steps
    return MfuFigure(metrics.median_mfu, f"measured by run {run_id} (median of {timed} steps, "
                                         "compile excluded)")


def _money(text: str | None, option: str) -> float | None:
    """US dollars as typed: '2M', '$2.5M', '2500000'."""
    from podctl.base.errors import InvalidValueError
    from podctl.base.numbers import parse_count

    if text is None:
        return None
    try:
        return parse_count(text.strip().lstrip("$"), option)
    except InvalidValueError:
        raise InvalidValueError(f"{option} {text!r}: expected US dollars above zero, e.g. 2M, "
                                "$2.5M or 2500000.") from None


@click.command()
@click.option("--params", "params_text", default=None, metavar="N",
              help="Model parameters: 70B, 7b, 500M, 1.5e12.")
@click.option("--from-preflight", "from_preflight", default=None, metavar="FILE",
              type=click.Path(path_type=Path),
              help="Price with the compiled FLOPs per step of `podctl preflight --json > FILE`.")
@click.option("--tokens", "tokens_text", required=True, metavar="D", help="Training tokens: 1T, 2e12.")
@click.option("--slice", "slice_type", default=None, metavar="TYPE",
              help="One system: v5p-N, v6e-N, v5litepod-N, v4-N, or h100-N, b200-N (N GPUs).")
@click.option("--compare", "--systems", "compare", default=None, metavar="A,B,...",
              help="Systems side by side: TPU slices of any generation and GPU reference "
                   "systems h100-N, b200-N (Google Cloud A3 / A4 machines). With --frontier: "
                   "families (default v5p,v6e,h100,b200).")
@click.option("--num-slices", default=1, show_default=True, type=COUNT,
              help="TPU slices of that type (multislice).")
@click.option("--mfu", "mfu_text", default=None, metavar="MFU|SYS=MFU,...",
              help="MFU in (0, 1], for all or per system: 0.5, or v5p=0.5,h100=0.4 (default: "
                   "published runs per system and size, printed with their source).")
@click.option("--mfu-from", default=None, metavar="RUN_ID", help="Use the MFU a run measured.")
@click.option("--tier", default=None, metavar="TIER",
              help="on-demand, spot, 1y or 3y (committed use); default: on-demand, spot beside it.")
@click.option("--spot", is_flag=True, help="Same as --tier spot.")
@click.option("--price", "price_text", default=None, metavar="USD|SYS=USD,...",
              help="Price per chip (GPU) hour, for all or per system: 4.20, or v6e=2.7,b200=6 "
                   "(default: podctl.toml [prices], else the shipped table).")
@click.option("--region", default=None, help="Price in this region (default: each system's "
                                             "cheapest; --zone pins one too).")
@click.option("--runs", default=1, show_default=True, type=COUNT,
              help="Runs the project trains (ablations, restarts).")
@click.option("--people", default=0.0, show_default=True, type=AMOUNT,
              help="People paid while the runs train.")
@click.option("--rate", default=0.0, show_default=True, type=AMOUNT, metavar="USD_PER_HOUR",
              help="What one person costs per hour.")
@click.option("--goodput", default=None, type=Number(above=0, high=1),
              help="Share of billed time that trains (default 0.9, assumed).")
@click.option("--goodput-from", default=None, metavar="RUN_ID", help="Use the goodput a run measured.")
@click.option("--checkpoints-kept", default=3, show_default=True, type=Number(whole=True, low=0))
@click.option("--dataset-tb", default=0.0, show_default=True, type=AMOUNT,
              help="Dataset size in TB, moved to the chips once per run.")
@click.option("--data-region", default=None, metavar="REGION|internet",
              help="Where the dataset is (default: the chips' region: no egress).")
@click.option("--egress-usd-per-gb", default=None, type=AMOUNT, help="Your own egress price.")
@click.option("--seq-len", default=8192, show_default=True, type=Number(whole=True, low=128),
              help="Tokens per sequence: attention's FLOPs (12·L·H·Q·T per token) and the "
                   "activations of the memory fit grow with it.")
@click.option("--batch-per-chip", default=1, show_default=True, type=COUNT,
              help="Sequences per chip per step (the fit's activations).")
@click.option("--remat", default="full", show_default=True, type=click.Choice(["full", "none"]),
              help="Rematerialization: full keeps each layer's input (2 bytes x width per "
                   "token per layer), none keeps everything (34 bytes).")
@click.option("--frontier", is_flag=True, help="Every size of each system: days against dollars.")
@click.option("--deadline", default=None, metavar="DURATION",
              help="Mark the rows that miss it, e.g. 30d; with --frontier: the cheapest plan "
                   "that finishes within it.")
@click.option("--budget", "budget_text", default=None, metavar="USD",
              help="With --frontier: the fastest plan within it, e.g. 2M.")
@click.option("-o", "--output", default=None, type=click.Path(path_type=Path),
              metavar="FILE.png|FILE.html", help="With --frontier: draw it there.")
@where_options
@bucket_option
@json_option
@pass_context
def plan(ctx: Context, params_text: str | None, from_preflight: Path | None, tokens_text: str,
         slice_type: str | None, compare: str | None, num_slices: int, mfu_text: str | None,
         mfu_from: str | None, tier: str | None, spot: bool, price_text: str | None,
         region: str | None, runs: int, people: float, rate: float, goodput: float | None,
         goodput_from: str | None, checkpoints_kept: int, dataset_tb: float,
         data_region: str | None, egress_usd_per_gb: float | None, seq_len: int,
         batch_per_chip: int, remat: str, frontier: bool,
         deadline: str | None, budget_text: str | None, output: Path | None,
         project: str | None, zone: str | None, bucket: str | None, as_json: bool) -> None:
    """How long a model trains and what it costs: (6·N + 12·L·H·Q·T)·D FLOPs at MFU of the
    chips' peak (MFU from published throughput, with its band), on a TPU slice or several
    systems side by side (TPU against GPU), each priced in its cheapest region, spot in the
    same one (only --zone or --region given here pins one; a default zone from the
    environment does not), days with goodput, with the project's whole bill.

    \b
    podctl plan --params 70B --tokens 1T --slice v5p-4096
    podctl plan --params 70B --tokens 1T --compare v5p-4096,v6e-256,h100-2048,b200-2048
    podctl plan --params 70B --tokens 1T --slice v5p-4096 --region us-east5 --tier spot \\
        --runs 5 --people 3 --rate 150
    podctl plan --params 70B --tokens 1T --slice v6e-256 --seq-len 32768 --remat none
    podctl plan --frontier --params 70B --tokens 1T --deadline 30d -o frontier.png
    """

    def action() -> None:
        from podctl.base import numbers
        from podctl.base.errors import InvalidValueError
        from podctl.cli import plan_render as render
        from podctl.cli.render import emit_json
        from podctl.policy import compare as cmp

        _refuse_blanks({"--params": params_text, "--tokens": tokens_text, "--slice": slice_type,
                        "--compare": compare, "--mfu": mfu_text, "--mfu-from": mfu_from, "--tier": tier,
                        "--price": price_text, "--region": region, "--goodput-from": goodput_from,
                        "--data-region": data_region, "--deadline": deadline, "--budget": budget_text})
        if from_preflight is not None:
            return _from_preflight()
        _refuse_conflicts(params=params_text is not None, mfu=mfu_text is not None, mfu_from=mfu_from,
                          goodput=goodput is not None, goodput_from=goodput_from, spot=spot, tier=tier,
                          zone=zone, region=region, slice_and_compare=bool(slice_type and compare),
                          frontier_only=not frontier and bool(budget_text or output))
        assert params_text is not None  # _refuse_conflicts refused its absence
        names = [n.strip() for n in compare.split(",") if n.strip()] if compare else []
        if slice_type:
            names = [slice_type]
        if not names and not frontier:
            raise InvalidValueError("which slice? pass --slice v5p-N (or --compare v5p-A,h100-B).")
        mfus = cmp.parse_per_system(mfu_text, "--mfu", numbers.check_mfu)
        prices = cmp.parse_per_system(price_text, "--price", numbers.check_price)
        if not frontier:
            mfus.check_names("--mfu", names)
            prices.check_names("--price", names)
        measured, gp = _measured(ctx, mfu_from, goodput_from, project, zone, bucket)
        args: dict[str, Any] = dict(
            mfu=mfus, tier="spot" if spot else tier, region=zone or region, price=prices,
            runs=runs, people=people, rate=rate, goodput=gp[0] if gp else goodput,
            goodput_source=gp[1] if gp else None, checkpoints_kept=checkpoints_kept,
            dataset_tb=dataset_tb, data_region=data_region, egress_usd_per_gb=egress_usd_per_gb,
            measured_mfu=measured, where_option="--zone" if zone else "--region",
            seq_len=seq_len, batch_per_chip=batch_per_chip, remat=remat,
            goodput_measured=gp is not None)
        if frontier:
            return _frontier(names, args, render, emit_json)
        from podctl.base.durations import parse_duration
        from podctl.policy.planner.core import plan as make_plan

        days = parse_duration(deadline, "--deadline") / 86400 if deadline else None
        result = make_plan(params_text, tokens_text, names, num_slices=num_slices,
                           deadline_days=days, **args)
        if as_json:
            emit_json(result.to_json())
        elif len(result.rows) == 1:
            render.print_one(result)
        else:
            render.print_table(result)
        for note in (*result.warnings, *result.notes) if not as_json else ():
            _notice(note)

    def _frontier(names: list[str], args: dict[str, Any], render: Any, emit_json: Any) -> None:
        from podctl.base.durations import parse_duration
        from podctl.policy.planner import frontier as lib

        days = parse_duration(deadline, "--deadline") / 86400 if deadline else None
        front = lib.frontier(params_text or "", tokens_text, names or list(lib.DEFAULT_SYSTEMS),
                             deadline_days=days, budget_usd=_money(budget_text, "--budget"), **args)
        if output is not None:
            lib.draw(front, output)
        if as_json:
            emit_json(front.to_json())
        else:
            render.print_frontier(front, output)

    def _from_preflight() -> None:
        from podctl.base import numbers
        from podctl.base.errors import InvalidValueError
        from podctl.cli.preflight_cmds import plan_from_preflight

        assert from_preflight is not None
        if params_text or compare or mfu_from or frontier:
            raise InvalidValueError("--from-preflight has the FLOPs per step: drop --params, "
                                    "--compare, --frontier and --mfu-from.")
        plan_from_preflight(ctx, from_preflight, tokens_text, slice_type,
                            _one_number(mfu_text, "--mfu", numbers.check_mfu), spot,
                            _one_number(price_text, "--price", numbers.check_price), zone, as_json)

    guarded(action)


def _refuse_blanks(texts: dict[str, str | None]) -> None:
    """'' is a mistake, not "the default": `--tier ''` planned on-demand, `--deadline ''`
    no deadline, `--mfu ''` the published figure, each without a word."""
    for option, text in texts.items():
        refuse_blank(text, option)


def _refuse_conflicts(*, params: bool, mfu: bool, mfu_from: str | None, goodput: bool,
                      goodput_from: str | None, spot: bool, tier: str | None, zone: str | None,
                      region: str | None, slice_and_compare: bool, frontier_only: bool) -> None:
    """Options that contradict each other, or are missing, in one line each."""
    from podctl.base.errors import InvalidValueError

    if not params:
        raise InvalidValueError("how large a model? pass --params N (or --from-preflight FILE).")
    if mfu and mfu_from:
        raise InvalidValueError("--mfu and --mfu-from both give the MFU: choose one.")
    if goodput and goodput_from:
        raise InvalidValueError("--goodput and --goodput-from both give the goodput: choose one.")
    if spot and tier and tier != "spot":
        raise InvalidValueError(f"--spot and --tier {tier}: choose one.")
    if zone and region:
        raise InvalidValueError("--zone and --region both pin where to price: choose one.")
    if slice_and_compare:
        raise InvalidValueError("--slice plans one system and --compare several: choose one "
                                "(put the slice in --compare's list).")
    if frontier_only:
        raise InvalidValueError("--budget and -o belong to --frontier.")


def _measured(ctx: Context, mfu_from: str | None, goodput_from: str | None, project: str | None,
              zone: str | None, bucket: str | None) -> tuple[Any, tuple[float, str] | None]:
    """(MFU measured by --mfu-from's run, (goodput, its source) by --goodput-from's), each
    None where not asked; one reading per run."""
    from podctl.base.errors import InvalidValueError

    measured: Any = None
    gp: tuple[float, str] | None = None
    for run_id in dict.fromkeys(r for r in (mfu_from, goodput_from) if r):
        metrics, run_bill = _run_facts(ctx, run_id, project, zone, bucket)
        if run_id == mfu_from:
            measured = measured_mfu(metrics, run_id)
        if run_id == goodput_from:
            if run_bill.goodput is None:
                raise InvalidValueError(f"run {run_id} has no billed time yet; pass --goodput.")
            gp = (run_bill.goodput, f"measured by run {run_id}")
    return measured, gp


def _one_number(text: str | None, flag: str, check: Any) -> float | None:
    """A single --mfu / --price value (a preflight prices one slice, not several systems)."""
    from podctl.base.errors import InvalidValueError
    from podctl.base.numbers import plain_number

    if text is None:
        return None
    value = plain_number(text)
    if value is None:
        raise InvalidValueError(f"{flag} with --from-preflight is one number, not {text!r}.")
    check(value)
    return value


COMMANDS = (plan,)
