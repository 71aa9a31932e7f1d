"""Shared fixtures: an isolated home for podctl, and a fake cloud per test session.

Every test that uses `fake` ends by asserting that the fake cloud holds no node and
no queued resource (nothing billable) unless it marked otherwise; the world is then
reset so tests do not see each other's switches.

google.cloud.common is imported for the tests that drive google-cloud-tpu's own LRO
methods (`.result()`) against the fake: like Google, the fake types operation metadata
google.cloud.common.OperationMetadata, which that client can parse only when this
package has registered it, as for any user of it against Google. podctl itself never
needs it (podctl/cloud/operations.py); tests/test_real_shapes.py proves that with a type
nobody registers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import google.cloud.common  # noqa: F401
import pytest

from podctl.cloud.connect import api_for_endpoint
from podctl.cloud.tpu_client import RetryPolicy, TpuApi
from podctl.cloud.wait import WaitPolicy
from podctl.fake.admin.admin_client import FakeCompute
from podctl.fake.api.server import fake_cloud
from tests.pg_support import pg_server, pg_url  # noqa: F401 (fixtures: a real PostgreSQL)
from tests.schedule import schedule

PROJECT = "test-project"
ZONE = "us-central1-a"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
# Fast enough for tests, still exponential with a cap.
FAST = WaitPolicy(initial=0.02, maximum=0.2, jitter=0.01, timeout=30)
FAST_RETRY = RetryPolicy(attempts=4, initial=0.01, maximum=0.05, deadline=10)
TIME_SCALE = 300.0  # a 90 s creation takes 0.3 s
# One store of built host environments for every fake cloud of this test session (the
# daemons of CLI tests too, and every pytest-xdist worker), as a team shares one bucket:
# the hosts' Python environment is built from the package index once per session
# (podctl/fake/storage/gcs.py, _shared_envs). The process that starts the session names it;
# xdist's workers inherit that name from it (PYTEST_XDIST_WORKER says which we are).
# PODCTL_TEST_ENV_STORE: a store kept across test sessions (a developer's reruns of one
# test need not build the hosts' environment each time); CI builds its own.
KEEP_ENV_STORE = bool(os.environ.get("PODCTL_TEST_ENV_STORE"))
if KEEP_ENV_STORE:
    ENV_STORE = Path(os.environ["PODCTL_TEST_ENV_STORE"])
elif os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("PODCTL_FAKE_ENV_STORE", "").startswith(
        str(Path(tempfile.gettempdir()) / "podctl-test-envs-")):
    ENV_STORE = Path(os.environ["PODCTL_FAKE_ENV_STORE"])
else:
    ENV_STORE = Path(tempfile.gettempdir()) / f"podctl-test-envs-{os.getpid()}"
os.environ["PODCTL_FAKE_ENV_STORE"] = str(ENV_STORE)

# pytest-xdist's workers ignore SIGINT (and may ignore SIGTERM/SIGHUP); a child inherits
# an ignored signal, and podctl routes only signals left at their default: the signal
# tests' children must see them as a user's terminal would.
for _sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _sig == signal.SIGINT else signal.SIG_DFL)


def isolated_environ(tmp: Path) -> dict[str, str]:
    """An environment with podctl's directories in TMP and no way to real Google services."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CLOUDSDK_", "PODCTL_", "GOOGLE_")) and k != "STORAGE_EMULATOR_HOST"}
    env.update({
        "PODCTL_STATE_DIR": str(tmp / "state"),
        "PODCTL_CONFIG_DIR": str(tmp / "config"),
        "CLOUDSDK_CONFIG": str(tmp / "gcloud"),
        "HOME": str(tmp / "home"),
        # google-auth must not probe a metadata server from tests.
        "NO_GCE_CHECK": "True",
        "GCE_METADATA_HOST": "127.0.0.1:9",
        "GCE_METADATA_IP": "127.0.0.1:9",
        "PODCTL_FAKE_TIME_SCALE": str(TIME_SCALE),
        "PODCTL_FAKE_ENV_STORE": str(ENV_STORE),
    })
    return env


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _stop_signals_left_as_found() -> Iterator[None]:
    """Each test starts with this worker's SIGINT/SIGTERM/SIGHUP as the session found them
    (the Python API routes them in-process). One that a test left ignored fails it by
    name: every process the next tests start would inherit it (a podctl told to stop by
    SIGHUP would never hear it)."""
    before = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    yield
    ignored = [signal.Signals(sig).name for sig in _STOP_SIGNALS
               if signal.getsignal(sig) is signal.SIG_IGN and before[sig] is not signal.SIG_IGN]
    for sig, handler in before.items():
        signal.signal(sig, handler)
    assert not ignored, f"the test left {', '.join(ignored)} ignored in the test process"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith(("CLOUDSDK_", "PODCTL_", "GOOGLE_")):
            monkeypatch.delenv(key)
    for key, value in isolated_environ(tmp_path).items():
        monkeypatch.setenv(key, value)
    (tmp_path / "home").mkdir()
    _share_env_signing_key(tmp_path / "state")
    return tmp_path


def _share_env_signing_key(state: Path) -> None:
    """Every test's client signs the hosts' environments with the session's one key (as
    one user's runs do), so the environment built once in ENV_STORE is trusted by the
    next test's client instead of being built again (podctl/jobs/env_lock.py)."""
    ENV_STORE.mkdir(parents=True, exist_ok=True, mode=0o700)
    from podctl.jobs.env_lock import client_secret

    secret = client_secret(ENV_STORE)  # made once, 0600, kept with the store
    state.mkdir(parents=True, exist_ok=True)
    for kept in ("locks", "envs"):  # the locks and the environments packed so far, as one user's
        (ENV_STORE / kept).mkdir(exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (state / kept).symlink_to(ENV_STORE / kept, target_is_directory=True)
    key = state / "env-signing.key"
    key.write_text(secret.hex() + "\n")
    key.chmod(0o600)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "host_env: the test's hosts run jax, from an environment "
                            "built once per session (tests/conftest.py, _host_env_built_once)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    schedule(config, items)  # under xdist, the long cases first (tests/schedule.py)
    # A host_env test may build the hosts' env (minutes) or wait for another worker's
    # test that builds it (_host_env_built_once): more than the suite's 300 s per test.
    for item in items:
        if "host_env" in item.keywords and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(1500))


def pytest_sessionfinish(session: pytest.Session) -> None:
    # the session's own process, after every worker; a kept store (PODCTL_TEST_ENV_STORE) stays
    if not hasattr(session.config, "workerinput") and not KEEP_ENV_STORE:
        shutil.rmtree(ENV_STORE, ignore_errors=True)


def _jax_env_stored() -> bool:
    """True once some client of this session packed a host environment with jax
    (STATE_DIR/envs, shared: jobs/env_build.py), or some fake cloud stored one that
    host 0 built (--build-on host)."""
    from podctl.jobs.env_lock import env_key

    for kept in (ENV_STORE / "locks").glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            stored = json.loads(kept.read_text())
            if "\njax==" in "\n" + stored["lock"] and any(
                    (ENV_STORE / "envs").glob(f"{env_key(stored['lock'], stored['python'])}.*.json")):
                return True
    for sidecar in ENV_STORE.glob("podctl%2Fenvs%2F*.json"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(sidecar.read_text()).get("jax"):
                return True
    return False


@pytest.fixture(autouse=True)
def _host_env_built_once(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under pytest-xdist, the first `host_env` test builds the hosts' jax environment
    while the others that need it wait, then fetch it from ENV_STORE, rather than every
    worker building it from the package index at once on the same cores."""
    if "host_env" not in request.keywords or _jax_env_stored():
        yield
        return
    ENV_STORE.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(ENV_STORE / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held by the test that builds it, until it ends
        if _jax_env_stored():
            fcntl.flock(lock, fcntl.LOCK_UN)
        yield


@pytest.fixture(scope="session")
def _session_cloud() -> Iterator:
    with fake_cloud() as cloud:
        yield cloud


@pytest.fixture
def fake(_session_cloud, request: pytest.FixtureRequest) -> Iterator:
    """The fake cloud, fresh for this test, checked empty at its end."""
    admin = _session_cloud.admin
    admin.reset()
    admin.set_timings(time_scale=TIME_SCALE)
    # The tests' project has Private Google Access on its default subnet, so that a node
    # made here without external IPs (a raw API node's default) reaches GCS, as a company
    # project set up for internal IPs does; the fake's own default is off (fake/api/vpc.py).
    FakeCompute(_session_cloud.tpu_api_url).set_private_google_access(
        PROJECT, ZONE.rsplit("-", 1)[0], "default", True)
    yield _session_cloud
    if "leaves_resources" not in request.keywords:
        leftover = admin.resources()
        admin.reset()
        assert not any(leftover.values()), f"the test left billable resources: {leftover}"
    admin.reset()


@pytest.fixture
def api(fake) -> TpuApi:
    return api_for_endpoint(fake.tpu_api_url, retry=FAST_RETRY)


@pytest.fixture
def client(api: TpuApi):
    """google-cloud-tpu's own client, against this test's fake cloud."""
    return api.client


# ---- the CLI as a user runs it: separate `podctl` processes and the fake's daemon ----

class Podctl:
    def __init__(self, tmp: Path):
        self.env = isolated_environ(tmp)
        self.tmp = tmp

    def __call__(self, *args: str, check: bool = True, env: dict | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "podctl", *args], capture_output=True, text=True,
                              env={**self.env, **(env or {})}, stdin=subprocess.DEVNULL, timeout=timeout,
                              cwd=self.tmp)
        if check and proc.returncode != 0:
            raise AssertionError(f"podctl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
        return proc

    def json(self, *args: str) -> object:
        return json.loads(self(*args, "--json").stdout)


def stop_fake_and_check(cli: Podctl) -> None:
    """The end of a CLI test: stop its fake daemon, and fail if it held anything billable.
    Through the library here, not `podctl fake status` and `fake stop` (their CLI is
    test_cli's): two processes at the end of every CLI test, 1-2 s of CPU each time."""
    from podctl.base.settings import state_dir

    stop_fake_dir_and_check(state_dir(cli.env) / "fake")  # the CLI's settings' fake_dir


def stop_fake_dir_and_check(fake_dir: Path) -> None:
    """Stop the fake daemon of FAKE_DIR if it runs, and fail if it held anything billable."""
    from podctl.fake.admin import daemon
    from podctl.fake.admin.admin_client import FakeAdmin

    status = daemon.status(fake_dir)
    if status.get("running"):
        leftover = FakeAdmin(status["admin"]).resources()
        assert daemon.stop(fake_dir), f"the fake daemon of {fake_dir} would not stop"
        assert not any(leftover.values()), f"the test left billable resources: {leftover}"


@pytest.fixture
def fake_dir() -> Iterator[Path]:
    """The isolated state dir's fake daemon (a Python API test's `backend="fake"`), stopped
    and checked empty at the end even when the test failed before its own teardown."""
    from podctl.base.settings import state_dir

    where = state_dir() / "fake"
    yield where
    stop_fake_dir_and_check(where)


@contextlib.contextmanager
def raw_api(base: str) -> Iterator[Any]:
    """call(method, path, body=None, **params) against BASE with requests, no client
    library: the fake's answers as they are on the wire (status codes, error bodies)."""
    import requests

    session = requests.Session()

    def call(method: str, path: str, body: dict | None = None, **params: str) -> requests.Response:
        return session.request(method, f"{base}/{path}", json=body, params=params or None)

    try:
        yield call
    finally:
        session.close()


@contextlib.contextmanager
def slice_on_daemon(cli: Podctl, slice_type: str, name: str) -> Iterator[Podctl]:
    """A CLI test's slice: the fake daemon with NAME up; at the end NAME is brought
    down and the daemon stopped and checked to hold nothing billable."""
    cli.env["PODCTL_BACKEND"] = "fake"
    try:
        cli("up", "--slice", slice_type, "--name", name)
        yield cli
    finally:  # a failed test too: its fake daemon and hosts must not outlive it
        cli("down", name, "--yes", check=False)
        stop_fake_and_check(cli)


def fake_booting_after_the_test(cli: Podctl) -> None:
    """`podctl fake start` with every host's startup-script due later than a test lives
    (the fake's `boot_late`, fake/vm/boot.py: a real big slice's hosts boot for minutes
    after READY): a test of a big slice's up, status and down, which never reaches a host,
    does not start hundreds of watchers on 2 cores (a v5p-4096's 512 cost 65 s of CPU).
    The boots themselves are test_boot_late's and the lifecycle example's v5p-16's
    (test_cli.py, whose v5p-4096 boots late the same way)."""
    from podctl.fake.admin.admin_client import FakeAdmin

    cli("--backend", "fake", "fake", "start")
    FakeAdmin(cli.json("fake", "status")["admin"]).set_timings(boot_late=1e7)


@pytest.fixture
def podctl(tmp_path: Path):
    cli = Podctl(tmp_path)
    yield cli
    stop_fake_and_check(cli)


def user_credentials():
    """The user's own credentials on the fake cloud (its GCS wants a token, as GCS does;
    this one is the fake project's owner: podctl/fake/storage/iam.py)."""
    from google.oauth2.credentials import Credentials

    from podctl.base.settings import FAKE_USER_TOKEN

    return Credentials(token=FAKE_USER_TOKEN)


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("podctl: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0]
