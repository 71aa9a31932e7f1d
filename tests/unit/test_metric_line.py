"""metric_line: the one reader of the JSON lines a script prints. No line can crash a
reader: deep, huge or mistyped lines are text, and fields have the types podctl uses."""

from __future__ import annotations

import json

import pytest

from podctl.host import metric_line
from podctl.jobs.metrics import parse_records, summarize
from podctl.steps.stall import StallPolicy, StallWatch

DEEP = '{"kind": "step", "x": ' + "[" * 5000 + "]" * 5000 + "}"


def test_a_5000_deep_line_is_text_not_a_recursion_error():
    assert metric_line.parse(DEEP) is None
    with pytest.raises(ValueError, match="deeper"):
        metric_line.loads_bounded(DEEP)


def test_brackets_inside_strings_do_not_count_as_depth():
    line = json.dumps({"kind": "step", "step": 3, "note": "[" * 100 + '\\"{' * 50})
    assert metric_line.parse(line) == json.loads(line)


def test_a_huge_line_is_text():
    line = json.dumps({"kind": "step", "step": 1, "pad": "x" * (metric_line.MAX_CHARS + 1)})
    assert metric_line.parse(line) is None


@pytest.mark.parametrize("start_step", ['"x"', "[1]", "Infinity", "-Infinity", "NaN", "1e400",
                                        "true", "null", "1.5", "9" * 40, "{}"])
def test_a_mistyped_start_step_is_dropped_not_crashing_int(start_step):
    line = '{"kind": "config", "platform": "cpu", "start_step": ' + start_step + "}"
    record = metric_line.parse(line)
    assert record is not None and "start_step" not in record
    assert summarize([record]).start_step == 0


@pytest.mark.parametrize("step", ['"x"', "[1]", "Infinity", "null", "true", "2.5"])
def test_a_step_record_without_an_int_step_is_text(step):
    assert metric_line.parse('{"kind": "step", "step": ' + step + ', "loss": 1.0}') is None


def test_fields_of_the_wrong_type_are_dropped_and_the_rest_kept():
    record = metric_line.parse(json.dumps({
        "kind": "step", "step": 4, "loss": "low", "step_time_s": [1], "tokens_per_s": 10.0,
        "mfu": None, "compile": "yes", "platform": "$\\frac{a}{b}$", "extra": {"kept": 1}}))
    assert record == {"kind": "step", "step": 4, "tokens_per_s": 10.0, "extra": {"kept": 1}}
    assert metric_line.step_summary(record) == "step 4, 10 tokens/s"


def test_a_diverged_loss_is_kept_as_a_number():
    record = metric_line.parse('{"kind": "step", "step": 2, "loss": NaN}')
    assert record is not None and record["loss"] != record["loss"]


@pytest.mark.parametrize("line", ["not json", "{not json", '{"kind": "other"}', '["kind"]',
                                  '{"kind": ["step"]}', '{"kind": "step"}', "{}", ""])
def test_other_lines_are_text(line):
    assert metric_line.parse(line) is None


def test_hostile_lines_among_good_ones_are_skipped_by_every_reader():
    good = [json.dumps({"kind": "config", "platform": "tpu", "start_step": 0, "batch": 2, "seq_len": 4}),
            json.dumps({"kind": "step", "step": 1, "loss": 2.0, "step_time_s": 1.0, "tokens_per_s": 8.0}),
            json.dumps({"kind": "checkpoint", "step": 1})]
    hostile = [DEEP, '{"kind": "config", "start_step": Infinity, "batch": 1e999, "seq_len": [1]}',
               '{"kind": "checkpoint", "step": "x"}', '{"kind": "done", "step": {"a": 1}}']
    records = parse_records(good + hostile)
    metrics = summarize(records)
    assert (metrics.steps, metrics.checkpoints, metrics.start_step) == (1, [1], 0)
    watch = StallWatch(StallPolicy(action="wait", after=60.0))
    for line in good + hostile:
        watch.saw(0, line)
    assert watch.last_step == 1
