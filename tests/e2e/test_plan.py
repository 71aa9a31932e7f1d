"""`podctl plan` answering the buyer's question, each check against a hand-computed figure:
prices with sources in every row, MFU per system with its source, the break-even MFU,
memory fit, the project's bill, the frontier, strict JSON and bad input."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import podctl
from podctl.money import prices
from podctl.policy.planner import fit
from podctl.policy.planner.core import plan
from podctl.policy.planner.frontier import frontier
from tests.cli_in_process import podctl_here
from tests.conftest import assert_one_line_error

REPO = Path(__file__).resolve().parents[2]
FOUR = "v5p-4096,v6e-256,h100-2048,b200-2048"
H100_EAST4 = (78.37241 + 9.46006) / 8  # SkyPilot's us-east4 GPU and host rows, per GPU


def _strict(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# ---- the table -------------------------------------------------------------------------

def test_every_price_row_has_a_source_and_a_date():
    table = tomllib.loads((REPO / "podctl/data/prices.toml").read_text())
    assert len(table["rows"]) >= 40
    for row in table["rows"]:
        assert row["source"] in table["sources"], row
        assert "https://" in table["sources"][row["source"]], row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["as_of"]), row
        assert row["tier"] in prices.TIERS and row["usd"] > 0, row
    keys = [(r["system"], r["region"], r["tier"]) for r in table["rows"]]
    assert len(keys) == len(set(keys))  # one row per system x region x tier
    for system in ("v5p", "v6e", "v5litepod", "v4", "h100", "b200"):
        assert prices.cheapest(system, "on-demand") is not None, system


def test_the_shipped_table_is_what_the_refresh_script_makes_of_the_catalog(tmp_path):
    """tools/refresh_prices.py over the catalog rows the table was made from gives the table
    back: nothing in it was typed by hand but the rows that say so (other sources)."""
    copy = tmp_path / "prices.toml"
    copy.write_text((REPO / "podctl/data/prices.toml").read_text())
    proc = subprocess.run([sys.executable, str(REPO / "tools/refresh_prices.py"),
                           str(REPO / "tools/data/skypilot-gcp-vms-6f65ab5-excerpt.csv"),
                           "--commit", "6f65ab58724c0a5b17dbb81ee124e7d7dee0d4a5",
                           "--as-of", "2026-12-04", "--table", str(copy)],
                          capture_output=True, text=True, check=True)
    assert proc.stdout == copy.read_text()
    # SkyPilot's half-price H100 rows are dropped and named; 700.0 (not sold) never appears
    assert "h100 us-central1 on-demand $5.7526: under 60% of the median" in proc.stderr
    assert "asia-east1" not in {r.region for r in prices.rows() if r.system == "v6e"}


def test_cheapest_region_by_hand():
    # v5p: $4.20 in us-central1, us-east1 and us-east5 (ties go by name); spot $1.2290 in
    # europe-west4 (v5p-12288 $7,550.80397/h / 6144 chips)
    assert (prices.cheapest("v5p", "on-demand").region, prices.cheapest("v5p", "spot").region) == (
        "us-central1", "europe-west4")
    assert prices.cheapest("v5p", "spot").usd_per_unit_hour == pytest.approx(7550.80397 / 6144, abs=1e-6)
    assert prices.lookup("v6e", "europe-west4", "on-demand").usd_per_unit_hour == 2.97
    assert prices.lookup("v5p", "us-south1", "on-demand").usd_per_unit_hour == pytest.approx(4.779)


# ---- the buyer's question ---------------------------------------------------------------

def test_four_systems_the_buyers_comparison_as_printed_and_as_json(podctl):
    """The CLI of tests/unit/test_planner.py's hand-worked 70B x 1T case: MFU with its band
    and source, days with goodput, the band's costs, the regions, the findings."""
    data = _strict(podctl("plan", "--params", "70B", "--tokens", "1T", "--compare", FOUR,
                          "--deadline", "30d", "--json").stdout)
    rows = data["estimates"]
    assert [r["slice"] for r in rows] == FOUR.split(",")
    assert all(r["total_usd"] > 0 and r["price"]["source"] and r["price"]["as_of"] for r in rows)
    assert all(r["mfu_source"] and "http" in r["mfu_source"] for r in rows)
    expected = plan(70e9, 1e12, FOUR.split(","), config={}, deadline_days=30)
    for row, want in zip(rows, expected.rows, strict=True):
        assert (row["mfu"], row["mfu_low"], row["mfu_high"]) == (want.mfu.value, *want.mfu.band)
        assert row["days"] == pytest.approx(want.days) and row["goodput"] == 0.9
        assert row["total_usd_band"] == [pytest.approx(x) for x in want.band_totals]
    assert [r["misses_deadline"] for r in rows] == [False, True, False, False]
    assert data["findings"] == list(expected.findings)
    text = podctl("plan", "--params", "70B", "--tokens", "1T", "--compare", FOUR).stdout
    v6e = next(x for x in text.splitlines() if x.startswith("v6e-256"))
    assert all(w in v6e for w in ["0.51 (0.4373-0.51)", "52.0", "52.0-60.6", "us-central1",
                                  "$862,247.62", "$862,247.62-$1,005,594.07"])
    assert "note: time differs 14.7x" in text
    assert "note: v6e-256 takes 5.3x the days of v5p-4096 (52.0 against 9.9)" in text
    assert "note: at equal chips (2,048): v6e-256: --slice v6e-256 --num-slices 8" in text
    assert "SPOT TOTAL: each system's spot price in its REGION (on-demand's)" in text
    assert "copied: not re-read from the source" in text  # B200's price
    for row in rows:
        line = next(x for x in text.splitlines() if x.startswith(row["slice"]))
        assert f"${row['total_usd']:,.2f}" in line


def test_the_70b_v5p_8192_case_is_still_the_hand_figure(podctl):
    data = _strict(podctl("plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8192",
                          "--mfu", "0.45", "--goodput", "1", "--json").stdout)
    row = data["estimates"][0]
    # (6 x 70e9 + 12 x 80 x 8192 x 8192) x 1e12 = 4.8442450944e23 FLOPs
    assert row["hours"] == pytest.approx(4.8442450944e23 / (4096 * 459e12 * 0.45) / 3600)
    assert round(row["hours"], 1) == 159.1
    assert row["total_usd"] == pytest.approx(4096 * 4.20 * row["hours"])  # $2.74M
    assert round(row["total_usd"] / 1e6, 2) == 2.74


def test_a_plan_that_cannot_fit_says_so_and_suggests_one_that_does(podctl):
    """405B at 2,048 tokens per chip: 405e9 x 20 bytes = 8.1 TB of state and buffer, and
    126 layers x 16,384 width x 2,048 tokens x 2 bytes = 8.46 GB of activations per v5e chip
    (16 GB): 8.1e12 / (16e9 - 8.46e9) = 1,074 chips -> 5 x v5litepod-256."""
    out = podctl("plan", "--params", "405B", "--tokens", "1T", "--slice", "v5litepod-8",
                 "--seq-len", "2048").stdout
    assert "v5litepod-8 does not fit in memory: 1,021.0 GB per chip needed" in out
    assert "smallest that fits: v5litepod-256 --num-slices 5" in out
    five = _strict(podctl("plan", "--params", "405B", "--tokens", "1T", "--slice", "v5litepod-256",
                          "--num-slices", "5", "--seq-len", "2048", "--json").stdout)["estimates"][0]
    assert (five["chips"], five["num_slices"], five["fit"]["fits"]) == (1280, 5, True)
    # at the default 8,192 tokens the activations alone (33.8 GB) exceed a v5e chip
    out = podctl("plan", "--params", "405B", "--tokens", "1T", "--slice", "v5litepod-8").stdout
    assert "the activations alone (33.8 GB) exceed a chip's HBM at any size" in out
    # 70B on one H100 machine: 175 GB of state per GPU against 80 GB
    one = plan(70e9, 1e12, ["h100"], config={}).rows[0]
    assert not one.fit.fits and one.fit.suggestion == "h100-24"
    assert fit.training_bytes(70e9) == pytest.approx(70e9 * 20)


def test_staff_is_exactly_runs_x_hours_x_people_x_rate(podctl):
    args = ("plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-4096", "--mfu", "0.5",
            "--runs", "5", "--people", "3", "--rate", "150", "--json")
    exact = _strict(podctl(*args, "--goodput", "1").stdout)["estimates"][0]
    assert exact["project"]["parts"]["staff"]["usd"] == pytest.approx(5 * exact["hours"] * 3 * 150)
    assert exact["project"]["parts"]["compute"]["usd"] == pytest.approx(5 * exact["total_usd"])
    # with the stated default goodput (0.9) each run's wall-clock is hours / 0.9
    default = _strict(podctl(*args).stdout)["estimates"][0]
    assert default["project"]["goodput"] == 0.9
    assert default["project"]["parts"]["staff"]["usd"] == pytest.approx(
        5 * default["hours"] / 0.9 * 3 * 150)
    # checkpoints: 70B x 16 bytes = 1,120 GB x 3 kept x 5 runs x (hours + 168 h) / 730 h x $0.02
    storage = exact["project"]["parts"]["checkpoint_storage"]["usd"]
    assert storage == pytest.approx(1120 * 3 * 5 * (exact["hours"] + 168) / 730 * 0.02)
    # the dataset in another region: 10 TB x 5 runs x $0.02/GB
    moved = _strict(podctl(*args, "--goodput", "1", "--dataset-tb", "10", "--data-region",
                           "us-east1").stdout)["estimates"][0]
    assert moved["project"]["parts"]["data_transfer"]["usd"] == pytest.approx(10_000 * 5 * 0.02)


def test_tiers_and_regions(podctl):
    one_year = plan(70e9, 1e12, ["v5p-4096"], tier="1y", config={}).rows[0]
    assert (one_year.price.tier, one_year.price.usd_per_chip_hour) == ("1y-cud", 2.94)
    assert one_year.spot_price is None  # a chosen tier is shown alone
    pinned = plan(70e9, 1e12, ["v6e-256"], region="europe-west4-a", config={})
    assert pinned.rows[0].spot_price.region == "europe-west4"
    assert pinned.rows[0].price.usd_per_chip_hour == 2.97 and pinned.region == "europe-west4"
    assert pinned.rows[0].spot_price.usd_per_chip_hour == pytest.approx(0.85833)
    spot = _strict(podctl("plan", "--params", "7B", "--tokens", "1T", "--slice", "v6e-8",
                          "--spot", "--json").stdout)["estimates"][0]
    assert (spot["price"]["tier"], spot["price"]["region"]) == ("spot", "us-central1")
    text = podctl("plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-4096", "--tier",
                  "spot").stdout
    assert "$1.64 per chip-hour, spot, us-central1 (on-demand's cheapest region)" in text
    assert "/ goodput 0.81 = 10.9 days" in text  # 0.9 x (1 - 0.1 preemption loss)
    late = podctl("plan", "--params", "70B", "--tokens", "1T", "--slice", "b200-2048", "--tier",
                  "1y", check=False)
    assert late.returncode == 0 and "b200-2048: no published 1y-cud price" in late.stderr
    committed = podctl("plan", "--params", "70B", "--tokens", "1T", "--tier", "1y", "--compare",
                       "v5p-4096,v6e-256,h100-2048").stdout
    assert "$7.62 per GPU-hour, 1y-cud, us-central1 (cheapest region)" in committed


def test_the_python_api_returns_dataclasses():
    result = podctl.plan("7B", "1T", "v5p-128,h100-64", mfu={"h100": 0.4})
    assert dataclasses.is_dataclass(result) and all(dataclasses.is_dataclass(r) for r in result.rows)
    assert result.row("h100-64").mfu.value == 0.4 and result.row("h100-64").mfu.source == "--mfu"
    assert result.rows[0].mfu.source.startswith("https://")  # published, with where from
    front = podctl.frontier("7B", "1T", ["v5p"], deadline_days=30)
    assert dataclasses.is_dataclass(front) and front.points


# ---- time against money -----------------------------------------------------------------

def test_the_frontier_picks_the_cheapest_plan_under_a_deadline():
    """70B x 1T on v6e at a fixed MFU 0.4: every size costs the same per token, so the
    cheapest within 30 days (720 h of wall-clock at goodput 0.9) is the smallest that
    finishes: chips >= 4.8442e23 / (918e12 x 0.4 x 720 x 3600 x 0.9) = 565.5 -> v6e-256 x 4
    (1,024 chips): 357.9 h, 16.6 days, $1,099,366."""
    front = frontier(70e9, 1e12, ["v6e"], deadline_days=30, budget_usd=2e6, mfu=0.4, config={})
    pick = front.cheapest_within_deadline
    assert pick.system.name == "v6e-256 x 4"
    hours = 4.8442450944e23 / (1024 * 918e12 * 0.4) / 3600
    assert pick.hours == pytest.approx(hours) and pick.days == pytest.approx(hours / 0.9 / 24)
    assert pick.total_usd == pytest.approx(1024 * 2.70 * hours / 0.9)
    assert round(pick.total_usd) == 1_099_366
    # fastest within $2M: the largest considered (16,384 chips), all costing the same
    assert front.fastest_within_budget.system.chips == 16384
    # with published MFU (v6e's across slices by v5e's measured column) the pick still finishes
    falling = frontier(70e9, 1e12, ["v6e", "h100"], deadline_days=30, config={})
    assert falling.cheapest_within_deadline.days <= 30


def test_the_frontier_prints_and_draws(podctl, tmp_path):
    out = podctl("plan", "--frontier", "--params", "70B", "--tokens", "1T", "--systems", "v6e,b200",
                 "--deadline", "30d", "--budget", "2M", "-o", str(tmp_path / "f.png")).stdout
    assert "cheapest within 30 days: v6e-256 x " in out and "fastest within $2,000,000.00" in out
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    podctl("plan", "--frontier", "--params", "7B", "--tokens", "1T", "--systems", "v5p",
           "-o", str(tmp_path / "f.html"))
    assert "data:image/png;base64," in (tmp_path / "f.html").read_text()
    data = _strict(podctl("plan", "--frontier", "--params", "70B", "--tokens", "1T",
                          "--deadline", "1d", "--json").stdout)
    assert data["points"] and data["cheapest_within_deadline"]["days"] <= 1


# ---- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--slice", "v5p-8"], ["--compare", FOUR], ["--compare", FOUR, "--tier", "3y"],
    ["--compare", "v5litepod-8,h100", "--region", "europe-west1"],
    ["--slice", "b200-8", "--spot"], ["--slice", "v6e-256", "--num-slices", "4", "--runs", "3"],
])
def test_json_is_strict_for_every_input(tmp_path, args):
    # in this process (tests/cli_in_process.py): the JSON is the command's, not the process's
    data = _strict(podctl_here(tmp_path, "plan", "--params", "70B", "--tokens", "1T", *args, "--json",
                               check=True).stdout)
    assert data["estimates"]


@pytest.mark.parametrize("args, words", [
    (["--params", "1e300", "--tokens", "1e300", "--slice", "v5p-8"], ["overflows"]),
    (["--params", "70B", "--tokens", "1e400", "--slice", "v5p-8"], ["--tokens", "too large"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--zone", "mars-north9-z"],
     ["--zone mars-north9-z", "unknown region 'mars-north9'"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--region", "atlantis1"],
     ["--region atlantis1", "unknown region"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--tier", "2y"], ["--tier", "1y"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--goodput", "1.5"], ["--goodput"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--people", "nan"], ["--people"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "h100-8", "--num-slices", "2"],
     ["--num-slices is for TPU slices"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--budget", "2M"], ["--frontier"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--compare", "v6e-8"],
     ["--slice plans one system and --compare several"]),
    (["--params", "70B", "--tokens", "1T", "--frontier", "--budget", "lots"], ["US dollars"]),
    (["--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--zone", "us-east5-a", "--region",
      "us-east5"], ["choose one"]),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, words):
    # in this process; plan's refusal through a `podctl` process is test_cost.py's
    # test_plan_refuses_nonsense_through_a_podctl_process
    assert_one_line_error(podctl_here(tmp_path, "plan", *args), 2, *words)


def test_a_system_named_twice_is_folded(podctl):
    data = _strict(podctl("plan", "--params", "70B", "--tokens", "1T", "--compare",
                          "v5p-4096,h100-2048,V5P-4096,h100-2048", "--json").stdout)
    assert [e["slice"] for e in data["estimates"]] == ["v5p-4096", "h100-2048"]


def test_plan_imports_nothing_heavy():
    code = ("import sys, podctl.policy.planner.core, podctl.policy.planner.frontier\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('google', 'asyncssh', 'jax', "
            "'matplotlib', 'rich')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
