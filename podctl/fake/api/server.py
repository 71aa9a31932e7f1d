"""The fake cloud's HTTP server on 127.0.0.1: the Cloud TPU v2 API under /v2/, the
bits of Compute Engine podctl reads under /compute/v1/ (compute.py), the OS Login API
under /v1/ (oslogin.py) and the admin API (faults, capacity, clock) under /admin/, on
one port; with it the fake hosts (hosts.py: an SSH server per host of every READY
node) and the GCS emulator (gcs.py), each on its own loopback port.

`FakeCloud` is the async core (the daemon runs it in its own loop); `fake_cloud()`
runs one in a background thread for synchronous callers (tests, notebooks, the
demo) and tears it down on exit. After every `world.advance()` and every call
that changes the world, `sync_hosts()` brings the hosts in line before the
answer goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from podctl.base.errors import FakeCloudError
from podctl.fake.admin import admin_api
from podctl.fake.admin.admin_client import FakeAdmin
from podctl.fake.api import access, compute, oslogin, tpu_api, wire
from podctl.fake.api.apierror import ApiError
from podctl.fake.loopback import require_loopback
from podctl.fake.storage import iam
from podctl.fake.storage.gcs import DEFAULT_BUCKET, FakeGcs
from podctl.fake.vm import maintenance
from podctl.fake.vm.hosts import HostManager, raise_nofile_limit
from podctl.fake.world import World

log = logging.getLogger(__name__)
DEFAULT_PROJECT = "fake-project"
DEFAULT_ZONE = "us-central1-a"


def save_world(world: World, path: Path) -> None:
    """Write the world atomically, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".world-")
    with os.fdopen(fd, "w") as f:
        json.dump(world.to_dict(), f)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def load_world(path: Path) -> World | None:
    if not path.exists():
        return None
    try:
        return World.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as e:
        raise FakeCloudError(f"the fake cloud's saved state {path} is unreadable ({e}); "
                             "remove it to start empty") from e


class FakeCloud:
    """One fake cloud: a World, its HTTP server, its ticker, its fault switches, its
    hosts and its GCS.

    HOSTS_ROOT and GCS_DIR default to a temporary directory removed at stop (the
    daemon keeps both in its state directory); BUCKET is made in the emulator.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, world: World | None = None,
                 state_file: Path | None = None, project: str = DEFAULT_PROJECT,
                 zone: str = DEFAULT_ZONE, tick_seconds: float = 0.2,
                 hosts_root: Path | None = None, gcs_dir: Path | None = None,
                 bucket: str = DEFAULT_BUCKET, secure: bool | None = None):
        require_loopback(host)
        self.host, self.port = host, port
        self.state_file = state_file
        self.hosts_root, self.gcs_dir, self.bucket = hosts_root, gcs_dir, bucket
        self.host_faults: Any = None  # faults.host_faults(): made on first use
        self.hosts: HostManager | None = None
        self.gcs: FakeGcs | None = None
        self._tmp: Path | None = None
        self.world: World = world or (load_world(state_file) if state_file else None) or World()
        self.project, self.zone = project, zone
        # SECURE: the project set up secure-by-default (its default compute account holds no
        # role), or (False) as older organisations' are (iam.py); None: a saved world keeps
        # its own set-up, a new one is as older organisations'.
        self.secure = secure
        self.tokens = iam.Tokens()
        self.tick_seconds = tick_seconds
        # One per coming /v2/ call: "403", "429", "503" (answered instead), "drop" (the
        # connection reset before the call is done) or "lose" (reset after it is done).
        # Each may be for one call only (e.g. "nodes.create"), or for any (None).
        self.faults: list[tuple[str, str | None]] = []
        self.latency = 0.0  # seconds added to every /v2/ call
        self.calls: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def tpu_api_url(self) -> str:
        return self.url

    @property
    def admin_url(self) -> str:
        return f"{self.url}/admin"

    @property
    def gcs_url(self) -> str:
        return self.gcs.url if self.gcs else ""

    def describe(self) -> dict[str, Any]:
        return {"running": True, "tpu_api": self.tpu_api_url, "admin": self.admin_url,
                "project": self.project, "zone": self.zone, "pid": os.getpid(),
                "gcs": self.gcs_url, "bucket": self.bucket, "account": oslogin.FAKE_ACCOUNT,
                "secure": bool(self.world.iam.get("secure")),
                "hosts_root": str(self.hosts.root) if self.hosts else None,
                "host_python": self.hosts.image.note if self.hosts else None,
                # SSH to a host: its endpoint's address at this port (None: the endpoint's port)
                "ssh_port": self.hosts.ssh_port if self.hosts else None,
                # node -> per worker, connections its hosts made outside GCS, the metadata
                # server and their VPC's hosts (hosts.outside_counts)
                "outside_requests": self.hosts.outside_counts() if self.hosts else {}}

    def sync_hosts(self) -> None:
        if self.hosts is not None:
            self.hosts.sync(self.world)

    def advance(self) -> bool:
        """world.advance() and the hosts that follow from it; True if anything changed."""
        changed = self.world.advance()
        self.sync_hosts()
        return changed

    def _scratch(self, name: str) -> Path:
        """A folder in this cloud's own temporary directory (made by start())."""
        assert self._tmp is not None
        return self._tmp / name

    async def start(self) -> None:
        raise_nofile_limit()
        if self.hosts_root is None or self.gcs_dir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="podctl-fake-"))
        try:
            if not self.world.iam:
                self.world.iam = iam.initial(bool(self.secure))
            elif self.secure is not None:
                self.world.iam["secure"] = self.secure
            self.gcs = FakeGcs(self.gcs_dir or self._scratch("gcs"), bucket=self.bucket, host=self.host,
                               tokens=self.tokens, policy=lambda: self.world.iam)
            self.gcs.start()
            self.hosts = HostManager(self.hosts_root or self._scratch("hosts"), self.gcs.url)
            self.hosts.tokens = self.tokens
            self.hosts.adopt()
            self.advance()  # READY nodes of a saved world get their hosts back
            self.save()
            await self._serve()
        except BaseException:
            await self.stop()
            raise

    @web.middleware
    async def _dated(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every answer's Date is the fake's own clock (advanced as tests say), as Google's
        answers carry Google's: what a client reads the service's time from."""
        response = await handler(request)
        response.headers["Date"] = email.utils.formatdate(self.world.now(), usegmt=True)
        return response

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[self._dated])
        app.router.add_route("*", "/v2/{tail:.*}", self._handle_v2)
        app.router.add_route("*", "/v2alpha1/{tail:.*}", self._handle_v2alpha1)
        app.router.add_route("*", "/compute/v1/{tail:.*}", self._handle_compute)
        app.router.add_route("*", "/v1/{tail:.*}", self._handle_oslogin)
        admin_api.add_routes(app, self)
        # An idle keep-alive connection (a client still open, e.g. a notebook's) must not
        # hold the fake's stop for aiohttp's default 60 s: a request takes milliseconds.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as e:
            raise FakeCloudError(f"the fake cloud cannot listen on {self.host}:{self.port}: {e}") from e
        server = site._server
        assert isinstance(server, asyncio.Server)  # a TCPSite's, once started
        self.port = server.sockets[0].getsockname()[1]  # the ephemeral port chosen
        if self.hosts is not None:  # a Google API for the hosts: reached as GCS is (vpc.reach)
            self.hosts.api_url = self.url
            self.sync_hosts()
        self._ticker = asyncio.create_task(self._tick())

    async def stop(self) -> None:
        if self._ticker:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        if self._runner:
            await self._runner.cleanup()
            self._runner = None
        if self.hosts:
            await self.hosts.close()  # the world keeps the ports, for a restart
            self.hosts = None
        if self.gcs:
            self.gcs.stop()
            self.gcs = None
        self.save()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    async def __aenter__(self) -> FakeCloud:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def save(self) -> None:
        if self.state_file:
            save_world(self.world, self.state_file)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            try:
                if self.advance():
                    self.save()
            except Exception:  # noqa: BLE001 - a ticker that dies would freeze the world
                log.exception("the fake cloud's ticker failed; it goes on")

    async def _handle_compute(self, request: web.Request) -> web.StreamResponse:
        body = None
        if request.method == "POST":
            try:
                body = await request.json() if request.can_read_body else {}
            except ValueError:
                body = None  # compute.answer refuses it
        self.advance()  # operations and VMs move on the world's clock, as the TPU API's do
        response = compute.answer(self.world, request.method, request.match_info["tail"], request.query, body)
        if request.method in ("POST", "DELETE") and response.status == 200:
            self.sync_hosts()  # the hosts follow a firewall rule or Private Google Access now
            self.save()
        return response

    async def _handle_oslogin(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _json_body(request)
        except ApiError as e:
            return web.json_response(wire.error_body(e.http_status, e.status, e.message), status=e.http_status)
        self.advance()  # an expiry is judged on the world's clock
        response = oslogin.answer(self.world, request.method, request.match_info["tail"], request.query, body)
        self.save()
        return response

    async def _handle_v2alpha1(self, request: web.Request) -> web.StreamResponse:
        return await _v2alpha1(self, request)

    async def _handle_v2(self, request: web.Request) -> web.StreamResponse:
        ints = "enum-encoding=int" in request.query.get("$alt", "")
        try:
            route, groups = tpu_api.match(request.method, request.match_info["tail"])
            self.calls[route.call] += 1
            tpu_api.check_query(route, request.query)
            access.check(self.world.projects, self.project, route.call, request.match_info["tail"])
            fault = None
            if self.faults and self.faults[0][1] in (None, route.call):
                fault = self.faults.pop(0)[0]
            if fault in {"403", "429", "503"}:
                raise _fault_error(fault, route.call, request.match_info["tail"])
            if fault == "drop":
                return _drop(request)  # the client sees a reset connection, nothing done
            if self.latency:
                await asyncio.sleep(self.latency)
            body = await _json_body(request)
            changed = self.advance()
            result = route.handler(self.world, groups, dict(request.query), body)
            if route.mutates:
                self.sync_hosts()  # a delete or stop takes the hosts away at once
            if route.mutates or changed:
                self.save()
            if fault == "lose":
                return _drop(request)  # done, but the answer never arrives
            return web.json_response(tpu_api.render(result, ints))
        except ApiError as e:
            return web.json_response(wire.error_body(e.http_status, e.status, e.message, e.details),
                                     status=e.http_status)


async def _v2alpha1(cloud: FakeCloud, request: web.Request) -> web.Response:
    """v2alpha1's nodes.get and nodes.simulateMaintenanceEvent (maintenance.py)."""
    try:
        access.check(cloud.world.projects, cloud.project, "nodes.get", request.match_info["tail"])
        body = await _json_body(request)
        cloud.advance()
        result = maintenance.v2alpha1(cloud.world, request.method, request.match_info["tail"], body)
        cloud.sync_hosts()
        cloud.save()
        return web.json_response(result)
    except ApiError as e:
        return web.json_response(wire.error_body(e.http_status, e.status, e.message, e.details),
                                 status=e.http_status)


def _drop(request: web.Request) -> web.Response:
    assert request.transport is not None
    request.transport.close()
    return web.Response()


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError as e:
        raise ApiError(400, "INVALID_ARGUMENT", f"Invalid JSON payload received: {e}") from e
    if not isinstance(body, dict):
        raise ApiError(400, "INVALID_ARGUMENT", "Invalid JSON payload received: not an object")
    return body


def _fault_error(fault: str, call: str, path: str) -> ApiError:
    if fault == "403":
        return access.denied(call, path.split(":", 1)[0])
    if fault == "429":
        return access.rate_limited(access.project_of(path) or "unknown")
    return ApiError(503, "UNAVAILABLE", "The service is currently unavailable.")


class _ThreadCloud:
    """A FakeCloud running in a thread: its URLs, its admin client, its world."""

    def __init__(self, cloud: FakeCloud):
        self.cloud = cloud
        self.admin = FakeAdmin(cloud.admin_url)

    @property
    def gcs_url(self) -> str:
        """The GCS emulator: STORAGE_EMULATOR_HOST / api_endpoint for google-cloud-storage."""
        return self.cloud.gcs_url

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cloud, name)


@contextlib.contextmanager
def fake_cloud(**kwargs: Any) -> Iterator[_ThreadCloud]:
    """Run a FakeCloud (ephemeral port by default) in a background thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="podctl-fake-cloud", daemon=True)
    thread.start()
    cloud = FakeCloud(**kwargs)
    try:
        asyncio.run_coroutine_threadsafe(cloud.start(), loop).result(timeout=30)
        yield _ThreadCloud(cloud)
    finally:
        asyncio.run_coroutine_threadsafe(cloud.stop(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
