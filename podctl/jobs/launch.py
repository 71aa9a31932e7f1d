"""Start a run on every host: the agent comes from GCS, the config over SSH stdin.

Per host, one SSH exec writes the host's config (0600; it holds the --env values)
and starts the agent detached (`setsid nohup`), then returns; the agent lives on
when podctl disconnects. The agent file is uploaded to GCS once per version and
fetched by each host itself, so the user's uplink carries a few hundred bytes per
host, not a copy of anything.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podctl.base.errors import JobError
from podctl.base.vocabulary import HEARTBEAT_SECONDS
from podctl.cloud.firewall import COORDINATOR_PORT, MEGASCALE_PORT
from podctl.cloud.types import SliceInfo
from podctl.host import host_config as host_config_module
from podctl.host import run_layout
from podctl.jobs.ssh import Fleet, Target

JAX_COORDINATOR_PORT = COORDINATOR_PORT  # 8476: cloud/firewall.py says why
HOST_COMMAND_SECONDS = 30.0  # a stop or a stacks request on one host: a host that does not answer is left
AGENT_FILE = Path(__file__).parent.parent / "host" / "agent.py"

# What the agent's zip holds: agent.py, its siblings, and the standard-library modules
# it shares with podctl (metric_line.py: a script's records; run_layout.py: every GCS name;
# host_config.py: a host's config from launch.json, which the host's watcher runs).
AGENT_MODULES = ("agent.py", "agent_gcs.py", "agent_env.py", "agent_env_fetch.py", "agent_control.py",
                 "agent_logs.py", "agent_maintenance.py", "agent_procs.py", "agent_watch.py", "agent_chips.py",
                 "metric_line.py",
                 "run_layout.py", "host_config.py")
_AGENT_MAIN = b"import sys\nimport agent\nsys.exit(agent.main(sys.argv))\n"

# Run on the host as `python3 -c BOOT RUN_DIR` by the system interpreter of a fresh
# TPU VM (3.10, standard library only): fetch the agent's zip once (checked against
# its hash) through GCS's JSON API with the metadata server's token, then run it.
# ("CONFIG_FILE" is replaced by run_layout's name for the host's config below.)
BOOT = """
import hashlib, json, os, runpy, sys, urllib.parse, urllib.request
from pathlib import Path
d = Path(sys.argv[1]); cfg = json.loads((d / "CONFIG_FILE").read_text())
a = Path.home() / ".podctl" / "agents" / (cfg["agent_sha"] + ".zip")
if not a.exists():
    def get(url, headers):
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as r:
            return r.read()
    md = os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"
    token = json.loads(get("http://%s/computeMetadata/v1/instance/service-accounts/default/token" % md,
                           {"Metadata-Flavor": "Google"}))["access_token"]
    gcs = (os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com").rstrip("/")
    q = lambda s: urllib.parse.quote(s, safe="")
    data = get("%s/download/storage/v1/b/%s/o/%s?alt=media" % (gcs, q(cfg["bucket"]), q(cfg["agent_object"])),
               {"Authorization": "Bearer " + token})
    if hashlib.sha256(data).hexdigest() != cfg["agent_sha"]:
        sys.exit("podctl: the agent in GCS does not match its hash")
    a.parent.mkdir(parents=True, exist_ok=True)
    t = a.with_name(a.name + ".%d" % os.getpid()); t.write_bytes(data); os.replace(t, a)
sys.argv = [str(a), str(d)]
runpy.run_path(str(a), run_name="__main__")
""".replace("CONFIG_FILE", run_layout.CONFIG_FILE)


@dataclass(frozen=True)
class JobSpec:
    """What to run on every host; `env` may hold secrets and goes only into configs."""

    run_id: str
    bucket: str
    project: str
    script: str | None = None
    args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    setup: str | None = None
    bundle_hash: str | None = None
    bundle_object: str | None = None
    coordinator_port: int = JAX_COORDINATOR_PORT
    flush_seconds: float = 2.0
    checkpoint_dir: str | None = None  # None: the run's own (run_layout.checkpoint_dir)
    environment: dict[str, Any] | None = None  # env_lock.EnvPlan.to_config: the lock, its key; may hold credentials


def agent_source() -> tuple[bytes, str]:
    """The agent as one zip (agent.py and its sibling modules, and a __main__), the same
    bytes for the same sources (fixed times), so its hash names its version."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in AGENT_MODULES:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), AGENT_FILE.with_name(name).read_bytes())
        z.writestr(zipfile.ZipInfo("__main__.py", (1980, 1, 1, 0, 0, 0)), _AGENT_MAIN)
    data = out.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def targets_for(info: SliceInfo, ssh_port: int | None) -> list[Target]:
    """The hosts of a slice as job processes, reached by SSH at the endpoint's external
    (else internal) address and SSH_PORT (22 on TPU VMs; the settings say, see connect.job_ports); None
    only for the fake's macOS fallback, where each endpoint names its own port."""
    targets: list[Target] = []
    for host in info.hosts:
        address = host.external_ip or host.ip
        targets.append(Target(index=len(targets), slice_index=host.slice_index, worker=host.worker,
                              address=address, port=ssh_port if ssh_port is not None else host.port,
                              internal=host.ip))
    if not targets:
        raise JobError(f"slice {info.name} has no hosts; is it READY? (`podctl status {info.name}`)")
    return targets


def launch_config(spec: JobSpec, targets: list[Target], agent_sha: str) -> dict[str, Any]:
    """The run-wide config (launch.json in GCS: --env values included, so never in metadata):
    every JobSpec field as a host's config uses it, and per host only [slice_index, worker,
    peer_address]; host_config.for_host derives each host's config from it."""
    for position, target in enumerate(targets):
        if target.index != position:
            raise JobError(f"{target.name} is at position {position} of the run's hosts")
    return {
        "v": host_config_module.LAUNCH_VERSION,
        "run_id": spec.run_id, "bucket": spec.bucket, "project": spec.project,
        "hosts": [[t.slice_index, t.worker, t.peer_address] for t in targets],
        "coordinator_port": spec.coordinator_port, "megascale_port": MEGASCALE_PORT,
        "checkpoint_dir": spec.checkpoint_dir or run_layout.checkpoint_dir(spec.bucket, spec.run_id),
        "script": spec.script, "args": list(spec.args), "command": list(spec.command),
        "env": dict(spec.env), "setup": spec.setup,
        "bundle_hash": spec.bundle_hash, "bundle_object": spec.bundle_object,
        "agent_sha": agent_sha, "agent_object": run_layout.agent_object(agent_sha),
        "flush_seconds": spec.flush_seconds, "heartbeat_seconds": HEARTBEAT_SECONDS,
        "environment": spec.environment,
    }


def host_config(spec: JobSpec, target: Target, targets: list[Target], agent_sha: str) -> dict[str, Any]:
    """TARGET's config, as the watcher derives it on the host from launch.json."""
    return host_config_module.for_host(launch_config(spec, targets, agent_sha), target.index)


def run_dir(run_id: str) -> str:
    # "$HOME" quoted: a HOME with a space (a fake host under such a state dir) would
    # otherwise split into two words ("ambiguous redirect")
    return f"\"$HOME\"/{run_layout.HOST_RUNS_DIR}/{shlex.quote(run_id)}"


def start_command(run_id: str, once: bool = False) -> str:
    """The shell line that writes stdin to the config and starts the agent detached.
    Only podctl's own constants reach it, each quoted.

    ONCE (a queued run, whose id is fixed and whose start a killed tick may repeat):
    the host starts the agent only if it makes the run's `started` marker itself
    (mkdir is atomic), so a second start of the same run id is a no-op."""
    d = run_dir(run_id)
    start = (f"cat > {d}/{run_layout.CONFIG_FILE} && cd {d} && "
             f"(setsid nohup python3 -c {shlex.quote(BOOT)} \"$PWD\" > agent.out 2>&1 < /dev/null &)"
             " && echo started")
    if once:
        return (f"umask 077 && mkdir -p {d} && if mkdir {d}/started 2>/dev/null; then {start}; "
                "else cat > /dev/null && echo started already; fi")
    return f"umask 077 && mkdir -p {d} && {start}"


def stacks_command(run_id: str) -> str:
    """Ask a running agent for its script's stacks (SIGUSR1; it uploads them to GCS)."""
    d = run_dir(run_id)
    pid = f"{d}/{run_layout.PID_FILE}"
    return f"if test -f {pid}; then kill -USR1 \"$(cat {pid})\" 2>/dev/null; fi; true"


async def _on_every_host(fleet: Fleet, command: str) -> None:
    """COMMAND on every host, best effort: a host that is gone has nothing to do."""

    async def run(conn: Any, target: Target) -> None:
        try:
            await asyncio.wait_for(conn.run(command, check=False), HOST_COMMAND_SECONDS)
        except Exception:  # a host that is gone, frozen, or its connection cut
            pass

    await fleet.each(run)


async def ask_for_stacks(fleet: Fleet, run_id: str) -> None:
    """Every host's agent captures its script's stacks into the run's stacks/ folder."""
    await _on_every_host(fleet, stacks_command(run_id))


def stop_command(run_id: str, grace_seconds: float | None = None) -> str:
    """Leave a stop marker (for an agent still starting), then signal a running one.
    GRACE_SECONDS: how long the script has to end before SIGKILL (default: the agent's)."""
    d = run_dir(run_id)
    stop, pid = f"{d}/{run_layout.STOP_FILE}", f"{d}/{run_layout.PID_FILE}"
    mark = f"echo {float(grace_seconds)} > {stop}" if grace_seconds is not None else f"touch {stop}"
    return (f"mkdir -p {d} && {mark} && "
            f"if test -f {pid}; then kill -TERM \"$(cat {pid})\" 2>/dev/null; fi; true")


async def start_agents(fleet: Fleet, spec: JobSpec, agent_sha: str, once: bool = False) -> None:
    command = start_command(spec.run_id, once)

    async def start(conn: Any, target: Target) -> None:
        config = json.dumps(host_config(spec, target, fleet.targets, agent_sha))
        result = await conn.run(command, input=config, check=False)
        if result.exit_status != 0 or "started" not in (result.stdout or ""):
            tail = (result.stderr or result.stdout or "").strip().splitlines()[-3:]
            raise JobError(f"{target.name} did not start the podctl agent (exit "
                           f"{result.exit_status}): {' | '.join(tail) or 'no output'}")

    await fleet.each(start)


async def stop_agents(fleet: Fleet, run_id: str, grace_seconds: float | None = None) -> None:
    """Ask every host's agent to stop (SIGTERM to the script's process group; SIGKILL
    after GRACE_SECONDS, or the agent's own grace)."""
    await _on_every_host(fleet, stop_command(run_id, grace_seconds))
