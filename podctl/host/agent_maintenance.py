"""The host agent's maintenance watcher: reads the TPU VM's metadata server and, when
maintenance comes close, tells the agent (which passes SIGTERM to the script: the
template checkpoints at the next step boundary and exits 143, every host at the same
step, since its stop flag is agreed across processes).

Shipped to hosts next to agent.py (standard library only; imports nothing from podctl).
What it reads (GCE's metadata server, as podctl/fake/vm/metadata.py serves it):
  instance/upcoming-maintenance   404 when none is planned; else JSON with
                                  window_start_time, window_end_time, type,
                                  maintenance_status, can_reschedule (camelCase taken too)
  instance/maintenance-event      NONE, or e.g. TERMINATE_ON_HOST_MAINTENANCE from 60 s
                                  before the event
It acts when the window starts within LEAD seconds (config `maintenance_lead_seconds`,
default 300: time for a step and a save) or the event is no longer NONE.
"""

from __future__ import annotations

import calendar
import json
import threading
import time
import urllib.error
from collections.abc import Callable
from typing import Any

LEAD_SECONDS = 300.0
POLL_SECONDS = 2.0


def parse_time(text: object) -> float | None:
    """RFC 3339 ("2026-12-03T16:48:55.123Z", or "+00:00") -> epoch seconds; None if not one."""
    if not isinstance(text, str) or "T" not in text:
        return None
    stamp = text.strip().replace("+00:00", "Z")
    main, _, frac = stamp.rstrip("Z").partition(".")
    try:
        seconds = calendar.timegm(time.strptime(main, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None
    return seconds + (float("0." + frac) if frac.isdigit() else 0.0)


def _field(data: dict[str, Any], snake: str) -> object:
    camel = snake.split("_")[0] + "".join(w.title() for w in snake.split("_")[1:])
    return data.get(snake, data.get(camel))


def read(get: Callable[..., str]) -> dict[str, Any] | None:
    """What the metadata server says of maintenance now, or None when nothing is planned:
    {window_start, window_end (epoch s or None), type, status, event}."""
    event = get("instance/maintenance-event", timeout=2.0).strip()
    try:
        data = json.loads(get("instance/upcoming-maintenance", timeout=2.0))
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        data = None
    if not isinstance(data, dict) and event in ("", "NONE"):
        return None
    data = data if isinstance(data, dict) else {}
    return {"window_start": parse_time(_field(data, "window_start_time")),
            "window_end": parse_time(_field(data, "window_end_time")),
            "type": _field(data, "type") or _field(data, "maintenance_type"),
            "status": _field(data, "maintenance_status"), "event": event or "NONE"}


def due(info: dict[str, Any] | None, lead: float, now: float) -> bool:
    if info is None:
        return False
    if info["event"] != "NONE" or info.get("status") == "ONGOING":
        return True
    start = info.get("window_start")
    return start is not None and start - now <= lead


class Watcher:
    """A daemon thread that calls ON_NOTICE(info) once, when maintenance is due."""

    def __init__(self, on_notice: Callable[[dict[str, Any]], None], get: Callable[..., str], *,
                 lead: float = LEAD_SECONDS, poll: float = POLL_SECONDS):
        self.on_notice, self.get, self.lead, self.poll = on_notice, get, lead, poll
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="maintenance-watch", daemon=True)

    def start(self) -> Watcher:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                info = read(self.get)
            except Exception:  # noqa: BLE001 - no metadata server (a laptop), or a blip
                info = None
            if due(info, self.lead, time.time()) and not self.stopped.is_set():
                self.on_notice(info)  # type: ignore[arg-type]
                return
            self.stopped.wait(self.poll)


def watch(cfg: dict[str, Any], on_notice: Callable[[dict[str, Any]], None], get: Callable[..., str]) -> Watcher | None:
    """A started Watcher for the run config CFG, or None when the run turned it off."""
    if cfg.get("maintenance_watch") is False:
        return None
    return Watcher(on_notice, get, lead=float(cfg.get("maintenance_lead_seconds", LEAD_SECONDS)),
                   poll=float(cfg.get("maintenance_poll_seconds", POLL_SECONDS))).start()
