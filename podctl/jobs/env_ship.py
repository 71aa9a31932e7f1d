"""The client's side of a run's environment: find its requirements, lock them
(env_lock.py), keep the lock with the run, ship uv, and give the hosts their config."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podctl.errors import InvalidValueError
from podctl.jobs import bundle, env_lock, run_layout
from podctl.storage import Storage

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
                  notice: Callable[[str], None]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the hosts' `environment` config, what the run's record keeps); (None, {}) when the
    run has no requirements."""
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
    for note in plan.notes:
        notice(note)
    await storage.upload_bytes(run_layout.requirements_lock_object(run_id), plan.lock.encode(), "text/plain")
    uv_tool = None
    local_uv = await asyncio.to_thread(env_lock.client_uv_for_hosts)
    if local_uv is not None:
        uv_path, sha = local_uv
        await storage.upload_file(uv_path, run_layout.uv_tool_object(sha), if_missing=True,
                                  content_type="application/octet-stream")
        uv_tool = {"object": run_layout.uv_tool_object(sha), "sha256": sha}
    config = plan.to_config(env_lock.client_secret(), uv_tool)
    summary = {"key": plan.key, "python": plan.python, "jax": plan.version_of("jax"),
               "lock": run_layout.requirements_lock_object(run_id)}
    return config, summary
