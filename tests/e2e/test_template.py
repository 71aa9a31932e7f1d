"""templates/train_pjit.py: trains, checkpoints, resumes, stops cleanly on SIGTERM,
alone (4 CPU devices), as two local processes, and on a fake v5p-16 through `podctl run`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, user_credentials
from tests.e2e.test_jobs_cli import own16 as podctl  # noqa: F401  (a fake v5p-16 "cli16" of the case's own)

SCRIPT = Path(__file__).resolve().parents[2] / "templates" / "train_pjit.py"
TINY = ["--layers", "2", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--vocab", "64",
        "--seq-len", "32", "--batch", "8", "--lr", "1e-2"]


def cpu_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PODCTL_")}
    # XLA CPU's -O0, as the fake's hosts compile (fake/vm/hosts.py): half the compile's CPU
    env.update({"XLA_FLAGS": "--xla_force_host_platform_device_count=4 --xla_backend_optimization_level=0",
                "JAX_PLATFORMS": "cpu"})
    env.update(extra)
    return env


def metrics(stdout: str) -> list[dict]:
    """The JSON metric lines, from the script's own stdout or podctl's `[host 0000] ...`."""
    out = []
    for line in stdout.splitlines():
        text = line.split("] ", 1)[1] if line.startswith("[host ") else line
        if text.startswith("{"):
            out.append(json.loads(text))
    return out


def of(kind: str, lines: list[dict]) -> list[dict]:
    return [m for m in lines if m["kind"] == kind]


def train(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *TINY, *args], capture_output=True,
                          text=True, env=env or cpu_env(), timeout=180, stdin=subprocess.DEVNULL)


def test_trains_checkpoints_and_resumes_at_the_saved_step(tmp_path: Path):
    ckpt = tmp_path / "ckpt"
    proc = train("--steps", "20", "--checkpoint-every", "10", "--checkpoint-dir", str(ckpt))
    assert proc.returncode == 0, proc.stderr
    lines = metrics(proc.stdout)
    assert [m["kind"] for m in lines][0] == "config" and lines[-1]["kind"] == "done"
    assert len(lines) == len(proc.stdout.splitlines())  # stdout carries metric lines only
    config = lines[0]
    assert config["devices"] == 4 and config["processes"] == 1 and config["platform"] == "cpu"
    assert config["mesh"] == {"data": 1, "fsdp": 4, "model": 1} and config["start_step"] == 0
    assert config["peak_flops_per_s"] is None and config["mfu_note"] == "not meaningful on cpu"
    steps = of("step", lines)
    assert [m["step"] for m in steps] == list(range(1, 21))
    assert steps[0].get("compile") is True and not any("compile" in m for m in steps[1:])
    assert all(m["mfu"] is None and m["tokens_per_s"] > 0 and m["step_time_s"] > 0 for m in steps)
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.5, [m["loss"] for m in steps]
    assert [m["step"] for m in of("checkpoint", lines)] == [10, 20]
    assert lines[-1]["step"] == 20 and lines[-1]["loss"] == steps[-1]["loss"]
    assert sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["10", "20"]

    again = train("--steps", "23", "--checkpoint-every", "10", "--checkpoint-dir", str(ckpt))
    assert again.returncode == 0, again.stderr
    lines = metrics(again.stdout)
    assert lines[0]["start_step"] == 20
    assert [m["step"] for m in of("step", lines)] == [21, 22, 23]
    assert of("step", lines)[0]["compile"] is True
    assert of("step", lines)[0]["loss"] < steps[0]["loss"] - 0.5  # trained weights came back
    assert lines[-1] == {**lines[-1], "kind": "done", "step": 23}
    assert (ckpt / "23").is_dir()


def test_sigterm_saves_at_the_next_step_and_exits_143(tmp_path: Path):
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *TINY, "--steps", "100000",
                             "--checkpoint-every", "1000", "--checkpoint-dir", str(ckpt)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cpu_env(), stdin=subprocess.DEVNULL)
    try:
        before: list[str] = []
        while sum('"kind": "step"' in line for line in before) < 3:
            before.append(proc.stdout.readline())
            assert before[-1], proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    lines = metrics("".join(before) + rest)
    preempted = of("preempted", lines)
    assert len(preempted) == 1 and lines[-1] == preempted[0]
    k = preempted[0]["step"]
    assert k >= 3 and of("checkpoint", lines)[-1]["step"] == k
    assert of("step", lines)[-1]["step"] == k  # stopped at a step boundary, nothing lost
    assert (ckpt / str(k)).is_dir()

    again = train("--steps", str(k + 2), "--checkpoint-dir", str(ckpt))
    assert again.returncode == 0, again.stderr
    lines = metrics(again.stdout)
    assert lines[0]["start_step"] == k
    assert [m["step"] for m in of("step", lines)] == [k + 1, k + 2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_to_one_process_stops_every_process_at_the_same_step(tmp_path: Path):
    """Only process 1 gets the notice; process 0 (the one that prints) must still stop
    at the same step, or the collective save would hang. Two local processes, 8 devices."""
    ckpt, port = tmp_path / "ckpt", free_port()
    args = [sys.executable, str(SCRIPT), *TINY, "--steps", "100000", "--checkpoint-every", "1000",
            "--checkpoint-dir", str(ckpt), "--mesh", "data=2,fsdp=2,model=2"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              stdin=subprocess.DEVNULL,
                              env=cpu_env(PODCTL_NUM_PROCESSES="2", PODCTL_PROCESS_ID=str(i),
                                          JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}"))
             for i in (0, 1)]
    try:
        seen = 0
        while seen < 3:
            line = procs[0].stdout.readline()
            assert line, "process 0 ended early"
            seen += '"kind": "step"' in line
        procs[1].send_signal(signal.SIGTERM)
        out0, _ = procs[0].communicate(timeout=90)
        out1, _ = procs[1].communicate(timeout=30)
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [143, 143]
    assert out1 == ""  # only process 0 prints
    lines = metrics(out0)
    k = of("preempted", lines)[0]["step"]
    assert of("checkpoint", lines)[-1]["step"] == k and (ckpt / str(k)).is_dir()


def test_a_mesh_that_does_not_match_the_devices_is_one_line(tmp_path: Path):
    proc = train("--steps", "1", "--mesh", "data=3,model=2")
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert err[0].startswith("train_pjit: error: --mesh data=3,model=2 has 6 devices")
    assert "jax.device_count() is 4" in err[0]
    assert proc.stdout == ""


def test_reads_a_text_file_bytewise_and_refuses_token_ids_beyond_the_vocab(tmp_path: Path):
    import numpy as np

    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 100)
    proc = train("--steps", "3", "--data", str(text))
    assert proc.returncode == 0, proc.stderr
    lines = metrics(proc.stdout)
    assert lines[-1]["kind"] == "done" and lines[-1]["step"] == 3
    assert "vocab 256" in proc.stderr  # TINY's --vocab 64 gave way to the byte vocabulary

    ids = tmp_path / "tokens.npy"
    np.save(ids, (np.arange(5000) % 100).astype(np.uint16))
    proc = train("--steps", "1", "--data", str(ids))  # --vocab 64 < 100
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("train_pjit: error: --data ")
    assert "not below --vocab 64" in proc.stderr


def _template():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_pjit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mfu_peak_and_sharding_rules():
    from types import SimpleNamespace as NS

    from jax.sharding import PartitionSpec as P

    t = _template()
    assert t.peak_flops([NS(platform="tpu", device_kind="TPU v5")] * 8, None) == (8 * 459e12, None)
    assert t.peak_flops([NS(platform="tpu", device_kind="TPU v5p")] * 4, None)[0] == 4 * 459e12
    assert t.peak_flops([NS(platform="tpu", device_kind="TPU v5 lite")], None)[0] is None
    assert t.peak_flops([NS(platform="cpu", device_kind="cpu")] * 4, None) == (
        None, "not meaningful on cpu")
    mesh = NS(shape={"data": 2, "fsdp": 4, "model": 2})
    assert t.spec_for((50257, 256), ("vocab", "embed"), mesh) == P(None, "fsdp")  # 50257 is odd
    assert t.spec_for((4, 256, 1024), ("layers", "embed", "mlp"), mesh) == P(None, "fsdp", "model")
    assert t.spec_for((4, 256), ("layers", "norm"), mesh) == P(None, None)
    assert t.spec_for((256, 64), ("vocab", "embed"), NS(shape={"data": 1, "fsdp": 1, "model": 1})) \
        == P(None, None)


def _bucket_objects(cli, prefix: str) -> tuple[str, list[str]]:
    from google.cloud import storage

    status = json.loads(cli("fake", "status", "--json").stdout)
    client = storage.Client(project="fake", credentials=user_credentials(),
                            client_options={"api_endpoint": status["gcs"]})
    return status["bucket"], [b.name for b in client.list_blobs(status["bucket"], prefix=prefix)]


@pytest.mark.host_env
def test_on_a_fake_v5p_16_through_podctl_run(podctl):  # noqa: F811
    start = time.time()
    # bare hosts: the first run of a test session builds the template's env (minutes)
    # over SSH, as the resume below (its --env keeps it off the watchers): the agent's home,
    # and so its compilation cache, is the login's on both
    first = podctl("run", "cli16", "--via", "ssh", str(SCRIPT), *TINY, "--steps", "8",
                   "--checkpoint-every", "4", timeout=1500)
    run_id = next(l.split()[2] for l in first.stderr.splitlines() if l.startswith("podctl: run "))
    # the image's Python 3.10 would get jax 0.6 (whose orbax crashes at the first checkpoint):
    # the hosts get a current CPython from uv, and podctl says which Python and which jax
    said = first.stdout + first.stderr
    assert "the image's Python 3.10 would get jax 0.6" in said and ": Python 3.12, " in said, said
    lines = metrics(first.stdout)
    config = lines[0]
    assert (config["kind"], config["processes"], config["devices"], config["start_step"]) == (
        "config", 2, 8, 0)
    steps = of("step", lines)
    assert [m["step"] for m in steps] == list(range(1, 9))
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.15, [m["loss"] for m in steps]
    assert [m["step"] for m in of("checkpoint", lines)] == [4, 8]
    assert lines[-1]["kind"] == "done" and lines[-1]["step"] == 8
    # the template names its JAX process index: host 0's lines from then on carry it
    shown = first.stdout.splitlines()
    assert "[host 0000 p0] [podctl] host-0000 is JAX process 0" in shown
    assert shown[-1].startswith("[host 0000 p0] {") and '"kind": "done"' in shown[-1]

    prefix = f"podctl/runs/{run_id}/checkpoints/"
    bucket, names = _bucket_objects(podctl, prefix)
    saved = {n[len(prefix):].split("/")[0] for n in names}
    assert {"4", "8"} <= saved, names
    assert any(n.startswith(prefix + "8/") and n.endswith("commit_success.txt") for n in names) or \
        any(n.startswith(prefix + "8/") and "_CHECKPOINT_METADATA" in n for n in names), names

    # JAX's compilation cache in each host's ~/.podctl (agent.py): JAX writes it from
    # process 0 only; the resume below compiles nothing new on host 0 (every program a hit)
    cached = _jax_cache_entries(podctl)
    assert cached[0] > 0 and cached[1] == 0, cached
    second = podctl("run", "cli16", "--env", f"PODCTL_CHECKPOINT_DIR=gs://{bucket}/{prefix[:-1]}",
                    str(SCRIPT), *TINY, "--steps", "10", "--checkpoint-every", "4", timeout=600)
    assert _jax_cache_entries(podctl) == cached
    lines = metrics(second.stdout)
    assert lines[0]["start_step"] == 8
    assert [m["step"] for m in of("step", lines)] == [9, 10]
    assert lines[-1] == {**lines[-1], "kind": "done", "step": 10}
    print(f"fake v5p-16: two runs in {time.time() - start:.1f} s")
    _checkpoints_listed_pulled_and_restored(podctl, run_id, podctl.tmp / "pulled")


def _jax_cache_entries(podctl) -> dict[int, int]:  # noqa: F811
    """Each host's count of files in ~/.podctl/jax-cache (0 where there is none)."""
    proc = podctl("exec", "cli16", "--", "ls ~/.podctl/jax-cache 2>/dev/null | wc -l")
    return {int(line[len("[host "):].split("]")[0]): int(line.split("] ", 1)[1])
            for line in proc.stdout.splitlines()}


def _checkpoints_listed_pulled_and_restored(podctl, run_id: str, out: Path) -> None:  # noqa: F811
    """`podctl ckpt` on the run above: its checkpoints listed, the latest pulled, and what was
    pulled is a checkpoint orbax restores on this machine's one device. The second run above
    wrote its step 10 into this run's directory (PODCTL_CHECKPOINT_DIR)."""
    listed = podctl.json("ckpt", "ls", run_id)
    assert listed["directory"].endswith(f"/podctl/runs/{run_id}/checkpoints")
    assert [c["step"] for c in listed["checkpoints"] if c["complete"]] == [4, 8, 10]
    assert "complete" in podctl("ckpt", "ls", run_id).stdout
    pulled = podctl("ckpt", "pull", run_id, str(out))
    assert "pulled step 10" in pulled.stdout
    step_dir = out / "10"
    assert (step_dir / "commit_success.txt").is_file()
    code = ("import sys, jax, orbax.checkpoint as ocp\n"
            "c = ocp.StandardCheckpointer()\n"
            "meta = c.metadata(sys.argv[1])\n"
            "meta = getattr(meta, 'item_metadata', meta)\n"
            "one = jax.sharding.SingleDeviceSharding(jax.devices()[0])\n"
            "target = jax.tree_util.tree_map(\n"
            "    lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), meta)\n"
            "print(int(c.restore(sys.argv[1], target)['step']))")
    items = [p for p in step_dir.iterdir() if p.is_dir()]
    restored = subprocess.run([sys.executable, "-c", code, str(items[0])], capture_output=True,
                              text=True, timeout=120)
    assert restored.returncode == 0 and restored.stdout.strip().splitlines()[-1] == "10", restored.stderr[-2000:]
    assert_one_line_error(podctl("ckpt", "pull", run_id, str(out), "--step", "5", check=False), 2,
                          "no checkpoint step 5", "4, 8, 10")
    assert_one_line_error(podctl("ckpt", "ls", "not-a-run", check=False), 2, "not a run id")
    assert_one_line_error(podctl("ckpt", "ls", "x-v5p-8-20260101-000000-abcd", check=False), 1, "no run")
    (podctl.tmp / "x.py").write_text("print(1)\n")  # a script that exists: the --resume check speaks
    assert_one_line_error(podctl("run", "cli16", "--resume", "bad", "x.py", check=False), 2,
                          "--resume 'bad' is not a run id")
