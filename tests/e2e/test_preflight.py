"""`podctl preflight`: the template's train step compiled by the real TPU compiler (libtpu
from PyPI) for v5p slices that are not attached, as a user runs it (separate `podctl`
processes). Each compile is a few seconds to a minute on 2 cores, so the cases share
compiles through module-scoped fixtures; the big sizes are in benchmarks/."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Podctl, assert_one_line_error, slice_on_daemon

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = str(ROOT / "templates" / "train_pjit.py")
GIB = 2**30
# Too large for v5p-8 (4 chips): 25.8B parameters (12 bytes each with Adam's two moments:
# 72 GiB of arguments per chip) and their temporaries; on v5p-16, the next size (fsdp 8),
# 36 GiB of arguments and about 59 GiB in all. The parameters are in many narrow layers
# (d_model 512, 8,192 of them): the layers are one scan, so their number costs the compile
# nothing, and the narrow matmuls compile in a sixth of d_model 4096's CPU (3 s, not 19 s,
# for the fitting compile). Tiny batch and sequence keep the compile short too.
TOO_LARGE = ["--d-model", "512", "--layers", "8192", "--heads", "4", "--d-ff", "2048",
             "--batch", "16", "--seq-len", "8"]
# The band of compiled FLOPs per step over 6·N·tokens for the template at its default size:
# causal attention computed in full adds 12·T·d per token and layer (T/(6·d) = 8% of 6N at
# T=128, d=256), softmax/norms/gelu and the optimizer a little more; the positional table is
# counted in N but does no matmul (it takes a little away).
FLOPS_BAND = (1.0, 1.2)


def _cli(tmp: Path) -> Podctl:
    return Podctl(tmp)


def _long(cli: Podctl, *args: str) -> subprocess.CompletedProcess:
    """A podctl command that compiles: minutes when the CPUs are shared, not Podctl's 120 s."""
    return subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True, text=True,
                          env=cli.env, stdin=subprocess.DEVNULL, timeout=900, cwd=cli.tmp)


def _preflight(cli: Podctl, *args: str) -> subprocess.CompletedProcess:
    # this machine's jax: the figures are what these cases check; that the compile takes
    # the hosts' locked jax and libtpu by default is tests/test_preflight_env.py's
    return _long(cli, "preflight", "--client-env", *args)


@pytest.fixture(scope="module")
def default_v5p8(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cli = _cli(tmp_path_factory.mktemp("pre"))
    proc = _preflight(cli, "--slice", "v5p-8", "--json", TEMPLATE)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_template_at_its_default_size_fits_v5p_8_with_hbm_and_flops_in_the_json(default_v5p8):
    r = default_v5p8
    assert r["fits"] is True and r["compiled"] is True
    assert (r["slice"], r["chips"], r["devices"], r["topology"]) == ("v5p-8", 4, 4, "v5:2x2x1")
    hbm = r["hbm"]
    assert hbm["per_chip_bytes"] == 95 * GIB
    assert hbm["needed_bytes"] == (hbm["arguments_bytes"] + hbm["outputs_bytes"] - hbm["aliased_bytes"]
                                   + hbm["temporaries_bytes"] + hbm["code_bytes"])
    assert 0 < hbm["needed_bytes"] < GIB and hbm["headroom_bytes"] == 95 * GIB - hbm["needed_bytes"]
    # the state is donated: its buffers are the outputs' too
    assert hbm["aliased_bytes"] > 0 and hbm["arguments_bytes"] >= hbm["aliased_bytes"]
    assert r["params"] == 3_246_336 and r["tokens_per_step"] == 32 * 128
    assert r["predicted"]["step_seconds"] > 0 and r["predicted"]["tokens_per_second"] > 0
    assert r["compile_seconds"] > 0 and r["info"]["mesh"] == {"data": 1, "fsdp": 4, "model": 1}


def test_compiled_flops_per_step_are_within_the_stated_band_of_6_n_tokens(default_v5p8):
    f = default_v5p8["flops"]
    assert f["six_n_tokens"] == 6 * 3_246_336 * 32 * 128
    assert FLOPS_BAND[0] <= f["ratio_to_six_n_tokens"] <= FLOPS_BAND[1], f
    # XLA's own count sees the 4-layer scan's body once; podctl adds the other 3 trips
    assert f["xla_cost_analysis"] < f["six_n_tokens"] < f["per_step"]
    assert f["per_step"] == pytest.approx(f["xla_cost_analysis"] + f["loop_trips_added"])
    assert f["loops_unknown_trips"] == 0


def test_remat_lowers_the_temporaries(default_v5p8, tmp_path):
    proc = _preflight(_cli(tmp_path), "--slice", "v5p-8", "--json", TEMPLATE, "--remat")
    assert proc.returncode == 0, proc.stderr
    remat = json.loads(proc.stdout)
    assert remat["hbm"]["temporaries_bytes"] < default_v5p8["hbm"]["temporaries_bytes"]
    # recomputing the forward pass costs FLOPs
    assert remat["flops"]["per_step"] > default_v5p8["flops"]["per_step"]


def test_a_model_too_large_for_v5p_8_exits_1_naming_the_missing_amount(tmp_path):
    proc = _preflight(_cli(tmp_path), "--slice", "v5p-8", TEMPLATE, *TOO_LARGE)
    assert proc.returncode == 1, proc.stderr
    assert "DOES NOT FIT" in proc.stdout
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("podctl: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    line = errors[0]
    assert "does not fit v5p-8" in line and "GiB missing" in line
    assert "--remat" in line and "fsdp" in line and "--batch" in line
    missing = float(line.split(" GiB missing")[0].rsplit(", ", 1)[1].replace(",", ""))
    assert missing > 0


def test_the_same_model_fits_a_larger_slice_with_a_larger_fsdp_axis(tmp_path):
    # v5p-16: the smallest slice larger than v5p-8 (v5p-32 showed the same with more
    # devices to partition for)
    proc = _preflight(_cli(tmp_path), "--slice", "v5p-16", "--json", TEMPLATE, *TOO_LARGE)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["fits"] and r["chips"] == 8 and r["info"]["mesh"]["fsdp"] == 8
    # half v5p-8's 72 GiB of arguments per chip: the fsdp axis shards them twice as finely
    assert r["hbm"]["arguments_bytes"] < 40 * GIB and r["hbm"]["headroom_bytes"] > 0
    assert 0.95 <= r["flops"]["ratio_to_six_n_tokens"] <= 1.2


def test_plan_from_preflight_prices_the_compiled_flops_with_the_working_shown(default_v5p8, tmp_path):
    cli = _cli(tmp_path)
    report = tmp_path / "pre.json"
    report.write_text(json.dumps(default_v5p8))
    proc = cli("plan", "--from-preflight", str(report), "--tokens", "1B", "--mfu", "0.5",
               "--price", "4.2")
    per_step = default_v5p8["flops"]["per_step"]
    steps = 1e9 / (32 * 128)
    assert f"{per_step:.3e} compiled for v5p-8" in proc.stdout
    assert f"1B tokens / 4,096 tokens per step = {steps:,.0f}" in proc.stdout
    assert f"= {per_step * steps:.3e}" in proc.stdout and "6·N·D would be" in proc.stdout
    data = cli.json("plan", "--from-preflight", str(report), "--tokens", "1B", "--mfu", "0.5",
                    "--price", "4.2")
    hours = per_step * steps / (4 * 459e12 * 0.5) / 3600
    assert data["hours"] == pytest.approx(hours) and data["total_usd"] == pytest.approx(hours * 4 * 4.2)
    # the compiled memory figure replaces plan's rule of thumb: per chip x 4 chips
    assert data["fit"]["needed_bytes"] == 4 * default_v5p8["hbm"]["needed_bytes"]
    assert data["fit"]["fits"] and "compiled by podctl preflight" in proc.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert_one_line_error(cli("plan", "--from-preflight", str(bad), "--tokens", "1B", check=False),
                          2, "--from-preflight")
    assert_one_line_error(cli("plan", "--from-preflight", str(report), "--tokens", "1B",
                              "--slice", "v5p-64", check=False), 2, "compiled for v5p-8")


@pytest.mark.parametrize("args, code, words", [
    (["--slice", "v5p-7", TEMPLATE], 2, ["not a TPU v5p size"]),
    (["--slice", "v5p-8", "nosuch.py"], 2, ["no script 'nosuch.py'", "give the path of a Python file"]),
    (["--slice", "v5p-8", str(ROOT / "tests" / "scripts" / "no_preflight_hook.py")], 2,
     ["no preflight(argv, devices) function"]),
    (["--slice", "v5p-8", TEMPLATE, "--batch", "6"], 2, ["not a multiple of data x fsdp"]),
    # a hook that raises: where and what, in the one line (no "traceback above" nobody sees)
    (["--slice", "v5p-8", str(ROOT / "tests" / "scripts" / "preflight_raises.py")], 2,
     ["preflight_raises.py: preflight_raises.py's preflight failed at preflight_raises.py:5: "
      "ValueError: boom from preflight"]),
])
def test_bad_preflight_input_is_one_line_and_exit_2(tmp_path, args, code, words):
    assert_one_line_error(_preflight(_cli(tmp_path), *args), code, *words)


def test_podctl_help_does_not_import_jax():
    code = ("import sys; from podctl.cli.main import cli; from podctl.policy import preflight; "
            "assert not any(m == 'jax' or m.startswith(('jax.', 'libtpu')) for m in sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- run / queue add --preflight on the fake cloud --------------------------------------

@pytest.fixture
def on_fake(tmp_path: Path):
    with slice_on_daemon(_cli(tmp_path), "v5p-8", "pre8") as cli:
        yield cli


def test_run_preflight_refuses_a_step_that_does_not_fit_and_starts_nothing(on_fake):
    # the template alone (no requirements.txt beside it): the compile takes this machine's
    # jax rather than building the template's environment here first
    work = on_fake.tmp / "work"
    work.mkdir()
    template = str(shutil.copy(TEMPLATE, work))
    before = on_fake.json("ls")
    proc = _long(on_fake, "run", "pre8", "--preflight", template, *TOO_LARGE)
    assert proc.returncode == 1, proc.stderr
    assert "does not fit v5p-8" in proc.stderr and "GiB missing" in proc.stderr
    assert on_fake("runs").stdout.strip() == "no runs yet"
    after = on_fake.json("ls")
    assert [s["name"] for s in after] == [s["name"] for s in before] == ["pre8"]  # no slice made
    # the queue refuses it the same way, before anything is bundled or stored
    proc = _long(on_fake, "queue", "add", "--slice", "v5p-8", "--preflight", template, *TOO_LARGE)
    assert proc.returncode == 1 and "does not fit v5p-8" in proc.stderr
    assert on_fake.json("queue", "ls") == []
    # a step that fits is queued with its report (a tiny model: a short compile)
    tiny = ["--d-model", "64", "--heads", "1", "--d-ff", "64", "--layers", "1", "--seq-len", "8",
            "--batch", "4"]
    proc = _long(on_fake, "queue", "add", "--slice", "v5p-8", "--preflight", "--json", template,
                 *tiny)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    shown = on_fake.json("queue", "show", str(entry["id"]))
    assert shown["preflight"]["fits"] is True and shown["preflight"]["slice"] == "v5p-8"
    assert shown["preflight"]["args"] == tiny
    assert "fits v5p-8: " in on_fake("queue", "show", str(entry["id"])).stdout


def test_the_queue_stores_a_preflight_report_with_the_entry_and_migrates_v1(tmp_path):
    from podctl.queue.store import Entry, Store

    path = tmp_path / "queue.db"
    with Store(path) as store:
        entry = store.add(Entry(id=0, name="n", accelerator_type="v5p-8", project="p", zone="z",
                                bucket="b", script="t.py", bundle_hash="h",
                                preflight={"fits": True, "hbm": {"needed_bytes": 5}}))
        plain = store.add(Entry(id=0, name="m", accelerator_type="v5p-8", project="p", zone="z",
                                bucket="b", script="t.py", bundle_hash="h"))
    with Store(path) as store:
        assert store.get(entry.id).preflight == {"fits": True, "hbm": {"needed_bytes": 5}}
        assert store.get(plain.id).preflight is None
        assert store.get(entry.id).to_json()["preflight"]["fits"] is True
    # a queue made by the podctl before preflight (schema 1) gains the column, entries kept
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    from podctl.queue.store import _v1

    _v1(conn)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO entries (name, accelerator_type, project, zone, bucket, script, "
                 "bundle_hash, args, env, priority, tier, max_attempts, state, attempt, attempts, "
                 "created, updated, next_try_at, backoff) VALUES ('o', 'v5p-8', 'p', 'z', 'b', "
                 "'t.py', 'h', '[]', '{}', 0, 'on-demand', 3, 'pending', 0, '[]', 1, 1, 0, 0)")
    conn.commit()
    conn.close()
    with Store(old) as store:
        assert [e.preflight for e in store.entries()] == [None]


def test_matmul_flops_count_a_scan_body_once_per_trip():
    import jax
    import jax.numpy as jnp

    from podctl.policy._preflight_worker import matmul_flops

    def f(w, x):
        return jax.lax.scan(lambda c, wi: (c @ wi, None), x, w)[0]

    jaxpr = jax.make_jaxpr(f)(jnp.zeros((5, 8, 8)), jnp.zeros((4, 8))).jaxpr
    full, once, unknown = matmul_flops(jaxpr)
    assert (full, once, unknown) == (5 * 2 * 4 * 8 * 8, 2 * 4 * 8 * 8, 0)


def test_the_documented_preflight_commands_put_podctls_options_before_the_script():
    """Every word after SCRIPT is the script's: a `--json` written after it goes to the
    script (the template refuses it; another script ignores it and pre.json gets text)."""
    from click.testing import CliRunner

    from podctl.cli.main import cli

    ours = {"--slice", "--num-slices", "--mfu", "--timeout", "--workdir", "--requirements",
            "--python", "--relock", "--client-env", "--json", "--backend"}
    helptext = CliRunner().invoke(cli, ["preflight", "--help"]).output
    readme = "\n".join(path.read_text() for path in (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
                        ).replace("\\\n", " ")
    commands = []
    for text in (helptext, readme):
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if "podctl preflight --slice" in line:  # with the synopsis's wrapped next line
                wrapped = lines[i + 1] if "SCRIPT" not in line and ".py" not in line else ""
                commands.append(line.split("podctl preflight ", 1)[1] + " " + wrapped)
    assert len(commands) >= 4
    for command in commands:
        words = command.replace("`", " ").split()
        script = next(i for i, w in enumerate(words) if w.endswith(".py") or w == "SCRIPT")
        assert not ours & {w.strip("[]") for w in words[script + 1:]}, command
