"""The project's bill, not only one run's: runs, people, badput, checkpoints, data.

A team trains a model several times (ablations, restarts: `--runs`), pays people while
the runs train (`--people N --rate USD_PER_HOUR`), loses billed time to badput (a run's
goodput, `--goodput` or measured by `--goodput-from RUN_ID`), keeps checkpoints in GCS
and moves its dataset to the chips. Each part is worked out in the open:

    compute   runs x the run's chip cost / goodput
    staff     runs x the run's hours / goodput x people x rate
    storage   checkpoint size (16 bytes/param: weights + optimizer state) x checkpoints
              kept x runs x (the run's hours / goodput + 7 days of soft delete) / 730 h
              x $/GB-month
    transfer  dataset x runs x $/GB egress (0 when the data is in the chips' region)

`podctl cost RUN_ID` fills the same parts from what a run measured (measured_bill).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from podctl.base.errors import InvalidValueError

DEFAULT_GOODPUT = 0.9
GOODPUT_SOURCE = ("assumed: a tenth of billed time lost to restarts, checkpoint saves and "
                  "preemption; measure it with --goodput-from RUN_ID")
CHECKPOINT_BYTES_PER_PARAM = 16  # weights + optimizer state as saved: about 1.1 TB at 70B
SOFT_DELETE_DAYS = 7  # GCS keeps a deleted object this long by default, and bills it
HOURS_PER_MONTH = 730  # GCS bills storage by GB-month of 730 hours
STORAGE_USD_PER_GB_MONTH = 0.020  # Standard storage, a US region
EGRESS_USD_PER_GB = {"region": 0.02, "continent": 0.05, "internet": 0.12}
SOURCES = {
    "storage": "https://cloud.google.com/storage/pricing (Standard, us-central1: $0.020 per "
               "GB-month; soft delete 7 days by default: "
               "https://cloud.google.com/storage/docs/soft-delete)",
    "egress": "https://cloud.google.com/storage/pricing#network-buckets (between regions on one "
              "continent $0.02/GB, between continents about $0.05/GB, to the internet (another "
              "provider's GPUs) $0.12/GB)",
}


@dataclass(frozen=True)
class BillInputs:
    runs: int = 1
    people: float = 0.0
    usd_per_person_hour: float = 0.0
    goodput: float = DEFAULT_GOODPUT
    goodput_source: str = GOODPUT_SOURCE
    checkpoints_kept: int = 3
    storage_usd_per_gb_month: float = STORAGE_USD_PER_GB_MONTH
    dataset_tb: float = 0.0
    egress_usd_per_gb: float = 0.0
    egress_why: str = "the data is in the chips' region"

    def check(self) -> BillInputs:
        for name, value, low in (("--runs", self.runs, 1), ("--people", self.people, 0),
                                 ("--rate", self.usd_per_person_hour, 0),
                                 ("--checkpoints-kept", self.checkpoints_kept, 0),
                                 ("--dataset-tb", self.dataset_tb, 0),
                                 ("--egress-usd-per-gb", self.egress_usd_per_gb, 0)):
            if not (math.isfinite(value) and value >= low):
                raise InvalidValueError(f"{name} {value}: expected a number >= {low}.")
        if not (math.isfinite(self.goodput) and 0 < self.goodput <= 1):
            raise InvalidValueError(f"--goodput {self.goodput}: goodput is the share of billed "
                                    "time that trained, in (0, 1], e.g. 0.9.")
        return self


def egress_for(data_region: str | None, chips_region: str | None) -> tuple[float, str]:
    """USD per GB to move the dataset from DATA_REGION ("internet": another provider) to the
    chips, and why."""
    if not data_region or data_region == chips_region:
        return 0.0, "the data is in the chips' region"
    if data_region == "internet":
        return EGRESS_USD_PER_GB["internet"], "the data is at another provider"
    same = chips_region is not None and data_region.split("-")[0] == chips_region.split("-")[0]
    key = "region" if same else "continent"
    return EGRESS_USD_PER_GB[key], f"from {data_region} to {chips_region or 'the chips'}"


@dataclass(frozen=True)
class BillPart:
    name: str
    usd: float
    working: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "usd": self.usd, "working": self.working}


@dataclass(frozen=True)
class Bill:
    parts: tuple[BillPart, ...]
    inputs: BillInputs

    @property
    def total_usd(self) -> float:
        return sum(p.usd for p in self.parts)

    def part(self, name: str) -> BillPart:
        return next(p for p in self.parts if p.name == name)

    def to_json(self) -> dict[str, Any]:
        i = self.inputs
        return {"total_usd": self.total_usd, "parts": {p.name: p.to_json() for p in self.parts},
                "runs": i.runs, "people": i.people, "usd_per_person_hour": i.usd_per_person_hour,
                "goodput": i.goodput, "goodput_source": i.goodput_source,
                "checkpoints_kept": i.checkpoints_kept, "dataset_tb": i.dataset_tb,
                "egress_usd_per_gb": i.egress_usd_per_gb, "sources": SOURCES}


def _usd(x: float) -> str:
    return f"${x:,.2f}"


def bill(*, run_compute_usd: float, run_hours: float, params: float, inputs: BillInputs,
         checkpoint_bytes: float | None = None, goodput_applied: bool = False) -> Bill:
    """The project's parts. RUN_COMPUTE_USD and RUN_HOURS are one run's training (or, with
    GOODPUT_APPLIED, its measured billed time, badput included); CHECKPOINT_BYTES one
    checkpoint (default: from PARAMS)."""
    i = inputs.check()
    g = 1.0 if goodput_applied else i.goodput
    wall = run_hours / g
    over = "" if goodput_applied else f" / goodput {i.goodput:g}"
    compute = i.runs * run_compute_usd / g
    staff = i.runs * wall * i.people * i.usd_per_person_hour
    size_gb = (params * CHECKPOINT_BYTES_PER_PARAM if checkpoint_bytes is None
               else checkpoint_bytes) / 1e9
    kept_hours = wall + SOFT_DELETE_DAYS * 24
    gb_months = size_gb * i.checkpoints_kept * i.runs * kept_hours / HOURS_PER_MONTH
    storage = gb_months * i.storage_usd_per_gb_month
    transfer = i.dataset_tb * 1000 * i.runs * i.egress_usd_per_gb
    parts = (
        BillPart("compute", compute, f"{i.runs} run(s) x {_usd(run_compute_usd)}{over}"),
        BillPart("staff", staff, f"{i.runs} run(s) x {run_hours:,.1f} h{over} x {i.people:g} "
                                 f"people x {_usd(i.usd_per_person_hour)}/h"),
        BillPart("checkpoint_storage", storage,
                 f"{size_gb:,.0f} GB x {i.checkpoints_kept} kept x {i.runs} run(s) x "
                 f"({wall:,.1f} h + {SOFT_DELETE_DAYS} d soft delete) / {HOURS_PER_MONTH} h x "
                 f"${i.storage_usd_per_gb_month:g}/GB-month"),
        BillPart("data_transfer", transfer,
                 f"{i.dataset_tb:g} TB x {i.runs} run(s) x ${i.egress_usd_per_gb:g}/GB "
                 f"({i.egress_why})"),
    )
    return Bill(parts, i)


def measured_bill(run: Any, checkpoint_bytes: float, inputs: BillInputs) -> Bill | None:
    """The same parts for a run that happened (a steps.run_cost.RunBill): its billed time
    (badput included: its goodput was measured), the checkpoints it left, INPUTS' people
    and data. None when the run's price is unknown."""
    if run.cost_usd is None:
        return None
    measured = dataclasses.replace(
        inputs, runs=1, checkpoints_kept=1,
        goodput=run.goodput if run.goodput else 1.0,
        goodput_source=f"measured by run {run.run_id}" if run.goodput else "not measured")
    return bill(run_compute_usd=run.cost_usd, run_hours=run.billed_seconds / 3600, params=0.0,
                inputs=measured, checkpoint_bytes=checkpoint_bytes, goodput_applied=True)
