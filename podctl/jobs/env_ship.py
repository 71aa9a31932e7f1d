"""The client's side of a run's environment: find its requirements, lock them
(env_lock.py), keep the lock with the run, and give the hosts their config: by default
the environment built here (env_build.py) and uploaded once, by its hash; with
`--build-on host` the lock, uv and a per-environment signing key, for host 0 to build."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podctl.base.errors import InvalidValueError
from podctl.cloud.storage import Storage
from podctl.host import run_layout
from podctl.jobs import bundle, env_build, env_lock, env_zstandard

REQUIREMENTS = env_lock.REQUIREMENTS


async def _bundled_requirements(storage: Storage, bundle_hash: str, tmp: Path) -> Path | None:
    """A queued run's requirements.txt, from its bundle in GCS (checked against its hash)."""
    archive = tmp / "bundle.tar.gz"
    await storage.download_file(run_layout.bundle_object(bundle_hash), archive)
    if env_lock.file_sha256(archive) != bundle_hash:
        raise InvalidValueError(f"the bundle {bundle_hash[:12]} in GCS does not match its hash; "
                                "queue the run again.")
    tree = tmp / "tree"
    bundle.safe_extract(archive, tree)
    found = tree / REQUIREMENTS
    return found if found.is_file() else None


async def prepare(storage: Storage, *, run_id: str, requirements: Path | None, root: Path | None,
                  bundle_hash: str | None, python: str | None, jax_extra: str, relock: bool = False,
                  build_on: str = "client", ship_python: bool = True,
                  notice: Callable[[str], None],
                  timings: dict[str, float] | None = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the hosts' `environment` config, what the run's record keeps); (None, {}) when the
    run has no requirements. BUILD_ON "client" (built here; SHIP_PYTHON: with its CPython)
    or "host" (host 0 builds it from the index). TIMINGS gets the seconds of each step
    (env_lock, env_install, env_pack, env_upload), for the demo's phases."""
    timings = {} if timings is None else timings
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="podctl-env-") as tmp:
        path = env_lock.requirements_file(requirements, root)
        if path is None and root is None and bundle_hash:
            path = await _bundled_requirements(storage, bundle_hash, Path(tmp))
        if path is None:
            if python is not None:
                notice(f"--python {python}: the run has no requirements, so the hosts' python3 runs it")
            return None, {}
        env_lock.check_file(path, requirements)
        plan = await asyncio.to_thread(env_lock.plan, path, jax_extra=jax_extra, python=python,
                                       relock=relock)
    timings["env_lock"] = time.monotonic() - began
    for note in plan.notes:
        notice(note)
    await storage.upload_bytes(run_layout.requirements_lock_object(run_id), plan.lock.encode(), "text/plain")
    summary = {"key": plan.key, "python": plan.python, "jax": plan.version_of("jax"),
               "lock": run_layout.requirements_lock_object(run_id), "built_on": build_on}
    if build_on == "client":
        return await _client_built(storage, plan, ship_python, notice, timings), summary
    uv_tool = None
    local_uv = await asyncio.to_thread(env_lock.client_uv_for_hosts)
    if local_uv is not None:
        uv_path, sha = local_uv
        await storage.upload_file(uv_path, run_layout.uv_tool_object(sha), if_missing=True,
                                  content_type="application/octet-stream")
        uv_tool = {"object": run_layout.uv_tool_object(sha), "sha256": sha}
    return plan.to_config(env_lock.client_secret(), uv_tool), summary


async def _client_built(storage: Storage, plan: env_lock.EnvPlan, ship_python: bool,
                        notice: Callable[[str], None], timings: dict[str, float]) -> dict[str, Any]:
    """PLAN built and packed here (once), uploaded (once); the hosts' config for it, with
    the zstandard a host without `zstd` unpacks it with (fetched beside the build)."""
    built, zstd = await asyncio.gather(
        asyncio.to_thread(env_build.build, plan, ship_python=ship_python, notice=notice),
        _zstandard_for_hosts(storage, plan, notice))
    timings["env_install"], timings["env_pack"] = built.seconds - built.pack_seconds, built.pack_seconds
    began = time.monotonic()
    name = run_layout.env_client_archive_object(plan.key, built.sha256)
    what = f"environment {plan.key[:12]}: {built.size / 1e6:.1f} MB (zstd)"
    if built.seconds:
        notice(f"{what}, built here from the package index in {built.seconds:.1f} s")
    uploaded = await storage.upload_file(built.path, name, if_missing=True, content_type="application/zstd")
    notice(f"{what}, {'uploaded to' if uploaded else 'already in'} {storage.gs_url(name)}")
    timings["env_upload"] = time.monotonic() - began
    config: dict[str, Any] = built.host_config(plan, name)
    if zstd is not None:
        config["archive"]["zstandard"] = zstd
    return config


async def _zstandard_for_hosts(storage: Storage, plan: env_lock.EnvPlan,
                               notice: Callable[[str], None]) -> dict[str, Any] | None:
    """The hosts' config of the zstandard zip (env_zstandard.py), uploaded once; None, said,
    when it cannot be fetched: a host with `zstd` does not need it."""
    try:
        made = await asyncio.to_thread(env_zstandard.for_hosts, plan, env_build.cache_dir())
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        notice(f"zstandard for hosts without `zstd` could not be fetched ({' '.join(str(e).split())[:200]}); "
               "a host without zstd will refuse the environment")
        return None
    name = run_layout.zstandard_tool_object(made.sha256)
    await storage.upload_file(made.path, name, if_missing=True, content_type="application/zip")
    return made.host_config(name)
