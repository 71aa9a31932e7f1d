"""`podctl demo`: the whole life of a training job on the embedded fake cloud.

    fake cloud up -> slice up (v5p-16: 2 hosts x 4 devices) -> train (template, checkpoints
    to GCS) -> list checkpoints -> resume from the latest -> slice down -> fake cloud down

It drives the Python API (podctl.api), the same code a notebook uses, and leaves
nothing running: the slice is deleted and a fake cloud it started is stopped, also
when a step fails or the user presses Ctrl-C.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from podctl.base.errors import InvalidValueError, JobError, StoragePermissionError
from podctl.steps import lines as host_lines

SLICE_TYPE = "v5p-16"
SLICE_NAME = "podctl-demo"
# Small enough to train for real on 2 CPU cores in seconds; big enough that the loss falls.
MODEL_ARGS = ["--layers", "2", "--d-model", "64", "--heads", "4", "--d-ff", "128", "--vocab", "64",
              "--seq-len", "32", "--batch", "16", "--lr", "1e-2"]


def template_path() -> Path:
    """templates/train_pjit.py of this checkout (podctl is installed from its source tree)."""
    path = Path(__file__).resolve().parent.parent / "templates" / "train_pjit.py"
    if not path.is_file():
        raise JobError(f"the training template is not at {path}; `podctl demo` runs from a source "
                       "checkout of podctl (pip install -e .).")
    return path


@dataclass
class DemoSummary:
    slice_type: str
    run_ids: list[str]
    first_steps: tuple[int, int]  # (start, end) of the first run
    resumed_steps: tuple[int, int]  # (start, end) of the resumed run
    first_loss: float | None
    final_loss: float | None
    checkpoint_steps: list[int]
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# Lines every multi-host CPU run prints that say nothing to a person watching the demo:
# gloo's peer count, and tensorstore saying which credentials it took (the node's, from the metadata server).
_NOISE = ("[Gloo]", "google_auth_provider", "Expected number of connected peer ranks")


def _steps(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in metrics if m.get("kind") == "step"]


def _printer(say: Callable[[str], None]) -> Callable[[str], None]:
    """Host 0's lines for a person: metric JSON as short lines, the rest as they are."""
    def echo(line: str) -> None:
        m = host_lines.metric(line)
        if m is None:
            if not any(noise in line for noise in _NOISE):
                say(f"  | {line}")
        elif m["kind"] == "step" and (m["step"] % 5 == 0 or m.get("compile")):
            say(f"  | step {m['step']:>3}"
                + (f"  loss {m['loss']:.4f}" if "loss" in m else "")
                + (f"  {m['step_time_s'] * 1000:7.1f} ms" if "step_time_s" in m else "")
                + (f"  {m['tokens_per_s']:>9,.0f} tokens/s" if "tokens_per_s" in m else "")
                + ("  (compile)" if m.get("compile") else ""))
        elif m["kind"] == "config" and {"params", "devices", "platform", "processes"} <= set(m):
            say(f"  | {m['params']:,} parameters on {m['devices']} {m['platform']} devices in "
                f"{m['processes']} processes, mesh {m.get('mesh')}, starting at step "
                f"{m.get('start_step', 0)}")
        elif m["kind"] in ("checkpoint", "preempted"):
            say(f"  | {m['kind']} at step {m['step']}")
        elif m["kind"] == "done":
            say(f"  | done at step {m.get('step')}"
                + (f", loss {m['loss']:.4f}" if "loss" in m else ""))

    return echo


def run_demo(*, steps: int = 20, more_steps: int = 10, checkpoint_every: int = 10,
             say: Callable[[str], None] = print) -> DemoSummary:
    from podctl.api import connect

    if steps < 1 or more_steps < 1 or checkpoint_every < 1:
        raise InvalidValueError("--steps, --more-steps and --checkpoint-every must be at least 1.")
    script = template_path()
    began = time.monotonic()
    phases: dict[str, float] = {}

    def timed(name: str, since: float) -> float:
        now = time.monotonic()
        phases[name] = phases.get(name, 0.0) + now - since
        return now

    say("podctl demo: the whole lifecycle on the local fake cloud")
    try:
        return _lifecycle(connect, script, steps=steps, more_steps=more_steps,
                          checkpoint_every=checkpoint_every, say=say, began=began,
                          phases=phases, timed=timed)
    except StoragePermissionError as e:  # a secure-by-default fake: the slice is gone already
        raise StoragePermissionError(
            f"{e.without_slice.rstrip('.')}; the demo deleted its slice. This fake cloud is secure-by-default "
            "(`podctl fake start --secure`, PODCTL_FAKE_SECURE=1), the demo needs the roles above: "
            "grant them while the fake runs, or `podctl fake stop && podctl fake start "
            "--not-secure`; then `podctl demo` again.") from e


def _lifecycle(connect: Callable[..., Any], script: Path, *, steps: int, more_steps: int,
               checkpoint_every: int, say: Callable[[str], None], began: float,
               phases: dict[str, float], timed: Callable[[str, float], float]) -> DemoSummary:
    t = time.monotonic()
    with connect(backend="fake") as cloud:
        t = timed("fake_cloud", t)
        say(f"1/6 up: {SLICE_TYPE} ({cloud.settings.project}, {cloud.settings.zone})")
        with cloud.up(SLICE_TYPE, name=SLICE_NAME) as slice_:
            t = timed("up", t)
            say(f"2/6 train: {script.name} for {steps} steps, a checkpoint every {checkpoint_every}")
            args = [*MODEL_ARGS, "--steps", str(steps), "--checkpoint-every", str(checkpoint_every)]
            first = slice_.run(script, args=args)
            for name in ("bundle", "env_lock", "env_install", "env_pack", "env_upload", "start"):
                if name in first.timings:  # the env_* steps are the bundle's (env_ship.py)
                    phases[name] = first.timings[name]
            t = time.monotonic()
            code = first.wait(echo=_printer(say))
            t = timed("train", t)
            if code != 0:
                raise JobError(f"the training run {first.run_id} failed (exit code {code}); "
                               f"`podctl logs {first.run_id}` shows why.")
            say("3/6 checkpoints in GCS:")
            ckpts = first.checkpoints()
            for c in ckpts:
                say(f"  step {c.step:>4}  {c.size_bytes / 1e6:6.2f} MB  {c.objects:>3} files  "
                    f"{'complete' if c.complete else 'INCOMPLETE'}")
            t = timed("checkpoints", t)
            complete = [c.step for c in ckpts if c.complete]
            if not complete:
                raise JobError(f"run {first.run_id} left no complete checkpoint.")
            say(f"4/6 resume: from step {complete[-1]} to {steps + more_steps}")
            second = slice_.run(script, args=[*MODEL_ARGS, "--steps", str(steps + more_steps),
                                              "--checkpoint-every", str(checkpoint_every)],
                                resume=first)
            code = second.wait(echo=_printer(say))
            t = timed("resume", t)
            if code != 0:
                raise JobError(f"the resumed run {second.run_id} failed (exit code {code}); "
                               f"`podctl logs {second.run_id}` shows why.")
            final_ckpts = second.checkpoints()
            say(f"5/6 down: {SLICE_NAME}")
        t = timed("down", t)
    timed("fake_cloud", t)
    say("6/6 fake cloud stopped; nothing left running")
    first_steps, second_steps = _steps(first.metrics), _steps(second.metrics)
    summary = DemoSummary(
        slice_type=SLICE_TYPE, run_ids=[first.run_id, second.run_id],
        first_steps=(first_steps[0]["step"] - 1, first_steps[-1]["step"]) if first_steps else (0, 0),
        resumed_steps=((second_steps[0]["step"] - 1, second_steps[-1]["step"])
                       if second_steps else (0, 0)),
        first_loss=first_steps[0]["loss"] if first_steps else None,
        final_loss=second_steps[-1]["loss"] if second_steps else None,
        checkpoint_steps=[c.step for c in final_ckpts if c.complete],
        wall_s=time.monotonic() - began, phases={k: round(v, 2) for k, v in phases.items()})
    return summary


KEEP = 3  # templates/train_pjit.py's --keep default


def render(summary: DemoSummary, say: Callable[[str], None] = print) -> None:
    s = summary
    loss = (f"{s.first_loss:.4f} -> {s.final_loss:.4f}" if s.first_loss is not None
            and s.final_loss is not None else "?")
    say("")
    say(f"slice        {s.slice_type} (2 hosts x 4 devices), deleted")
    say(f"runs         {s.run_ids[0]} (steps {s.first_steps[0]}-{s.first_steps[1]})")
    say(f"             {s.run_ids[1]} (resumed, steps {s.resumed_steps[0]}-{s.resumed_steps[1]})")
    say(f"loss         {loss}")
    say(f"checkpoints  steps {', '.join(map(str, s.checkpoint_steps)) or 'none'} kept (the template "
        f"keeps the latest {KEEP}: --keep N)")
    env = ", ".join(f"{k[4:]} {v:.1f}s" for k, v in s.phases.items() if k.startswith("env_"))
    said = [f"{k} {v:.1f}s" + (f" [environment: {env}]" if k == "bundle" and env else "")
            for k, v in s.phases.items() if not k.startswith("env_")]
    say(f"wall time    {s.wall_s:.1f}s  (" + ", ".join(said) + ")")
