"""Prices, `podctl plan` arithmetic against hand-worked cases, numbers as typed, the
metrics a run's host-0 log carries, and `podctl cost` / `ls` against the fake cloud."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from podctl.money import cost
from podctl.base.errors import ConfigError, InvalidValueError
from podctl.host import run_layout
from podctl.jobs import run_record
from podctl.host.agent_logs import LogShipper
from podctl.jobs.metrics import parse_records, read_metrics, summarize
from podctl.jobs.run_record import RunRecord
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import Storage
from tests.conftest import assert_one_line_error


def _metric_lines(platform: str = "tpu") -> list[str]:
    lines = ["booting...", json.dumps({"kind": "config", "params": 70, "devices": 8, "processes": 2,
                                       "platform": platform, "mesh": {"data": 8}, "batch": 8,
                                       "seq_len": 1024, "peak_flops_per_s": 459e12, "start_step": 0})]
    lines.append(json.dumps({"kind": "step", "step": 1, "loss": 9.0, "step_time_s": 60.0,
                             "tokens_per_s": 136.5, "mfu": 0.01, "compile": True}))
    for k, mfu in enumerate([0.40, 0.42, 0.44, 0.46, 0.48, 0.50, 0.52, 0.54, 0.56, 0.58], start=2):
        lines.append(json.dumps({"kind": "step", "step": k, "loss": 9.0 - k / 10, "step_time_s": 300.0,
                                 "tokens_per_s": 27.3, "mfu": mfu if platform != "cpu" else None}))
        lines.append("some other line {not json")
    lines += [json.dumps({"kind": "checkpoint", "step": 11}),
              json.dumps({"kind": "done", "step": 11, "loss": 7.9, "wall_s": 3100.0})]
    return lines


def test_shipped_table_has_dated_sourced_v5p_figures():
    on_demand = cost.chip_hour_price("us-east5-a", spot=False, config={}, generation="v5p")
    spot = cost.chip_hour_price("us-east5-a", spot=True, config={}, generation="v5p")
    assert (on_demand.usd_per_chip_hour, on_demand.tier, on_demand.region) == (4.20, "on-demand", "us-east5")
    assert spot.usd_per_chip_hour == pytest.approx(1.68)  # SkyPilot: v5p-12288 $10,321.92/h / 6144 chips
    assert "skypilot-catalog" in on_demand.source and on_demand.as_of == "2026-12-04"
    cud = cost.chip_hour_price("us-east5-a", spot=False, config={}, generation="v5p", tier="1y-cud")
    assert cud.usd_per_chip_hour == 2.94 and "cloud.google.com/tpu/pricing" in cud.source


def test_an_unknown_region_is_none_and_says_what_to_do():
    assert cost.chip_hour_price("europe-west1-b", spot=False, config={}, generation="v6e") is None
    assert cost.slice_hourly_cost("v6e-8", "europe-west1-b", spot=False) is None
    assert cost.unknown_price_message("europe-west1-b", "v5p") == (
        "price unknown for europe-west1; pass --price or set [prices] in podctl.toml")


def test_overrides_win_in_order():
    config = {"on-demand": 5.0, "us-central1": {"on-demand": 6.0}, "us-central1-b": {"spot": 1.0}}
    v5p = {"generation": "v5p", "config": config}
    assert cost.chip_hour_price("us-central1-a", spot=False, override=3.0, **v5p).source == "--price"
    assert cost.chip_hour_price("us-central1-a", spot=False, **v5p).usd_per_chip_hour == 6.0
    assert cost.chip_hour_price("us-central1-b", spot=True, **v5p).usd_per_chip_hour == 1.0
    assert cost.chip_hour_price("us-east5-a", spot=False, **v5p).usd_per_chip_hour == 5.0
    assert cost.chip_hour_price("us-east5-a", spot=True, **v5p).usd_per_chip_hour == pytest.approx(1.68)
    with pytest.raises(InvalidValueError, match="above 0"):
        cost.chip_hour_price("us-east5-a", spot=False, override=-1.0, generation="v5p")


def test_prices_from_podctl_toml(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "podctl.toml").write_text('zone = "us-central1-a"\n[prices]\nspot = 1.5\n'
                                         '[prices.us-central1]\non-demand = 4.0\n')
    assert cost.slice_hourly_cost("v5p-8", "us-central1-a", spot=False) == 16.0
    assert cost.chip_hour_price("us-central1-a", spot=True, generation="v5p").source == \
        "podctl.toml [prices]"
    (tmp_path / "podctl.toml").write_text("[prices]\non-demand = \"cheap\"\n")
    with pytest.raises(ConfigError, match="USD per chip-hour"):
        cost.load_price_config()


def test_slice_hourly_cost_counts_the_chips():
    assert cost.slice_hourly_cost("v5p-8", "us-east5-a", spot=False) == pytest.approx(16.80)
    assert cost.slice_hourly_cost("v5p-4096", "us-east5-a", spot=False) == pytest.approx(8601.60)
    assert cost.slice_hourly_cost("v5p-4096", "us-east5-a", spot=True, override=1.0) == 2048.0


@pytest.mark.parametrize("text, value", [
    ("70B", 70e9), ("7b", 7e9), ("1T", 1e12), ("1.5e12", 1.5e12), ("500M", 500e6),
    ("1_000", 1000.0), ("2k", 2000.0), ("1e3", 1000.0),
])
def test_counts_as_people_type_them(text, value):
    assert cost.parse_count(text, "--params") == value


@pytest.mark.parametrize("text", ["", "abc", "0", "-1", "1Q", "nan", "1e999"])
def test_bad_counts_are_refused(text):
    with pytest.raises(InvalidValueError, match="--tokens"):
        cost.parse_count(text, "--tokens")


def test_70b_on_1t_tokens_on_v5p_4096_at_half_mfu_is_about_248_hours():
    price = cost.chip_hour_price("us-east5-a", spot=False, config={}, generation="v5p")
    e = cost.estimate("v5p-4096", params=70e9, tokens=1e12, mfu=0.5, price=price)
    # by hand: 6 * 70e9 * 1e12 = 4.2e23 FLOPs; 2048 chips * 459e12 * 0.5 = 4.70016e17 FLOP/s
    assert e.flops == pytest.approx(4.2e23)
    assert e.hours == pytest.approx(4.2e23 / 4.70016e17 / 3600)
    assert round(e.hours, 1) == 248.2
    assert e.usd_per_hour == pytest.approx(2048 * 4.20)
    assert e.total_usd == pytest.approx(2_135_076.25, abs=0.01)  # $8,601.60/h x 248.2185 h
    assert e.usd_per_million_tokens == pytest.approx(e.total_usd / 1e6)


def test_a_small_hand_worked_case_and_mfu_bounds():
    e = cost.estimate("v5p-8", params=1e9, tokens=1e10, mfu=1.0, price=None)
    assert e.seconds == pytest.approx(6e19 / (4 * 459e12))  # 32,680 s
    assert e.total_usd is None and e.usd_per_million_tokens is None
    for bad in (0.0, -0.1, 1.01, float("nan")):
        with pytest.raises(InvalidValueError, match=r"\(0, 1\]"):
            cost.estimate("v5p-8", params=1e9, tokens=1e10, mfu=bad, price=None)


def test_summary_of_metric_lines():
    m = summarize(parse_records(_metric_lines()))
    assert (m.steps, m.final_step, m.final_loss, m.ended, m.platform) == (11, 11, 7.9, "done", "tpu")
    assert m.median_mfu == pytest.approx(0.49)  # the compile step's 0.01 is left out
    assert m.productive_seconds == 3000.0
    assert m.tokens == 11 * 8 * 1024
    assert m.checkpoints == [11]
    assert summarize(parse_records(_metric_lines("cpu"))).median_mfu is None

