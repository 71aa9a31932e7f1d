"""`podctl plan --from-preflight FILE --tokens D`: the run priced with the FLOPs per step
that `podctl preflight` compiled (FLOPs/step x D / tokens per step) instead of 6·N·D,
and the memory figure it compiled in place of fit.py's rule of thumb."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from podctl.base.errors import InvalidValueError
from podctl.base.topology import parse_slice
from podctl.money import cost


def compiled_fit(data: dict[str, Any]) -> dict[str, Any] | None:
    """The compiled memory figure (per chip, x chips) in the shape of `plan`'s fit: it
    replaces plan's rule of thumb (podctl/policy/planner/fit.py) when a preflight file is given."""
    hbm, chips = data.get("hbm") or {}, int(data.get("chips") or 0)
    if not hbm.get("needed_bytes") or not hbm.get("per_chip_bytes") or not chips:
        return None
    need, have = float(hbm["needed_bytes"]) * chips, float(hbm["per_chip_bytes"]) * chips
    return {"fits": need <= have, "needed_bytes": need, "capacity_bytes": have,
            "rule": "compiled by podctl preflight, per chip x chips", "suggestion": None}


def plan_from_preflight(data: dict[str, Any], path: Path, tokens_text: str,
                        slice_type: str | None, *, mfu: float | None, spot: bool,
                        price: float | None, zone: Callable[[], str | None]) -> dict[str, Any]:
    """DATA (`podctl preflight --json`, read from PATH) priced for D = TOKENS_TEXT tokens
    in ZONE() (asked once the options are checked; None: only a PRICE given prices it)
    -> `plan --from-preflight --json`."""
    tokens = cost.parse_count(tokens_text, "--tokens")
    if slice_type and parse_slice(slice_type).name != data["slice"]:
        raise InvalidValueError(f"{path} was compiled for {data['slice']}, not {slice_type}: "
                                f"run `podctl preflight --slice {slice_type} ...` for that size.")
    chosen, source = ((cost.check_mfu(mfu), "--mfu") if mfu is not None
                      else (cost.DEFAULT_MFU, "assumed; pass --mfu"))
    cost.check_price(price)
    where = zone()
    generation = cost.generation_of(data["slice"])
    chip_price = (cost.chip_hour_price(where, spot=spot, override=price, generation=generation)
                  if where else cost.chip_hour_price("-", spot=spot, override=price,
                                                    generation=generation) if price else None)
    per_step, per_step_tokens = float(data["flops"]["per_step"]), int(data["tokens_per_step"])
    chips = int(data["chips"])
    peak = float((data.get("predicted") or {}).get("peak_flops_per_chip")
                 or parse_slice(data["slice"]).generation.peak_flops_per_chip)
    steps = tokens / per_step_tokens
    flops = per_step * steps
    hours = flops / (chips * peak * chosen) / 3600
    per_hour = chips * chip_price.usd_per_chip_hour if chip_price else None
    total = per_hour * hours if per_hour is not None else None
    six = data["flops"].get("six_n_tokens")
    return {"slice": data["slice"], "num_slices": data.get("num_slices", 1), "chips": chips,
            "tokens": tokens, "tokens_per_step": per_step_tokens, "steps": steps,
            "flops_per_step": per_step, "flops": flops,
            "six_n_d": six * steps if six else None, "mfu": chosen, "mfu_source": source,
            "peak_flops_per_chip": peak, "hours": hours, "days": hours / 24,
            "usd_per_hour": per_hour, "total_usd": total,
            "usd_per_million_tokens": total / (tokens / 1e6) if total is not None else None,
            "price": chip_price.to_json() if chip_price else None, "zone": where,
            "price_note": None if chip_price else cost.unknown_price_message(where, generation),
            "from_preflight": str(path), "fit": compiled_fit(data)}
