"""Which jax and libtpu a preflight compiles with: the hosts', not this machine's.

A run's hosts get the environment its requirements lock to (jobs/env_lock.py: one lock
per environment, for the hosts' Python). A compile with another jax or libtpu can fit
where the run will not, or the reverse: XLA's memory plan and fusions change from one
release to the next. So when the run has requirements (`--requirements FILE`, else the
workdir's requirements.txt, as `podctl run` finds them), preflight locks them as a TPU
run does (the `tpu` extra: libtpu from PyPI), builds that lock here with uv, once per
lock (STATE_DIR/preflight-envs/KEY), and compiles in it. Without requirements the hosts
run what their image has, and preflight compiles with this machine's jax and says so;
`--client-env` asks for that too.

The lock is the one a TPU run makes for the same requirements (kept in STATE_DIR/locks),
so `podctl run` after `podctl preflight` gets the versions that were compiled with.
"""

from __future__ import annotations

import fcntl
import json
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from podctl.base import children, pythons
from podctl.base.errors import ConfigError, RequirementsError
from podctl.base.settings import state_dir
from podctl.jobs import env_lock
from podctl.jobs.run_spec import RunSpec
from podctl.policy.preflight import CompileEnv

_VENV_TIMEOUT = 300.0  # uv may download a CPython first
_SYNC_TIMEOUT = 1200.0  # jaxlib and libtpu are a few hundred MB from the package index
_READY = "podctl-ready.json"  # written last: a directory without it is a build cut short
_LIBTPU = ("libtpu", "libtpu-nightly")


def compile_env(spec: RunSpec, *, client: bool = False,
                notice: Callable[[str], None] = lambda text: None) -> CompileEnv:
    """The interpreter to compile SPEC's script in: the run's own hosts' environment."""
    if client:
        return CompileEnv.this_machine("--client-env")
    requirements, python, relock = spec.requirements, spec.python, spec.relock
    path = env_lock.requirements_file(requirements, (spec.workdir or spec.script.parent).expanduser())
    if path is None:
        return CompileEnv.this_machine("the run has no requirements file: its hosts get no "
                                       "environment of podctl's")
    env_lock.check_file(path, requirements, ", or pass --client-env to compile with this machine's jax")
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return CompileEnv.this_machine(f"libtpu is built for Linux x86_64, not "
                                       f"{platform.system()} {platform.machine()}")
    plan = env_lock.plan(path, jax_extra="tpu", python=python, relock=relock)
    versions = env_lock.locked_versions(plan.lock)
    if not any(name in versions for name in _LIBTPU):
        raise RequirementsError(f"{path.name} locks no libtpu: its hosts would run jax on the CPU. "
                                "Ask for jax[${PODCTL_JAX_EXTRA}] (as templates/requirements.txt "
                                "does), or pass --client-env.")
    for note in plan.notes:
        notice(f"preflight: {note}")
    interpreter = _built(plan, path, notice)
    return CompileEnv(python=str(interpreter), key=plan.key,
                      source=f"the hosts' environment {plan.key[:12]}, Python {plan.python}, "
                             f"locked from {path.name}")


def _built(plan: env_lock.EnvPlan, path: Path, notice: Callable[[str], None]) -> Path:
    """PLAN's environment here, built once: its interpreter. A second preflight that
    wants it while the first builds waits for that build rather than making its own."""
    home = state_dir() / "preflight-envs"
    where = home / plan.key
    interpreter = where / "bin" / "python"
    if (where / _READY).is_file() and interpreter.exists():
        return interpreter
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(home / f"{plan.key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if (where / _READY).is_file() and interpreter.exists():
            return interpreter
        shutil.rmtree(where, ignore_errors=True)  # a build cut short
        versions = env_lock.locked_versions(plan.lock)
        libtpu = next(versions[name] for name in _LIBTPU if name in versions)
        notice(f"preflight: building the hosts' environment here once (Python {plan.python}, "
               f"jax {versions.get('jax', '?')}, libtpu {libtpu}, {len(versions)} packages, with uv)")
        uv = env_lock.uv_binary()
        # one this machine has (uv alone misses pyenv's behind an unset shim), else uv's
        # own search, which may download a CPython
        found = pythons.find(plan.python)
        try:
            _uv([uv, "venv", "--quiet", "--no-project", "--python", found[0] if found else plan.python,
                 str(where)],
                _VENV_TIMEOUT, lambda why: ConfigError(
                    f"preflight needs CPython {plan.python} for the hosts' environment and uv could "
                    f"not find or install it ({why}); pass --python X.Y for one this machine has, "
                    "or --client-env to compile with this machine's jax."))
            lock = where / "requirements.lock"
            lock.write_text(plan.lock)
            _uv([uv, "pip", "sync", "--quiet", "--python", str(interpreter), *plan.index_args, str(lock)],
                _SYNC_TIMEOUT, lambda why: RequirementsError(
                    f"the hosts' environment for {path.name} cannot be installed here ({why}); "
                    "or pass --client-env to compile with this machine's jax."))
            (where / _READY).write_text(json.dumps({"python": plan.python, "packages": versions}))
        except BaseException:
            shutil.rmtree(where, ignore_errors=True)  # no half-built environment is kept
            raise
    return interpreter


def _uv(argv: list[str], timeout: float, error: Callable[[str], Exception]) -> None:
    try:
        done = children.run(argv, timeout=timeout, stdin=subprocess.DEVNULL)  # ends with podctl
    except subprocess.TimeoutExpired as e:
        raise error(f"uv took over {timeout:.0f} s") from e
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        raise error(" ".join(lines[-2:])[:300] if lines else f"uv exited {done.returncode}")

