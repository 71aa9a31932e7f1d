"""`podctl profile`: ask a running run for a JAX profiler trace, or download its traces
(the request, the hosts' answers and the traces' place in GCS are podctl/jobs/profiles.py's).

    request, where = await take_profile(session, run_id, 5, "all", wait_seconds=600)
    written = await pull_profiles(session, run_id, Path("profiles"))
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from podctl.base.numbers import parse_hosts_text
from podctl.jobs import profiles
from podctl.jobs.profiles import ProfileRequest
from podctl.steps.session import Session

Asked = Callable[[ProfileRequest, str], None]  # the request written, and where its traces go


async def pull_profiles(session: Session, run_id: str, dest: Path) -> list[Path]:
    """Every trace of RUN_ID (all its attempts) into DEST, a TensorBoard log directory."""
    return await profiles.pull_profiles(session.storage, run_id, dest)


async def take_profile(session: Session, run_id: str, steps: int, hosts: str = "all", *,
                       wait_seconds: float | None, asked: Asked = lambda request, where: None,
                       ) -> tuple[ProfileRequest, str]:
    """Ask RUN_ID's HOSTS ("all" or "0,3") to trace STEPS steps; ASKED hears it was asked;
    then (WAIT_SECONDS not None) wait that long at most for every host's answer -> the
    request, with the answers, and where the traces go (gs://BUCKET/podctl/runs/ID/profiles)."""
    storage = session.storage
    profiles.check_steps(steps)
    chosen = parse_hosts_text(hosts)  # '' is refused, not read as every host
    request = await profiles.request_profile(storage, run_id, steps, chosen)
    where = f"gs://{storage.bucket_name}/{request.logdir}"
    asked(request, where)
    if wait_seconds is not None:
        await profiles.wait_for_profile(storage, request, wait_seconds)
    return request, where
