"""`podctl plan --compare` as a user runs it: the table and the JSON against the hand-worked
figures of tests/unit/test_compare.py's docstring (70B params, 1T tokens), and bad input."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_one_line_error


def test_plan_compares_tpu_against_gpu_side_by_side(podctl):
    args = ("plan", "--params", "70B", "--tokens", "1T", "--compare", "v5p-4096,h100-1024,b200-512",
            "--mfu", "v5p=0.5,h100=0.4,b200=0.4", "--price", "v5p=4.20", "--zone", "us-east4-a")
    proc = podctl(*args)
    lines = proc.stdout.splitlines()
    # the unit test's hours at the default goodput 0.9: days = hours / 0.9 / 24, cost / 0.9
    assert "sequence 8,192: 4.844e+23 FLOPs (6ND + attention) on every system" in lines[0]
    assert lines[1].split()[:4] == ["SYSTEM", "CHIPS", "PEAK/CHIP", "MFU"]
    v5p = next(line for line in lines if line.startswith("v5p-4096"))
    assert all(w in v5p for w in ["2048", "459 TF", "0.5", "13.3", "$4.20",
                                  "$2,736,199.", "$2.74"])
    h100 = next(line for line in lines if line.startswith("h100-1024"))
    assert all(w in h100 for w in ["1024", "989 TF", "0.4", "15.4", "$10.98",
                                   "$4.15", "GPU: comparison only"])
    b200 = next(line for line in lines if line.startswith("b200-512"))
    assert "13.5" in b200 and "?" in b200  # pinned to us-east4, where no B200 price is known
    assert "podctl provisions only TPUs" in proc.stdout
    assert "b200-512: no on-demand price for b200 in us-east4; cheapest: us-central1" in proc.stderr
    data = json.loads(podctl(*args, "--json").stdout)
    assert [(e["slice"], e["kind"], e["provisioned_by_podctl"]) for e in data["estimates"]] == [
        ("v5p-4096", "tpu", True), ("h100-1024", "gpu", False), ("b200-512", "gpu", False)]
    assert data["estimates"][1]["total_usd"] == pytest.approx(1024 * 10.979059 * 332.1753 / 0.9, rel=1e-5)
    assert [e["mfu"] for e in data["estimates"]] == [0.5, 0.4, 0.4]
    # a plain --mfu still works, for every system
    single = podctl.json("plan", "--params", "70B", "--tokens", "1T", "--compare",
                         "v6e-256,h100-1024", "--mfu", "0.5", "--zone", "us-east5-b")
    assert [e["mfu"] for e in single["estimates"]] == [0.5, 0.5]


def test_plan_compare_says_plainly_that_tpu7x_has_no_published_price(podctl):
    """The issue's comparison: TPU7x priced where a price is given, else said to have none
    published (with where podctl looked), never a guessed figure."""
    args = ("plan", "--params", "70B", "--tokens", "1T", "--compare", "v5p-4096,v6e-256,tpu7x-4096,b200-2048")
    proc = podctl(*args)
    tpu7x = next(line for line in proc.stdout.splitlines() if line.startswith("tpu7x-4096"))
    assert "2048" in tpu7x and "2307 TF" in tpu7x and "?" in tpu7x
    assert "tpu7x-4096: no published price" in proc.stderr and "cloud.google.com/tpu/pricing" in proc.stderr
    priced = podctl.json(*args, "--price", "tpu7x=5", "--mfu", "tpu7x=0.4")
    row = next(e for e in priced["estimates"] if e["slice"] == "tpu7x-4096")
    assert row["provisioned_by_podctl"] is True and row["total_usd"] > 0


def test_plan_of_one_gpu_system_says_podctl_does_not_provision_it(podctl):
    out = podctl("plan", "--params", "7B", "--tokens", "100B", "--slice", "h100-64", "--mfu",
                 "0.4", "--zone", "us-central1-a").stdout
    assert "64 GPUs (h100-64: 8 x a3-highgpu-8g) x 989 TFLOP/s" in out
    assert "podctl provisions only TPUs" in out


@pytest.mark.parametrize("args, words", [
    (["--compare", "v5p-8,a100-8"], ["unknown TPU generation", "h100-N"]),
    (["--compare", "v5p-8,h100-7"], ["multiple of 8"]),
    (["--compare", "v5p-8,v7x-8"], ["is written tpu7x-N"]),
    (["--compare", "v5p-8,h100-8", "--mfu", "h100=2"], ["(0, 1]"]),
    (["--compare", "v5p-8,h100-8", "--price", "h100=-1"], ["--price", "above 0"]),
    (["--compare", "v5p-8,h100-8", "--mfu", "lots"], ["SYSTEM=NUMBER"]),
    (["--compare", "v5p-8,h100-8", "--mfu", "v5=0.5"], ["no system 'v5'"]),
])
def test_plan_compare_refuses_nonsense_in_one_line(podctl, args, words):
    proc = podctl("plan", "--params", "70B", "--tokens", "1T", *args, check=False)
    assert_one_line_error(proc, 2, *words)


