"""Where a run's files live in GCS: every object name, written once, for both sides.

The host agent (podctl/host/agent*.py, shipped in its zip: launch.AGENT_MODULES) writes
these objects and podctl (run_files.py, logs.py, stop.py, profiles.py, ...) reads them;
both build every name here, so the two cannot drift apart. Standard library only and
Python 3.10 (it runs on the hosts' python3): it imports nothing at all.

    gs://BUCKET/podctl/runs/RUN_ID/
        run.json                                  the record (RunRecord; runs.py)
        launch.json                               the run-wide config the hosts' watchers start from
        logs/host-NNNN/NNNNNN.log                 a host's lines, in numbered chunks from 1
        heartbeat/host-NNNN.json                  the host's agent is alive
        status/host-NNNN.json                     the host's end: exit code, when, why
        control/stop.json                         the owner's stop (final)
        control/halt.json                         a stop that --recover may relaunch after
        control/stacks.json                       a request for the script's stacks
        control/profile.json                      `podctl profile`'s request
        control/acks/ID/host-NNNN.json            each host's answer to profile request ID
        profiles/plugins/profile/ID/host-NNNN.*   the traces (a TensorBoard log directory)
        stacks/STAMP/host-NNNN.txt                the script's stacks (the stall watch)
        xla_dump/host-NNNN/...                    `run --xla-dump`
        env-build.log, env-failed.txt             the environment's build (agent_env.py)
        requirements.lock                         the run's locked requirements (env_ship.py)
        checkpoints/                              PODCTL_CHECKPOINT_DIR
    gs://BUCKET/podctl/index/RUN_ID.json          the record again, so `podctl runs` lists cheaply
    gs://BUCKET/podctl/bundles/SHA256.tar.gz      a workdir bundle, by its hash
    gs://BUCKET/podctl/agents/SHA256.zip          the agent's zip, by its hash
    gs://BUCKET/podctl/envs/KEY/SHA256.tar.zst    a host environment the client built, by its hash
    gs://BUCKET/podctl/envs/KEY.SIGNER.tar.gz     one host 0 built (--build-on host; and its .json)
    gs://BUCKET/podctl/tools/uv-SHA256            the client's uv, for the hosts

A chunk's name is its number, zero-padded to six digits: GCS lists names in byte order,
which is number order up to 999999 (later ones grow a digit); readers parse the number
(`chunk_number`) and read in number order from FIRST_CHUNK, a gap ending the read
(`unbroken`): the agent uses a number only once its upload succeeded.

On each host the run has a directory of its own, ~/.podctl/runs/RUN_ID/ (HOST_RUNS_DIR),
where the launcher (launch.py, over SSH) and the agent meet: CONFIG_FILE, PID_FILE,
STOP_FILE, STATUS_FILE below.

A slice podctl made carries a startup script (boot_script.py) that starts a watcher on
every host (host_watch.py); a run starts when its pointer lands in the node's metadata
under RUN_POINTER_KEY (JSON: the bucket, launch_object, hashes, first host), and the
watcher reports in guest attributes under GUEST_NAMESPACE.

These names are what runs already in buckets were written with: they never change.
"""

from __future__ import annotations

ROOT = "podctl"
RUNS = f"{ROOT}/runs"
INDEX = f"{ROOT}/index"
BUNDLES = f"{ROOT}/bundles"
AGENTS = f"{ROOT}/agents"
ENVS = f"{ROOT}/envs/"
TOOLS = f"{ROOT}/tools"

HOST_PREFIX = "host-"
CHUNK_SUFFIX = ".log"
FIRST_CHUNK = 1


# ---- hosts ---------------------------------------------------------------------------

def host_tag(host: int) -> str:
    """host-NNNN: a host's name in every object of its own."""
    return f"{HOST_PREFIX}{int(host):04d}"


def host_of(object_name: str) -> int:
    """The host number in ".../host-NNNN.json", ".../host-NNNN.xplane.pb" or
    ".../host-NNNN/NNNNNN.log"."""
    parts = object_name.split("/")
    tag = parts[-1] if parts[-1].startswith(HOST_PREFIX) else parts[-2]
    return int(tag[len(HOST_PREFIX):].split(".")[0])


# ---- a run ---------------------------------------------------------------------------

def run_prefix(run_id: str) -> str:
    """podctl/runs/RUN_ID (no trailing slash): everything of one run is under it."""
    return f"{RUNS}/{run_id}"


def record_object(run_id: str) -> str:
    return f"{run_prefix(run_id)}/run.json"


def launch_object(run_id: str) -> str:
    """The run-wide config (launch.launch_config; --env values included) that each host's
    watcher derives its own config from (host_config.for_host)."""
    return f"{run_prefix(run_id)}/launch.json"


def index_object(run_id: str) -> str:
    return f"{INDEX}/{run_id}.json"


def index_prefix() -> str:
    return f"{INDEX}/"


def checkpoints_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}/checkpoints/"


def checkpoint_dir(bucket: str, run_id: str) -> str:
    """The gs:// directory a run's script gets as PODCTL_CHECKPOINT_DIR by default."""
    return f"gs://{bucket}/{run_prefix(run_id)}/checkpoints"


def run_url(bucket: str, run_id: str) -> str:
    """gs://BUCKET/podctl/runs/RUN_ID (the script's PODCTL_RUN_DIR)."""
    return f"gs://{bucket}/{run_prefix(run_id)}"


# ---- logs: numbered chunks -----------------------------------------------------------

def log_prefix(run_id: str, host: int | None = None) -> str:
    """Every host's chunks, or HOST's only."""
    return f"{run_prefix(run_id)}/logs/" + (f"{host_tag(host)}/" if host is not None else "")


def chunk_name(number: int) -> str:
    """NNNNNN.log: six digits at least, so that GCS lists them in order."""
    return f"{number:06d}{CHUNK_SUFFIX}"


def chunk_object(run_id: str, host: int, number: int) -> str:
    return f"{log_prefix(run_id, host)}{chunk_name(number)}"


def chunk_number(object_name: str) -> int:
    """The number of a chunk's object (or of its bare name)."""
    return int(object_name.rsplit("/", 1)[-1].split(".", 1)[0])


def chunks_by_host(object_names: list[str]) -> dict[int, list[tuple[int, str]]]:
    """host -> [(chunk number, object name)] in number order, whatever order the names
    were listed in (GCS's byte order is not number order past 999999)."""
    by_host: dict[int, list[tuple[int, str]]] = {}
    for name in object_names:
        by_host.setdefault(host_of(name), []).append((chunk_number(name), name))
    return {h: sorted(chunks) for h, chunks in by_host.items()}


def unbroken(chunks: list[tuple[int, str]], expected: int = FIRST_CHUNK) -> list[tuple[int, str]]:
    """The chunks to read next, from number EXPECTED on without a gap: one host's chunks
    (in number order) are read in unbroken order, and a gap ends the read (the chunk
    after it is not written yet, or its upload is being retried)."""
    out = []
    for number, name in chunks:
        if number < expected:
            continue
        if number != expected:
            break
        out.append((number, name))
        expected += 1
    return out


# ---- a host's heartbeat and end ------------------------------------------------------

def heartbeat_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}/heartbeat/"


def heartbeat_object(run_id: str, host: int) -> str:
    return f"{heartbeat_prefix(run_id)}{host_tag(host)}.json"


def status_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}/status/"


def status_object(run_id: str, host: int) -> str:
    return f"{status_prefix(run_id)}{host_tag(host)}.json"


# ---- requests to a running run (control/) and what answers them ----------------------

def control_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}/control/"


def stop_request_object(run_id: str) -> str:
    """The owner's stop of RUN_ID ({"by", "requested", "grace_seconds"}): the hosts'
    agents act on it, and recovery and the queue never relaunch a run that has one."""
    return f"{control_prefix(run_id)}stop.json"


def halt_request_object(run_id: str) -> str:
    """A stop that is not the owner's final word ({"grace": seconds or null, "by"}): the
    agents stop the script as for stop.json, but --recover may relaunch the run after it."""
    return f"{control_prefix(run_id)}halt.json"


def stacks_request_object(run_id: str) -> str:
    """A request for the script's stacks ({"id"}): each new id is one capture (as SIGUSR1)."""
    return f"{control_prefix(run_id)}stacks.json"


def profile_request_object(run_id: str) -> str:
    """`podctl profile`'s request ({"id", "steps", "hosts", "requested"}); a new one
    replaces the last."""
    return f"{control_prefix(run_id)}profile.json"


def profile_acks_prefix(run_id: str, request_id: str) -> str:
    return f"{control_prefix(run_id)}acks/{request_id}/"


def profile_ack_object(run_id: str, request_id: str, host: int) -> str:
    return f"{profile_acks_prefix(run_id, request_id)}{host_tag(host)}.json"


def profiles_logdir(run_id: str) -> str:
    """The run's TensorBoard log directory of profiles (no trailing slash)."""
    return f"{run_prefix(run_id)}/profiles"


def profile_session_prefix(run_id: str, request_id: str) -> str:
    """One profile request's session, every host in it (no trailing slash)."""
    return f"{profiles_logdir(run_id)}/plugins/profile/{request_id}"


def profile_trace_object(run_id: str, request_id: str, host: int, suffix: str) -> str:
    """One file of HOST's trace: host-NNNN.xplane.pb (SUFFIX ".xplane.pb"), and so on."""
    return f"{profile_session_prefix(run_id, request_id)}/{host_tag(host)}{suffix}"


def stacks_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}/stacks/"


def stacks_object(run_id: str, stamp: str, host: int) -> str:
    """HOST's stacks of one capture (STAMP: its UTC time, YYYYMMDDTHHMMSSZ)."""
    return f"{stacks_prefix(run_id)}{stamp}/{host_tag(host)}.txt"


def xla_dump_prefix(run_id: str, host: int) -> str:
    return f"{run_prefix(run_id)}/xla_dump/{host_tag(host)}/"


# ---- the run's environment -----------------------------------------------------------

def env_build_log_object(run_id: str) -> str:
    return f"{run_prefix(run_id)}/env-build.log"


def env_failed_object(run_id: str) -> str:
    return f"{run_prefix(run_id)}/env-failed.txt"


def identity_check_object(run_id: str) -> str:
    """What worker 0 writes, reads and deletes before the run starts (jobs/identity.py)."""
    return f"{run_prefix(run_id)}/identity-check"


def requirements_lock_object(run_id: str) -> str:
    return f"{run_prefix(run_id)}/requirements.lock"


def env_client_archive_object(key: str, sha256: str) -> str:
    """The environment KEY as a client built it (env_build.py), by its archive's sha256."""
    return f"{ENVS}{key}/{sha256}.tar.zst"


def env_archive_objects(key: str, signer: str) -> tuple[str, str]:
    """(the archive, its signed sidecar) of the environment KEY built for SIGNER."""
    name = f"{ENVS}{key}.{signer}"
    return f"{name}.tar.gz", f"{name}.json"


# ---- on a host: the run's own directory (not in GCS) ---------------------------------

HOST_RUNS_DIR = ".podctl/runs"  # under the host user's home: ~/.podctl/runs/RUN_ID/
CONFIG_FILE = "config.json"  # the run's config for this host, written over SSH stdin (0600)
PID_FILE = "agent.pid"  # the agent's pid, written once it can take a stop
STOP_FILE = "stop"  # podctl's stop marker; its text, if any: the script's grace in seconds
STATUS_FILE = "status.json"  # the host's end, as uploaded (a run that has one has ended)
JAX_CACHE_DIR = "jax-cache"  # ~/.podctl/jax-cache: JAX's persistent compilation cache (agent.py)

# One owner of the chips per host, whoever started the run (root through the watchers, the
# login user over SSH: two homes): each run's agent keeps a file RUN_ID, "PID STATE\n",
# in CHIPS_DIR under the host's /tmp (agent_chips.py writes it; owner.py and host_watch.py
# read it), from its start until its script and what it left have ended.
CHIPS_DIR = "podctl-chips"
CHIPS_LIVE, CHIPS_STOPPING = "live", "stopping"  # STATE: holds the chips / asked to let go
LIBTPU_LOCKFILE = "libtpu_lockfile"  # libtpu's, in the host's /tmp


# ---- a slice's node metadata and guest attributes (boot_script.py, host_watch.py) ------

RUN_POINTER_KEY = "podctl-run"  # node metadata: the run to start (JSON, no secrets)
BOOT_KEY = "podctl-boot"  # node metadata: the startup script's version (boot_script.BOOT_VERSION)
GUEST_NAMESPACE = "podctl"  # guest attributes: podctl/watch (the watcher), podctl/run, podctl/state
WATCH_DIR = ".podctl/watch"  # under a non-root host user's home: the watcher's file, lock and log


# ---- shared by every run: by content hash --------------------------------------------

def bundle_object(digest: str) -> str:
    return f"{BUNDLES}/{digest}.tar.gz"


def agent_object(sha: str) -> str:
    return f"{AGENTS}/{sha}.zip"


def uv_tool_object(sha: str) -> str:
    return f"{TOOLS}/uv-{sha}"


def zstandard_tool_object(sha: str) -> str:
    """The zstandard package a host without `zstd` unpacks with (env_zstandard.py), zipped."""
    return f"{TOOLS}/zstandard-{sha}.zip"
