"""Pictures of runs: loss, step time, tokens/s and MFU over steps (`podctl plot`,
`Run.plot()`), and a bar of where a run's slice time went (goodput buckets).

The numbers are the template's metric lines on host 0 (podctl/jobs/metrics.py), read
from GCS as `podctl cost RUN` reads them. A recovered run is drawn as one line over
the step axis: each attempt its own colour, the steps that a later attempt computed
again (its resume point up to where the earlier one had got) shaded as lost.

matplotlib is imported only when a picture is drawn (Agg: no screen needed), so
`podctl --help` stays fast and podctl works without it; `pip install 'podctl[plot]'`.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podctl.base.errors import ConfigError, InvalidValueError
from podctl.cloud.storage import Storage
from podctl.jobs.metrics import read_records
from podctl.jobs.run_files import load_record

FORMATS = (".png", ".html")
PANELS = (("loss", "loss"), ("step_time_s", "step time (s)"), ("tokens_per_s", "tokens/s"),
          ("mfu", "MFU"))
# The order goodput buckets are drawn in (others follow in the order given).
BUCKET_ORDER = ("productive", "waiting", "provisioning", "host_setup", "startup_compile",
                "checkpoint_save", "checkpoint_restore", "wasted_progress", "recovery", "slice_lost", "growing_back",
                "reinitialization", "fewer_slices", "idle")


@dataclass
class Segment:
    """One attempt's step records, in order."""

    attempt: int
    run_id: str
    start_step: int | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)  # "step" records
    checkpoints: list[int] = field(default_factory=list)
    platform: str | None = None
    slices: str | None = None  # an elastic run's "2 of 3 slices" (its config line says)

    @property
    def label(self) -> str:
        return f"attempt {self.attempt}" + (f" ({self.slices})" if self.slices else "")


@dataclass
class RunSeries:
    """What is drawn of one run: its attempts' steps and the step ranges done twice."""

    run_id: str
    segments: list[Segment] = field(default_factory=list)
    lost: list[tuple[int, int]] = field(default_factory=list)  # (first, last] steps redone

    @property
    def steps(self) -> int:
        return sum(len(s.steps) for s in self.segments)


def check_output(path: Path) -> Path:
    if path.suffix.lower() not in FORMATS:
        raise InvalidValueError(f"-o {path}: podctl plot writes .png or .html; "
                                f"name the file e.g. {path.with_suffix('.png').name}.")
    return path


def series_from_records(run_id: str, attempts: list[tuple[str, list[dict[str, Any]]]],
                        lost: list[tuple[int, int]] | None = None) -> RunSeries:
    """ATTEMPTS: (run id, metric records) per attempt, in order -> a RunSeries."""
    series = RunSeries(run_id=run_id, lost=list(lost or []))
    for number, (attempt_id, records) in enumerate(attempts, start=1):
        seg = Segment(attempt=number, run_id=attempt_id)
        for r in records:
            if r["kind"] == "config":
                seg.platform = r.get("platform")
                seg.start_step = r.get("start_step", 0)
                if isinstance(r.get("slices"), int) and isinstance(r.get("full_slices"), int):
                    seg.slices = f"{r['slices']} of {r['full_slices']} slices"
            elif r["kind"] == "step":  # metric_line's records: "step" is an int
                seg.steps.append(r)
            elif r["kind"] == "checkpoint":
                seg.checkpoints.append(r["step"])
        series.segments.append(seg)
    return series


async def load_series(storage: Storage, run_id: str) -> RunSeries:
    """RUN_ID's attempts (one, unless it was recovered) and their metric records."""
    record = await load_record(storage, run_id)
    listed = [a for a in record.extra.get("attempts", []) if isinstance(a, dict) and a.get("run_id")]
    ids = [a["run_id"] for a in listed] or [run_id]
    attempts = [(attempt_id, await read_records(storage, attempt_id)) for attempt_id in ids]
    lost = []
    for a, after in zip(listed, listed[1:]):
        if a.get("last_step") is not None and after.get("start_step") is not None \
                and a["last_step"] > after["start_step"]:
            lost.append((int(after["start_step"]), int(a["last_step"])))
    return series_from_records(run_id, attempts, lost)


def _matplotlib() -> Any:
    """matplotlib, imported now. Figures are made without pyplot: no backend is chosen
    or switched (a notebook keeps its own), nothing global is kept, and savefig draws
    with Agg, so no screen is needed."""
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401
    except ImportError:
        raise ConfigError("drawing needs matplotlib: pip install 'podctl[plot]' "
                          "(or pip install matplotlib).") from None
    return matplotlib


def draw_goodput_bar(ax: Any, buckets: dict[str, float]) -> None:
    """One horizontal bar of a run's slice time split into BUCKETS ({name: seconds}),
    each part labelled with its share. The goodput accounting feeds this."""
    names = [b for b in BUCKET_ORDER if b in buckets] + [b for b in buckets if b not in BUCKET_ORDER]
    total = sum(max(0.0, float(buckets[b])) for b in names)
    left = 0.0
    colours = _colours(len(names))
    for name, colour in zip(names, colours):
        seconds = max(0.0, float(buckets[name]))
        ax.barh([0], [seconds], left=left, color=colour,
                label=f"{name.replace('_', ' ')} {seconds / total:.0%}" if total else name)
        left += seconds
    ax.set_yticks([])
    ax.set_xlabel("seconds of slice time")
    ax.set_title("where the slice time went")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=min(5, max(1, len(names))),
              fontsize="small", frameon=False)


def _colours(n: int) -> list[Any]:
    cmap = _matplotlib().colormaps["tab10"]
    return [cmap(i % 10) for i in range(n)]


def figure(series: list[RunSeries], *, buckets: dict[str, dict[str, float]] | None = None) -> Any:
    """A matplotlib Figure: four panels over steps for every run in SERIES, and under
    them one goodput bar per run that BUCKETS ({run id: {bucket: seconds}}) has."""
    mpl = _matplotlib()
    buckets = buckets or {}
    bars = [s.run_id for s in series if buckets.get(s.run_id)]
    heights = [3.0, 3.0] + [1.6] * len(bars)
    fig = mpl.figure.Figure(figsize=(12, sum(heights) + 1.0), layout="constrained")
    grid = fig.add_gridspec(len(heights), 2, height_ratios=heights)
    axes = [fig.add_subplot(grid[i // 2, i % 2]) for i in range(4)]
    colours = iter(_colours(sum(len(s.segments) for s in series) + 1))
    for run in series:
        several = len(series) > 1
        for seg in run.segments:
            colour = next(colours)
            label = (f"{run.run_id} " if several else "") + (
                seg.label if len(run.segments) > 1 else ("" if several else run.run_id))
            timed = [r for r in seg.steps if not r.get("compile")]  # the compile step skews the scale
            for ax, (key, _) in zip(axes, PANELS):
                rows = seg.steps if key == "loss" else timed
                points = [(r["step"], r[key]) for r in rows
                          if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, color=colour, label=label.strip() or None, linewidth=1.2,
                            marker="." if len(points) < 40 else None)
            for step in seg.checkpoints:
                axes[0].axvline(step, color=colour, alpha=0.25, linewidth=0.8, linestyle=":")
        for first, last in run.lost:
            for ax in axes:
                ax.axvspan(first, last, color="red", alpha=0.12,
                           label=f"steps lost ({first}-{last}]" if ax is axes[0] else None)
    for ax, (key, title) in zip(axes, PANELS):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if not ax.lines:
            platform = next((seg.platform for run in series for seg in run.segments if seg.platform), None)
            why = f" (none measured on {platform})" if key == "mfu" and platform else " (none logged)"
            ax.text(0.5, 0.5, title + why, ha="center", va="center", transform=ax.transAxes,
                    color="gray")
        elif ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize="small")
    for i, run_id in enumerate(bars):
        ax = fig.add_subplot(grid[2 + i, :])
        draw_goodput_bar(ax, buckets[run_id])
        ax.set_title(f"where the slice time went: {run_id}")
    names = ", ".join(s.run_id for s in series)
    fig.suptitle(names if len(names) < 120 else f"{len(series)} runs")
    return fig


def save(fig: Any, path: Path) -> Path:
    """FIG to PATH: a .png, or a .html page with the PNG inside (one file to send)."""
    check_output(path)
    png = png_bytes(fig)
    if path.suffix.lower() == ".png":
        path.write_bytes(png)
    else:
        data = base64.b64encode(png).decode()
        title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) else "podctl plot"
        path.write_text(f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{_escape(title)}"
                        f"</title></head>\n<body><h3>{_escape(title)}</h3>\n"
                        f"<img alt=\"podctl plot\" src=\"data:image/png;base64,{data}\">\n"
                        "</body></html>\n", encoding="utf-8")
    return path


def png_bytes(fig: Any) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()


def _escape(text: str) -> str:
    import html

    return html.escape(text)


async def plot_runs(storage: Storage, run_ids: list[str], output: Path | None = None, *,
                    buckets: dict[str, dict[str, float]] | None = None) -> tuple[Any, list[RunSeries]]:
    """Read RUN_IDS' metrics from GCS and draw them -> (Figure, series); saved to
    OUTPUT when given. A run that logged no step is an error that says so."""
    series = [await load_series(storage, run_id) for run_id in run_ids]
    empty = [s.run_id for s in series if not s.steps]
    if empty:
        raise InvalidValueError(f"run {', '.join(empty)} logged no training steps (no JSON step "
                                "lines on host 0, as the template prints): nothing to draw.")
    fig = figure(series, buckets=buckets)
    if output is not None:
        save(fig, output)
    return fig, series


class Picture:
    """A drawn figure that a notebook shows (as PNG) and a script saves."""

    def __init__(self, fig: Any, series: list[RunSeries]):
        self.figure, self.series = fig, series

    def _repr_png_(self) -> bytes:
        return png_bytes(self.figure)

    def save(self, path: str | Path) -> Path:
        return save(self.figure, Path(path))

    def __repr__(self) -> str:
        return f"<podctl plot of {', '.join(s.run_id for s in self.series)}>"
