"""How the CLI shows slices and progress: tables for people, JSON for programs.

Without a terminal there are no spinners and no colours: progress becomes one
plain line per change of state on stderr, and stdout carries only the result.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from podctl.steps import SliceInfo

MAX_HOSTS_SHOWN = 16


def emit_json(data: Any) -> None:
    """DATA as strict JSON: a float that is not finite is null (JSON has no Infinity or NaN)."""
    click.echo(json.dumps(_finite(data), indent=2, sort_keys=True, allow_nan=False))


def _finite(data: Any) -> Any:
    import math

    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    # Without a terminal, rich would wrap at 80 columns; a pipe gets whole lines.
    width = None if stream.isatty() else 250
    return Console(stderr=stderr, highlight=False, width=width)


def _age(info: SliceInfo) -> str:
    from podctl.base.durations import format_duration

    return format_duration(info.age_seconds)


def kind_words(info: Any) -> str:
    """What a slice is, in a line (down, gc): a Compute Engine MIG is said as one, not as a
    Cloud TPU node."""
    return "Compute Engine MIG" if info.api == "compute" else str(info.kind)


def slice_table(slices: Iterable[SliceInfo], costs: dict[str, Any] | None = None) -> None:
    """COSTS: slice name -> podctl.money.cost.SliceCost, for the $/HOUR and COST columns."""
    from rich import box
    from rich.table import Table

    from podctl.base.numbers import fmt_usd

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("NAME", "KIND", "STATE", "TYPE", "TOPOLOGY", "CHIPS", "HOSTS", "TIER", "AGE",
                   "$/HOUR", "COST", "PODCTL"):
        table.add_column(column, justify="right" if column in {"CHIPS", "HOSTS", "$/HOUR", "COST"}
                         else "left")
    for s in slices:
        # which API it is on: a Cloud TPU node or queued resource, or a Compute Engine MIG
        kind = "mig" if s.api == "compute" else "queued" if s.kind == "queued-resource" else "node"
        count = f"{s.num_slices} x " if s.num_slices > 1 else ""
        c = (costs or {}).get(s.name)
        table.add_row(s.name, kind, s.state, f"{count}{s.accelerator_type}", s.topology,
                      str(s.chips), str(len(s.hosts)), s.tier, _age(s),
                      fmt_usd(c.usd_per_hour if c else None), fmt_usd(c.usd_so_far if c else None),
                      "yes" if s.managed else "no")
    _console().print(table)


def slice_detail(info: SliceInfo, maintenance: dict[str, str] | None = None,
                 watchers: str | None = None) -> None:
    """INFO, a row per field; MAINTENANCE: node -> its upcoming maintenance, in words;
    WATCHERS: the hosts' podctl watchers, in words (`run --via boot` starts through them)."""
    rows = [
        ("name", info.name),
        ("kind", kind_words(info)),
        ("state", info.state + ("" if info.ready or info.state != "ACTIVE" else " (nodes not ready)")),
        ("health", info.health or "-"),
        ("type", f"{info.num_slices} x {info.accelerator_type}" if info.num_slices > 1
         else info.accelerator_type),
        ("topology", info.topology),
        ("chips", f"{info.chips} on {len(info.hosts)} hosts"),
        ("tier", info.tier),
        ("zone", f"{info.zone} (project {info.project})"),
        ("runtime", info.runtime_version),
        ("age", _age(info)),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(info.labels.items())) or "-"),
    ]
    symptoms = [f"{n.name}: {s}" if len(info.nodes) > 1 else s for n in info.nodes for s in n.symptoms]
    if symptoms:
        rows.insert(4, ("symptoms", "; ".join(symptoms)))
    if maintenance:
        rows.insert(4, ("maintenance", "; ".join(
            f"{node}: {said}" if len(info.nodes) > 1 else said
            for node, said in sorted(maintenance.items()))))
    if watchers:
        rows.append(("watchers", watchers))
    if info.error:
        rows.append(("error", info.error))
    if info.valid_until:
        rows.append(("valid until", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info.valid_until))))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
    hosts = info.hosts
    if hosts:
        click.echo("hosts")
        for h in hosts[:MAX_HOSTS_SHOWN]:
            where = f"{h.ip}:{h.port}" + (f" (external {h.external_ip})" if h.external_ip else "")
            click.echo(f"  slice {h.slice_index} worker {h.worker:<4} {where}")
        if len(hosts) > MAX_HOSTS_SHOWN:
            click.echo(f"  ... and {len(hosts) - MAX_HOSTS_SHOWN} more (--json lists all)")


class ProgressReporter:
    """Called with a state while podctl waits: a spinner on a terminal, else one line
    per state change on stderr."""

    def __init__(self, what: str):
        self.what = what
        self.started = time.monotonic()
        self.last: str | None = None
        self._status: Any = None
        self.tty = sys.stderr.isatty()

    def __enter__(self) -> ProgressReporter:
        if self.tty:
            self._status = _console(stderr=True).status(f"{self.what} ...")
            self._status.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)

    def __call__(self, state: str) -> None:
        elapsed = time.monotonic() - self.started
        if self._status is not None:
            self._status.update(f"{self.what}: {state} ({elapsed:.0f}s)")
        elif state != self.last:
            click.echo(f"podctl: {self.what}: {state} ({elapsed:.0f}s)", err=True)
        self.last = state
