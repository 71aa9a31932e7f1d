"""`podctl plan --compare`: TPU slices of every generation against GPU reference systems,
row by row against hand-worked figures.

Hand-worked, for 70B params and 1T tokens at the default sequence of 8,192 (Llama 3 70B's
80 layers x 8,192 width): FLOPs = (6 x 70e9 + 12 x 80 x 8192 x 8192) x 1e12 =
(4.2e11 + 6.4424509440e10) x 1e12 = 4.8442450944e23; goodput 1 (so cost = $/h x hours).
- v5p-4096 at MFU 0.5 in us-east5: 2048 chips x 459e12 x 0.5 = 4.70016e17 FLOP/s;
  4.8442450944e23 / 4.70016e17 / 3600 = 286.2932 h; $4.20 x 2048 = $8,601.60/h; x 286.2932 h
  = $2,462,579.21; / 1e6 tokens-millions = $2.4626 per million tokens.
- h100-1024 (128 x a3-highgpu-8g) at MFU 0.4 in us-east4: 1024 GPUs x 989e12 x 0.4 =
  4.050944e17 FLOP/s; 332.1753 h; SkyPilot's us-east4 rows: ($78.37241 GPUs + $9.46006
  host) / 8 = $10.979059 per GPU-hour; x 1024 = $11,242.56/h; x 332.1753 h = $3,734,499.8;
  $3.7345 per million tokens.
- v6e-256 at 0.45: 256 x 918e12 x 0.45 = 1.057536e17 FLOP/s; 1272.414 h; $2.70/chip-h.
- b200-512 (64 x a4-highgpu-8g) at 0.4: 512 x 2250e12 x 0.4 = 4.608e17 FLOP/s; 292.019 h;
  $11.28 per GPU-hour in us-central1.
"""

from __future__ import annotations

import pytest

from podctl.base.errors import InvalidSliceError, InvalidValueError
from podctl.money import cost
from podctl.policy import compare
from podctl.policy.planner.core import plan

P, D = 70e9, 1e12


def _row(name: str, mfu: float, region: str | None, price: float | None = None):
    return plan(P, D, [name], mfu=mfu, region=region, price=price, config={}, goodput=1.0).rows[0]


def test_tpu_row_against_hand_worked_figures():
    e = _row("v5p-4096", 0.5, "us-east5-a")
    assert (e.system.kind, e.system.chips, e.system.peak_flops_per_chip) == ("tpu", 2048, 459e12)
    assert e.six_nd == pytest.approx(4.2e23) and e.flops == pytest.approx(4.8442450944e23)
    assert e.hours == pytest.approx(286.2932, rel=1e-6)
    assert e.usd_per_hour == pytest.approx(8601.60)
    assert e.total_usd == pytest.approx(2_462_579.21, rel=1e-6)
    assert e.usd_per_million_tokens == pytest.approx(2.4626, rel=1e-4)


def test_gpu_row_against_hand_worked_figures():
    e = _row("h100-1024", 0.4, "us-east4")
    assert (e.system.kind, e.system.chips, e.system.peak_flops_per_chip, e.system.detail) == (
        "gpu", 1024, 989e12, "128 x a3-highgpu-8g")
    assert e.hours == pytest.approx(332.1753, rel=1e-6)
    assert e.price.usd_per_chip_hour == pytest.approx((78.37241 + 9.46006) / 8, abs=1e-6)
    assert e.usd_per_hour == pytest.approx(1024 * 10.979059, rel=1e-6)
    assert e.total_usd == pytest.approx(1024 * 10.979059 * 332.1753, rel=1e-5)
    assert e.usd_per_million_tokens == pytest.approx(3.7345, rel=1e-4)
    assert "skypilot-catalog" in e.price.source and e.price.as_of == "2026-12-04"
    assert e.to_json()["provisioned_by_podctl"] is False


def test_every_system_the_issue_names_has_a_price_without_a_zone():
    for name, region, usd in (("v6e-256", "us-central1", 2.70), ("b200-512", "us-central1", 11.28),
                              ("h100-1024", "us-east4", 10.979059), ("v5p-4096", "us-central1", 4.20)):
        e = _row(name, 0.4, None)
        assert (e.price.region, e.price.usd_per_chip_hour) == (region, pytest.approx(usd)), name
    b200 = _row("b200-512", 0.4, None)
    assert (b200.hours, b200.system.detail) == (pytest.approx(292.019, rel=1e-6), "64 x a4-highgpu-8g")
    priced = _row("b200-512", 0.4, None, price=6.0)
    assert priced.usd_per_hour == pytest.approx(3072.0) and priced.price.source == "--price"
    assert _row("h100", 0.4, None).system.chips == 8  # a bare GPU key is one machine


@pytest.mark.parametrize("name, zone, price", [
    ("v5litepod-256", "us-central1-a", 1.20), ("v4-4096", "us-central2-b", 3.22),
    ("v5p-8", "us-east5-a", 4.20), ("v6e-8", "europe-west4-a", 2.97), ("v5p-8", "us-south1-a", 4.779),
])
def test_every_generation_is_priced_from_its_own_rows(name, zone, price):
    e = _row(name, 0.5, zone)
    assert e.price.usd_per_chip_hour == pytest.approx(price)
    assert e.system.peak_flops_per_chip == cost.parse_slice(name).generation.peak_flops_per_chip


def test_per_system_settings():
    mfus = compare.parse_per_system("0.45,v5p=0.5,h100-1024=0.3", "--mfu", cost.check_mfu)
    assert mfus.for_system("v5p-4096") == 0.5
    assert mfus.for_system("h100-1024") == 0.3 and mfus.for_system("h100-64") == 0.45
    assert compare.parse_per_system("0.5", "--mfu", cost.check_mfu).for_system("b200-8") == 0.5
    assert compare.parse_per_system(None, "--mfu", cost.check_mfu).for_system("v5p-8") is None
    with pytest.raises(InvalidValueError, match=r"\(0, 1\]"):
        compare.parse_per_system("v5p=1.5", "--mfu", cost.check_mfu)
    with pytest.raises(InvalidValueError, match="SYSTEM=NUMBER"):
        compare.parse_per_system("v5p:0.5", "--mfu", cost.check_mfu)
    with pytest.raises(InvalidValueError, match="multiple of 8"):
        compare.resolve("h100-12")
    with pytest.raises(InvalidSliceError, match="GPU reference systems: h100-N"):
        compare.resolve("a100-8")


def test_podctl_toml_prices_per_generation(tmp_path, monkeypatch):
    config = {"on-demand": 5.0, "v6e": {"on-demand": 2.9, "us-east5": {"spot": 1.1}}}
    assert cost.chip_hour_price("us-east5-b", spot=False, config=config,
                                generation="v6e").usd_per_chip_hour == 2.9
    assert cost.chip_hour_price("us-east5-b", spot=True, config=config,
                                generation="v6e").usd_per_chip_hour == 1.1
    # plain [prices] is v5p's, as before generations; it never prices another generation
    assert cost.chip_hour_price("us-east5-b", spot=False, config=config,
                                generation="v5p").usd_per_chip_hour == 5.0
    assert cost.chip_hour_price("us-central1-a", spot=False, config={"on-demand": 5.0},
                                generation="v5litepod").usd_per_chip_hour == 1.20  # shipped
    assert "[prices.v6e]" in cost.unknown_price_message("us-east5-b", "v6e")
    # a plan without a region takes the user's own figure over the shipped cheapest
    assert plan(P, D, ["v6e-256"], config=config).rows[0].price.usd_per_chip_hour == 2.9
    monkeypatch.chdir(tmp_path)
    (tmp_path / "podctl.toml").write_text('[prices.v6e]\non-demand = "cheap"\n')
    with pytest.raises(cost.ConfigError, match="USD per chip-hour"):
        cost.load_price_config()

