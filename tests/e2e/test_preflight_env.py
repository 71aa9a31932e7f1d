"""`podctl preflight` compiles with the jax and libtpu the run's hosts will get: the
requirements locked as a TPU run locks them, built here once with uv (steps/preflight_env.py),
not this machine's. A one-matmul script keeps each compile to seconds; the pinned jax
differs from the client's, so the versions said can only come from the hosts' lock."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import jax

from tests.conftest import Podctl, assert_one_line_error
from tests.e2e.test_fake_hosts import alive, eventually

HOSTS_JAX = "0.9.2"  # older than the client's jax; needs Python >= 3.11
CLIENT_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

TINY = '''
"""One matmul, sharded over the slice's chips, with a preflight hook."""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def preflight(argv, devices):
    mesh = Mesh(np.array(devices), ("fsdp",))
    w = jax.ShapeDtypeStruct((512, 512), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))
    x = jax.ShapeDtypeStruct((32, 512), jnp.float32, sharding=NamedSharding(mesh, P()))
    return {"step": jax.jit(lambda w, x: (x @ w).sum()), "args": (w, x),
            "tokens_per_step": 32, "params": 512 * 512}
'''


def _workdir(tmp: Path, requirements: str | None) -> Path:
    work = tmp / "work"
    work.mkdir()
    (work / "tiny.py").write_text(TINY)
    if requirements is not None:
        (work / "requirements.txt").write_text(requirements)
    return work


def _preflight(cli: Podctl, *args: str) -> subprocess.CompletedProcess:
    return cli("preflight", "--slice", "v5p-8", *args, check=False, timeout=900)


def test_the_compile_uses_the_hosts_locked_jax_and_libtpu_built_once(tmp_path):
    assert jax.__version__ != HOSTS_JAX, "pick a HOSTS_JAX other than the client's"
    cli = Podctl(tmp_path)
    work = _workdir(tmp_path, "jax[${PODCTL_JAX_EXTRA}]==" + HOSTS_JAX + "\n")
    # the client's own Python: an interpreter this machine surely has
    first = _preflight(cli, "--python", CLIENT_PYTHON, "--json", str(work / "tiny.py"))
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    assert report["versions"]["jax"] == report["versions"]["jaxlib"] == HOSTS_JAX
    assert report["versions"]["python"].startswith(CLIENT_PYTHON + ".")
    assert report["versions"].get("libtpu"), report["versions"]
    assert report["environment"]["key"] and "the hosts' environment" in report["environment"]["source"]
    assert "building the hosts' environment here once" in first.stderr
    assert report["fits"] and report["compiled"]

    # the next preflight of the same requirements reuses the lock and the environment
    again = _preflight(cli, "--python", CLIENT_PYTHON, str(work / "tiny.py"))
    assert again.returncode == 0, again.stderr
    assert "building" not in again.stderr
    compiler = next(line for line in again.stdout.splitlines() if line.startswith("compiler"))
    assert f"jax {HOSTS_JAX}, jaxlib {HOSTS_JAX}, libtpu " in compiler
    assert report["environment"]["key"][:12] in compiler

    # --client-env: this machine's jax, said as such
    mine = _preflight(cli, "--client-env", "--json", str(work / "tiny.py"))
    assert mine.returncode == 0, mine.stderr
    report = json.loads(mine.stdout)
    assert report["versions"]["jax"] == jax.__version__
    assert report["environment"] == {"source": "this machine's jax (--client-env)", "key": None}


def test_a_script_without_requirements_compiles_with_this_machines_jax_and_says_why(tmp_path):
    cli = Podctl(tmp_path)
    work = _workdir(tmp_path, None)
    proc = _preflight(cli, str(work / "tiny.py"))
    assert proc.returncode == 0, proc.stderr
    compiler = next(line for line in proc.stdout.splitlines() if line.startswith("compiler"))
    assert f"jax {jax.__version__}" in compiler and "this machine's jax (the run has no requirements" in compiler


def test_requirements_whose_hosts_have_no_libtpu_are_one_line(tmp_path):
    cli = Podctl(tmp_path)
    work = _workdir(tmp_path, "numpy\n")
    assert_one_line_error(_preflight(cli, str(work / "tiny.py")), 2,
                          "locks no libtpu", "jax[${PODCTL_JAX_EXTRA}]", "--client-env")


def test_bad_preflight_environment_options_are_one_line(tmp_path):
    cli = Podctl(tmp_path)
    work = _workdir(tmp_path, None)
    assert_one_line_error(_preflight(cli, "--requirements", str(tmp_path / "nope.txt"), str(work / "tiny.py")),
                          2, "no such file")
    assert_one_line_error(_preflight(cli, "--workdir", str(tmp_path / "nowhere"), str(work / "tiny.py")),
                          2, "not a directory")
    (work / "requirements.txt").write_text("jax[${PODCTL_JAX_EXTRA}]\n")
    assert_one_line_error(_preflight(cli, "--python", "2.7", str(work / "tiny.py")), 2, "--python 2.7")


def test_a_requirements_file_that_is_no_file_or_malformed_says_what_to_fix_in_the_users_file(tmp_path):
    cli = Podctl(tmp_path)
    tiny = str(_workdir(tmp_path, None) / "tiny.py")
    assert_one_line_error(_preflight(cli, "--requirements", "/dev/null", tiny), 2,
                          "--requirements '/dev/null' is not a regular file", "give a requirements file",
                          "--client-env")
    bare = tmp_path / "mine.txt"
    bare.write_text("--index-url\njax[${PODCTL_JAX_EXTRA}]\n")  # pip would read `jax...` as the URL
    assert_one_line_error(_preflight(cli, "--requirements", str(bare), tiny), 2,
                          "mine.txt: `--index-url` has no value", "`--index-url VALUE`", "remove the line")
    # what only uv sees is said of the user's file, not of podctl's temporary copy
    bare.write_text("jax[${PODCTL_JAX_EXTRA}]\n--no-binary :bogus:\n")
    proc = _preflight(cli, "--requirements", str(bare), tiny)
    assert_one_line_error(proc, 2, "in `mine.txt`", ":bogus:")
    assert "podctl-lock-" not in proc.stderr


def test_requirements_that_need_a_newer_python_than_the_image_get_the_current_one(tmp_path):
    """jax 0.7 and later need Python 3.11: the image's 3.10 cannot take them, and the hosts
    get the current CPython instead of a refusal."""
    from podctl.jobs import env_lock

    path = tmp_path / "requirements.txt"
    path.write_text("jax==" + HOSTS_JAX + "\n")
    plan = env_lock.plan(path, jax_extra="tpu", cache=tmp_path / "locks")
    assert plan.python == env_lock.CURRENT_PYTHON
    assert plan.version_of("jax") == HOSTS_JAX
    assert any(f"do not resolve for the image's Python {env_lock.IMAGE_PYTHON}" in note for note in plan.notes)


def _uv_children(parent: int) -> list[int]:
    """The `uv pip compile` processes whose parent is PARENT."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[1]) == parent and b"compile" in argv and any(a.endswith(b"uv") for a in argv[:1]):
            found.append(int(name))
    return found


def test_a_sigkilled_preflight_leaves_no_uv_running(tmp_path):
    """uv resolves against an index that takes the connection and never answers (uv would
    wait UV_HTTP_TIMEOUT, 600 s here): podctl is SIGKILLed while its uv children wait,
    and they end with it (podctl/base/children.py), the image's Python and the current one's both."""
    cli = Podctl(tmp_path)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        index = f"http://127.0.0.1:{silent.getsockname()[1]}/simple"
        work = _workdir(tmp_path, f"--index-url {index}\njax[${{PODCTL_JAX_EXTRA}}]\n")
        podctl = subprocess.Popen([sys.executable, "-m", "podctl", "preflight", "--slice", "v5p-8",
                                   str(work / "tiny.py")], env={**cli.env, "UV_HTTP_TIMEOUT": "600"},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, cwd=tmp_path)
        uvs: list[int] = []
        try:
            assert eventually(lambda: len(uvs.extend(_uv_children(podctl.pid)) or set(uvs)) >= 2, 60), \
                "podctl never started its two uv resolutions"
            podctl.kill()
            podctl.wait()
            assert eventually(lambda: not any(alive(pid) for pid in uvs), 30), \
                f"uv outlived the SIGKILLed podctl: {[pid for pid in uvs if alive(pid)]}"
        finally:
            podctl.kill()
            podctl.wait()
            for pid in uvs:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
