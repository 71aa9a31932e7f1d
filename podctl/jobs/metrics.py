"""What a run measured: the JSON lines the training template prints on host 0.

Host 0's log chunks in GCS carry them among the script's other output; metric_line.py
reads them (its docstring lists the records) and everything else is skipped.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from podctl.cloud.storage import Storage
from podctl.host import metric_line
from podctl.jobs import run_files


@dataclass
class RunMetrics:
    steps: int = 0  # step records seen (compile steps included)
    platform: str | None = None
    params: int | None = None
    start_step: int = 0
    configured: bool = False  # a config record was seen: start_step is the script's word
    median_mfu: float | None = None  # None on CPU, or where the template knew no peak
    productive_seconds: float = 0.0  # the steps' own time, compile steps excluded
    tokens: float = 0.0  # tokens trained by the steps this run logged
    final_step: int | None = None
    final_loss: float | None = None
    ended: str | None = None  # "done", "preempted", or None while it runs (or if it crashed)
    checkpoints: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_records(lines: list[str]) -> list[dict[str, Any]]:
    """The metric records among LINES (metric_line.parse: fields of checked types)."""
    return metric_line.parse_all(lines)


def summarize(records: list[dict[str, Any]]) -> RunMetrics:
    metrics = RunMetrics()
    mfus: list[float] = []
    tokens_per_step: float | None = None
    for r in records:  # metric_line's records: each known field is of its type, or absent
        kind = r["kind"]
        if kind == "config":
            metrics.platform = r.get("platform")
            metrics.params = r.get("params")
            metrics.start_step = r.get("start_step", 0)
            metrics.configured = True
            if r.get("batch") and r.get("seq_len"):
                tokens_per_step = float(r["batch"]) * float(r["seq_len"])
        elif kind == "step":
            metrics.steps += 1
            seconds = r.get("step_time_s") or 0.0
            rate = r.get("tokens_per_s")
            # A step's tokens: batch x seq_len when the config said so, else rate x time.
            metrics.tokens += tokens_per_step if tokens_per_step else (rate or 0.0) * seconds
            if not r.get("compile"):  # the first step mostly compiles: not training time
                metrics.productive_seconds += seconds
                mfu = r.get("mfu")
                if mfu is not None:
                    mfus.append(mfu)
            metrics.final_step = r.get("step", metrics.final_step)
            metrics.final_loss = r.get("loss")
        elif kind == "checkpoint":
            metrics.checkpoints.append(r["step"])
        elif kind in ("done", "preempted"):
            metrics.ended = kind
            metrics.final_step = r.get("step", metrics.final_step)
            if kind == "done" and r.get("loss") is not None:
                metrics.final_loss = float(r["loss"])
    if mfus and metrics.platform != "cpu":
        metrics.median_mfu = statistics.median(mfus)
    return metrics


async def read_metrics(storage: Storage, run_id: str) -> RunMetrics:
    """Host 0's metric lines of RUN_ID, summarized."""
    return summarize(await read_records(storage, run_id))


async def read_records(storage: Storage, run_id: str) -> list[dict[str, Any]]:
    """Host 0's metric records of RUN_ID, in order (`podctl plot` draws them).

    Only host 0's prefix is listed (a 512-host run has 512 hosts' chunks); chunks are
    read in unbroken number order, as the log reader does, so a gap ends the read."""
    return parse_records(await run_files.read_host_lines(storage, run_id, 0))
