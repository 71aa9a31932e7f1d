"""A slice of a 3-slice multislice lost (its host's processes killed, SSH refused): how
soon training goes on, elastic (`podctl run --recover 1 --elastic`: on the 2 survivors,
from their local copies) against today's whole re-create (the floor of it: someone who
sees the loss the instant it happens and types `podctl down`, `podctl up --num-slices
3`, `podctl run --resume` at once; `--recover` without `--elastic` cannot get past this
fault: every node stays READY, so it relaunches in place and cannot reach the lost host).

    python benchmarks/bench_elastic.py [--time-scale 60] [--only elastic|recreate] [--log FILE]

3 x v5p-8 on the fake (one host of 4 CPU devices each), the template (1 layer, d_model
32, global batch 24, a checkpoint every 4 steps, a local copy every 2,
--heartbeat-timeout 10). Timed by the lines podctl's client reads: from the fault to
the first step line after it. Idle chip-seconds: the run's chips not training in that
time (12 chips; the re-create's slices are deleted and made again, the elastic run's
go on billing). Elastic's second half, the grow back, is timed too: from the lost
slice answering again to the first step on 3.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench_recovery import TEMPLATE, Watched, podctl

ARGS = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "32",
        "--seq-len", "16", "--batch", "24", "--lr", "1e-2", "--checkpoint-every", "4",
        "--local-every", "2", "--heartbeat-timeout", "10", "--steps", "60"]
CHIPS = 12
LOG: str | None = None  # --log


def lose(admin, node: str) -> float:
    admin.inject("no-ssh", node)
    admin.inject("kill-host", node, 0)
    return time.monotonic()


def elastic(env: dict, admin) -> dict[str, float]:
    podctl(env, "up", "--slice", "v5p-8", "--num-slices", "3", "--name", "bench-el")
    node = json.loads(podctl(env, "status", "bench-el", "--json"))["nodes"][1]["name"]
    run = Watched(env, "run", "bench-el", "--recover", "1", "--elastic", "--json", str(TEMPLATE), *ARGS)
    run.when('"kind": "checkpoint", "step": 8')
    lost = lose(admin, node)
    ended = run.when("going on on the 2", lost)
    configured = run.when('"kind": "config"', ended)
    on_two = run.when('"kind": "step"', ended)
    admin.inject("no-ssh", node, off=True)
    back = time.monotonic()
    growing = run.when("growing back to 3", back)
    on_three = run.when('"kind": "step"', growing)
    if run.wait() != 0:
        raise SystemExit("the elastic run failed:\n" + "".join(line for _, line in run.lines[-30:]))
    podctl(env, "down", "bench-el", "--yes")
    if LOG:  # every line of the elastic run's client, seconds from the fault
        Path(LOG).write_text("".join(f"{at - lost:8.2f} {line}" for at, line in run.lines))
    return {"detect": ended - lost, "relaunch on 2": on_two - ended,
            "of which: start -> the script restored (JAX up)": configured - ended,
            "of which: restored -> first step (compile)": on_two - configured,
            "lost -> training": on_two - lost, "back -> training on 3": on_three - back}


def recreated(env: dict, admin) -> float:
    podctl(env, "up", "--slice", "v5p-8", "--num-slices", "3", "--name", "bench-re")
    node = json.loads(podctl(env, "status", "bench-re", "--json"))["nodes"][1]["name"]
    run = Watched(env, "run", "bench-re", "--json", str(TEMPLATE), *ARGS)
    run.when('"kind": "checkpoint", "step": 8')
    lost = lose(admin, node)
    run.proc.kill()  # the person knows at once and acts: the watching client is dropped
    run.wait()
    run_id = next(line.split()[2] for _, line in run.lines if line.startswith("podctl: run "))
    podctl(env, "down", "bench-re", "--yes")
    podctl(env, "up", "--slice", "v5p-8", "--num-slices", "3", "--name", "bench-re")
    again = Watched(env, "run", "bench-re", "--json", "--resume", run_id, str(TEMPLATE), *ARGS)
    resumed = again.when('"kind": "step"', lost)
    again.wait()
    podctl(env, "down", "bench-re", "--yes")
    return resumed - lost


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--time-scale", type=float, default=60.0)
    parser.add_argument("--only", choices=("elastic", "recreate"), help="one half (default both)")
    parser.add_argument("--log", help="write the elastic run's client lines here, timed from the fault")
    a = parser.parse_args()
    global LOG
    LOG = a.log
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PODCTL_STATE_DIR": f"{tmp}/state", "PODCTL_CONFIG_DIR": f"{tmp}/config",
               "PODCTL_BACKEND": "fake", "PODCTL_FAKE_TIME_SCALE": str(a.time_scale)}
        podctl(env, "fake", "start")
        try:
            from podctl.fake.admin.admin_client import FakeAdmin

            admin = FakeAdmin(json.loads(podctl(env, "fake", "status", "--json"))["admin"])
            phases = elastic(env, admin) if a.only != "recreate" else {}
            floor = recreated(env, admin) if a.only != "elastic" else float("nan")
        finally:
            podctl(env, "fake", "stop")
    print("| | seconds | idle chip-seconds |")
    print("|---|---:|---:|")
    for name, seconds in phases.items():
        print(f"| elastic: {name} | {seconds:.1f} | |")
    lost_to_training = phases.get("lost -> training", float("nan"))
    print(f"| **elastic: slice lost -> training on 2** | **{lost_to_training:.1f}** | "
          f"{lost_to_training * CHIPS:.0f} |")
    print(f"| re-create floor: down, up, run --resume typed at once -> training on 3 | {floor:.1f} | "
          f"{floor * CHIPS:.0f} |")
    print(f"elastic / re-create: {lost_to_training / floor:.2f}x")


if __name__ == "__main__":
    main()
