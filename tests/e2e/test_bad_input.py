"""Bad input is refused in one line, exit 2, before anything is made or stored: numbers
only in ASCII digits and finite (Python's int() reads '１６', float() reads 'nan' and
'inf'), whole numbers within the queue's 64-bit columns, no '' read as "the default",
and names the queue keeps within a length it says."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from podctl.base.errors import ConfigError, InvalidValueError
from podctl.base.numbers import WHOLE_HIGHEST, parse_hosts_text, parse_number, plain_number
from podctl.queue import add as adding
from podctl.queue.interface import Quota
from podctl.queue.place import toml_shares
from podctl.steps import RunSpec
from tests.conftest import assert_one_line_error

HUGE = str(10 ** 30)
LONG = "t" * 10_000


# ---- the command line: each refused by click's own parsing or the command's first check,
# before a cloud is asked or a store opened (in this process: click's runner, the real
# parsing and error guard of `podctl`; the exit code and stderr as a user sees them) ----

@pytest.fixture
def typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from click.testing import CliRunner

    from podctl.cli.main import cli

    (tmp_path / "t.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str) -> subprocess.CompletedProcess:
        result = CliRunner().invoke(cli, ["--backend", "fake", *args], prog_name="podctl")
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.mark.parametrize("args, words", [
    (["queue", "add", "--slice", "v5p-8", "--max-cost", "inf", "t.py"], ["--max-cost 'inf'", "finite"]),
    (["queue", "add", "--slice", "v5p-8", "--max-cost", "nan", "t.py"], ["--max-cost 'nan'"]),
    (["queue", "add", "--slice", "v5p-8", "--max-cost", "-5", "t.py"], ["--max-cost -5", "above 0"]),
    (["queue", "add", "--slice", "v5p-8", "--max-hours", "inf", "t.py"], ["--max-hours 'inf'"]),
    (["queue", "add", "--slice", "v5p-１６", "t.py"], ["'v5p-１６'", "whole number"]),
    (["queue", "add", "--slice", "v5p-8", "--priority", HUGE, "t.py"], ["--priority", str(WHOLE_HIGHEST)]),
    (["queue", "add", "--slice", "v5p-8", "--name", LONG, "t.py"], ["--name is 10,000 characters", "1-63"]),
    (["queue", "add", "--slice", "v5p-8", "--max-attempts", "３", "t.py"], ["--max-attempts '３'"]),
    (["queue", "quota", "set", "bob", "--chip-hours-week", "nan"], ["--chip-hours-week 'nan'"]),
    (["queue", "quota", "set", "bob", "--chip-hours-week", "inf"], ["--chip-hours-week 'inf'"]),
    (["queue", "quota", "set", "bob", "--chip-hours-week", "-1"], ["--chip-hours-week -1", "0 or more"]),
    (["queue", "quota", "set", "bob", "--max-chips", HUGE], ["--max-chips", str(WHOLE_HIGHEST)]),
    (["queue", "quota", "set", LONG, "--max-chips", "8"], ["NAME is 10,000 characters", "1-254"]),
    (["queue", "team", "set", LONG, "bob"], ["NAME is 10,000 characters", "1-63"]),
    (["queue", "cancel", HUGE], ["ENTRY_ID", str(WHOLE_HIGHEST)]),
    (["up", "--slice", "v5p-8", "--num-slices", "２"], ["--num-slices '２'"]),
    (["up", "--slice", "v5p-8", "--max-cost", "inf"], ["--max-cost 'inf'"]),
    (["up", "--slice", "v5p-8", "--zone", ""], ["--zone is empty"]),
    (["up", "--slice", "v5p-8", "--timeout", "２h"], ["'２h' is not a duration"]),
    (["run", "--hosts", "", "s", "t.py"], ["--hosts ''"]),
    (["run", "--bucket", "", "s", "t.py"], ["--bucket is empty"]),
    (["run", "--recover", "１", "s", "t.py"], ["--recover '１'"]),
    (["logs", "--host", "", "r"], ["--host ''"]),
    (["plan", "--params", "7B", "--tokens", "1T", "--slice", "v5p-8", "--goodput", "nan"], ["--goodput 'nan'"]),
    (["cost", "--people", "-2", "r"], ["--people -2"]),
    # last session's options: --api, --elastic's, plan's fit and deadline, queue add's API
    (["--api", "bogus", "ls"], ["'--api'", "'bogus'", "'tpu', 'compute'"]),
    (["up", "--slice", "tpu7x-12"], ["'tpu7x-12'", "nearest: tpu7x-8, tpu7x-16"]),
    (["--api", "compute", "up", "--slice", "v4-8"], ["Compute Engine makes no TPU v4", "--api tpu"]),
    (["--api", "tpu", "up", "--slice", "tpu7x-8"], ["tpu7x-8", "Compute Engine: leave --api out"]),
    (["run", "--elastic", "s", "t.py"], ["--elastic goes with --recover N"]),
    (["run", "--recover", "1", "--shrink-batch", "s", "t.py"], ["--shrink-batch goes with --elastic"]),
    (["run", "--recover", "1", "--elastic", "--min-slices", "0", "s", "t.py"], ["--min-slices 0", "1 to"]),
    (["run", "--recover", "1", "--elastic", "--min-slices", "２", "s", "t.py"], ["--min-slices '２'"]),
    (["run", "--recover", "1", "--elastic", "--grow-deadline", "0", "s", "t.py"],
     ["--grow-deadline", "longer than zero"]),
    (["run", "--recover", "1", "--elastic", "--grow-deadline", "-1h", "s", "t.py"], ["'-1h' is not a duration"]),
    (["run", "--recover", "1", "--elastic", "--grow-deadline", "", "s", "t.py"], ["--grow-deadline is empty"]),
    (["run", "--stall-after", "", "s", "t.py"], ["--stall-after is empty"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--seq-len", "64"], ["--seq-len 64", "128"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--seq-len", "nan"], ["--seq-len 'nan'"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--remat", "some"], ["'--remat'", "'some'"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--batch-per-chip", "0"],
     ["--batch-per-chip 0"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--batch-per-chip", "0.5"],
     ["--batch-per-chip '0.5'"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--deadline", "0"],
     ["--deadline", "longer than zero"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--deadline", ""], ["--deadline is empty"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--frontier", "--deadline", "soon"], ["'soon' is not a duration"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--tier", ""], ["--tier is empty"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--tier", "5y"], ["--tier '5y'"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--mfu", ""], ["--mfu is empty"]),
    (["plan", "--params", "70B", "--tokens", "1T", "--slice", "v5p-8", "--region", ""], ["--region is empty"]),
    (["--api", "compute", "queue", "add", "--slice", "v5p-8", "t.py"], ["keeps no API", "queue tick --api compute"]),
    (["queue", "add", "--slice", "v5p-8", "--via", "", "t.py"], ["--via ''", "auto, boot or ssh"]),
])
def test_a_bad_value_is_one_line_and_exit_2_before_anything_is_stored(typed, tmp_path, args, words):
    assert_one_line_error(typed(*args), 2, *words)
    assert not list(tmp_path.rglob("queue.db"))  # no store opened
    assert not list(tmp_path.rglob("daemon.json"))  # no fake cloud started


def test_up_refuses_an_empty_name_and_a_fullwidth_size_and_makes_no_slice(podctl):
    """`up --name ''` made root-v5p-8 (the default name) and `--slice v5p-１６` a v5p-16."""
    for args, words in ((["--slice", "v5p-8", "--name", ""], ["'' is not a valid slice name"]),
                        (["--slice", "v5p-１６"], ["'v5p-１６'"])):
        assert_one_line_error(podctl("--backend", "fake", "up", *args, check=False), 2, *words)
    assert podctl.json("--backend", "fake", "ls") == []  # and the fixture: nothing billable


# ---- the same checks for callers that do not type (the API, podctl.toml, the stores) ----

@pytest.mark.parametrize("text", ["１６", "٣", "1_0", "nan", "inf", "-inf", "1e400", "10^30", "", "0x10"])
def test_only_finite_ascii_numbers_are_numbers(text):
    assert plain_number(text) is None
    with pytest.raises(InvalidValueError, match="in digits 0-9"):
        parse_number(text, "--x")


def test_whole_numbers_stay_within_64_bits_and_ranges_are_said():
    assert parse_number(str(WHOLE_HIGHEST), "--priority", whole=True) == WHOLE_HIGHEST
    with pytest.raises(InvalidValueError, match="largest 64-bit"):
        parse_number(str(WHOLE_HIGHEST + 1), "--priority", whole=True)
    with pytest.raises(InvalidValueError, match="from 0 to 100"):
        parse_number("101", "--recover", whole=True, low=0, high=100)
    assert parse_number(" 2.5e1 ", "--x", above=0) == 25.0


@pytest.mark.parametrize("text", ["", " ", "0,", ",1", "１", "-1", "0;3"])
def test_a_host_list_is_all_or_ascii_host_numbers(text):
    with pytest.raises(InvalidValueError, match="expected all, or host numbers"):
        parse_hosts_text(text)
    assert parse_hosts_text("all") is None and parse_hosts_text(" 0, 3") == {0, 3}


@pytest.mark.parametrize("hours, chips", [(math.nan, None), (math.inf, None), (-1.0, None),
                                          (None, -1), (None, 2 ** 70)])
def test_a_quota_refuses_non_finite_and_out_of_range_numbers_from_any_caller(hours, chips):
    with pytest.raises(InvalidValueError):
        Quota("bob", hours, chips).check()


@pytest.mark.parametrize("value", ["nan", "inf", "-1.0", "1e999"])
def test_a_podctl_toml_quota_that_is_no_limit_is_refused(tmp_path, value):
    (tmp_path / "podctl.toml").write_text(f'[queue.quotas."bob"]\nchip_hours_week = {value}\n')
    with pytest.raises(ConfigError, match="chip_hours_week of bob"):
        toml_shares(tmp_path)


@pytest.mark.parametrize("field, value", [("max_cost", math.inf), ("max_cost", math.nan),
                                          ("max_hours", math.inf), ("priority", 10 ** 30),
                                          ("max_attempts", 10 ** 30), ("name", "")])
def test_queue_add_refuses_them_from_the_api_too(field, value):
    spec = RunSpec(script=Path(__file__), workdir=Path(__file__).parent)
    with pytest.raises(InvalidValueError):
        adding.validate(adding.AddRequest(slice_type="v5p-8", spec=spec, **{field: value}))


@pytest.mark.parametrize("value", ["inf", "nan", "-1.0"])
def test_a_podctl_toml_price_that_is_not_finite_is_refused(tmp_path, monkeypatch, value):
    from podctl.money import cost

    monkeypatch.chdir(tmp_path)
    (tmp_path / "podctl.toml").write_text(f"[prices]\non-demand = {value}\n")
    with pytest.raises(ConfigError, match="USD per chip-hour above 0"):
        cost.load_price_config()
