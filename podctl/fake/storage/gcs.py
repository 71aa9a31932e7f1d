"""The fake cloud's GCS: `gcp-storage-emulator` on 127.0.0.1, in a thread.

google-cloud-storage reaches it with `STORAGE_EMULATOR_HOST=URL` (or
`client_options={"api_endpoint": URL}` and anonymous credentials), tensorstore /
orbax with `TENSORSTORE_GCS_HTTP_URL=URL`; the fake hosts get both in their
environment, as real TPU VMs reach real GCS without configuration.

The emulator is a single-threaded `http.server`: we build it from the package's
own request handler and storage (rather than its `Server`, which hides the port
it bound) so that it can take an ephemeral port and a deep accept backlog, since
a 512-host slice may open 512 connections at once. gcs_strict.py adds what real GCS
does and the emulator does not: preconditions, pages, and its error bodies; gcs_auth.py
its front door (a token on every request, its scopes and its account's rights, iam.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from functools import partial
from http import server
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from podctl.base.errors import FakeCloudError
from podctl.fake.loopback import require_loopback
from podctl.fake.storage import gcs_auth, gcs_media, gcs_strict, iam

DEFAULT_BUCKET = "podctl-fake"  # podctl.base.settings.FAKE_BUCKET; callers pass theirs in


class _Server(server.ThreadingHTTPServer):
    request_queue_size = 1024  # the default 5 drops SYNs when many hosts upload at once
    allow_reuse_address = True
    daemon_threads = True
    storage: object = None
    _meta_written = 0.0
    outage_until = 0.0  # time.monotonic() before which every request gets 503 (FakeGcs.outage)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whatever touches the storage holds it (gcs_media.py): one request at a time, but
        # a large object's bytes are sent without it.
        self.lock = threading.Lock()

    def service_actions(self) -> None:
        # Called by serve_forever between requests, under the storage's lock, so the
        # metadata is never written while a request changes it.
        now = time.monotonic()
        if now - self._meta_written >= META_SECONDS:
            self._meta_written = now
            with self.lock:
                self.storage.flush_meta()  # type: ignore[attr-defined]


def _lazy_meta_storage(base: Any) -> type:
    """The emulator rewrites its whole metadata file (every object, as indented JSON)
    on each write, so each upload costs time in proportion to the objects stored; a
    run's log chunks are thousands of small objects. This storage marks the file
    dirty instead, and `flush_meta()` writes it, at most every META_SECONDS and at stop."""

    class LazyMetaStorage(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        _meta_dirty = False

        def _write_config_to_file(self) -> None:
            self._meta_dirty = True

        def flush_meta(self) -> None:
            if self._meta_dirty:
                self._meta_dirty = False
                base._write_config_to_file(self)

    return LazyMetaStorage


META_SECONDS = 1.0
ENV_PREFIX = "podctl/envs/"  # agent_env.py's built host environments
STORE_VAR = "PODCTL_FAKE_ENV_STORE"


def _shared_envs(base: Any, store: Path) -> type:
    """Objects under podctl/envs/ also live in STORE, a directory that every fake cloud
    of a test session shares (as a team shares one bucket): an upload there is copied
    into STORE, a delete deletes it there, and a read of one this emulator lacks imports
    it from STORE first. So
    the host environment is built from the package index once per test session, not
    once per fake cloud. Set by PODCTL_FAKE_ENV_STORE; off by default."""
    from urllib.parse import quote

    from gcp_storage_emulator.exceptions import NotFound

    class SharedEnvStorage(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        def create_file(self, bucket_name: str, file_name: str, content: bytes, file_obj: dict[str, Any],
                        file_id: str | None = None) -> None:
            super().create_file(bucket_name, file_name, content, file_obj, file_id)
            if file_name.startswith(ENV_PREFIX):
                path = store / quote(file_name, safe="")
                tmp = path.with_name(f".{path.name}.{threading.get_ident()}")
                tmp.write_bytes(content)
                tmp.with_suffix(".meta").write_text(json.dumps(file_obj))
                os.replace(tmp.with_suffix(".meta"), path.with_name(path.name + ".meta"))
                os.replace(tmp, path)

        def delete_file(self, bucket_name: str, file_name: str) -> None:
            # a deleted environment (a refused archive) is gone for the store's clouds too
            super().delete_file(bucket_name, file_name)
            if file_name.startswith(ENV_PREFIX):
                path = store / quote(file_name, safe="")
                path.unlink(missing_ok=True)
                path.with_name(path.name + ".meta").unlink(missing_ok=True)

        def get_file_obj(self, bucket_name: str, file_name: str) -> Any:
            try:
                return super().get_file_obj(bucket_name, file_name)
            except NotFound:
                path = store / quote(file_name, safe="")
                if not file_name.startswith(ENV_PREFIX) or not path.exists():
                    raise
                obj = {**json.loads(path.with_name(path.name + ".meta").read_text()), "bucket": bucket_name}
                base.create_file(self, bucket_name, file_name, path.read_bytes(), obj)
                return super().get_file_obj(bucket_name, file_name)

    return SharedEnvStorage
_MEDIA_PATH = re.compile(r"^(?:/download)?/storage/v1/b/([^/]+)/o/(.+)$")


def _generation_handler(base: type) -> type:
    """Real GCS answers a media download with `x-goog-generation` (and 304 to
    `ifGenerationNotMatch` when the object is unchanged); the emulator sends neither.
    tensorstore (orbax's array store) keeps the generation of what it read and sends
    it back on its next conditional read, which then fails as "Malformed
    StorageGeneration": OCDBT checkpoints break on their second manifest read."""

    class GenerationHandler(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        _generation: tuple[str, str] | None = None

        def do_GET(self) -> None:
            self._generation = None
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            match = _MEDIA_PATH.match(url.path)
            if match and query.get("alt") == ["media"]:
                from gcp_storage_emulator.exceptions import NotFound

                try:
                    obj = self.storage.get_file_obj(unquote(match.group(1)), unquote(match.group(2)))
                except NotFound:
                    obj = None
                if obj is not None:
                    self._generation = (str(obj["generation"]), str(obj.get("metageneration", "1")))
                    if query.get("ifGenerationNotMatch") == [self._generation[0]]:
                        self.send_response(304, "Not Modified")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
            super().do_GET()

        def end_headers(self) -> None:
            if self._generation is not None:
                self.send_header("x-goog-generation", self._generation[0])
                self.send_header("x-goog-metageneration", self._generation[1])
                self._generation = None
            super().end_headers()

    return GenerationHandler


_UNAVAILABLE = json.dumps({"error": {"code": 503, "message": "We encountered an internal error. "
                                     "Please try again.", "errors": [{
                                         "message": "Backend Error", "domain": "global",
                                         "reason": "backendError"}]}}).encode()


def _outage_handler(base: type) -> type:
    """During an outage every request is answered 503, as GCS does when a backend is
    unavailable; google-cloud-storage, gcsfs and tensorstore all retry that. Every
    do_* method checks first, so nothing reaches the storage meanwhile."""

    class OutageHandler(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        def _unavailable(self) -> bool:
            if time.monotonic() >= self.server.outage_until:
                return False
            # Read the body first: closing a socket with unread bytes resets it, and the
            # client would see a dropped connection rather than the 503. (A chunked body
            # is not drained; the clients podctl uses send a Content-Length.)
            length = int(self.headers.get("Content-Length") or 0)
            if length > 0:
                self.rfile.read(length)
            self.send_response(503, "Service Unavailable")
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(_UNAVAILABLE)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(_UNAVAILABLE)
            self.close_connection = True
            return True

    def guarded(method: str) -> Callable[[Any], None]:
        def handle(self: OutageHandler) -> None:
            if not self._unavailable():
                getattr(base, method)(self)
        return handle

    for verb in ("GET", "POST", "PUT", "DELETE", "PATCH"):
        setattr(OutageHandler, f"do_{verb}", guarded(f"do_{verb}"))
    return OutageHandler


class FakeGcs:
    """One GCS emulator: `start()` binds and serves, `stop()` leaves no thread or port."""

    def __init__(self, data_dir: Path, *, bucket: str = DEFAULT_BUCKET, host: str = "127.0.0.1",
                 port: int = 0, tokens: iam.Tokens | None = None,
                 policy: Callable[[], dict[str, Any]] | None = None):
        # Its tokens are the fake's own (the user's is fixed): loopback keeps others out.
        require_loopback(host)
        self.data_dir, self.bucket, self.host, self.port = Path(data_dir), bucket, host, port
        self.tokens = tokens or iam.Tokens()  # the metadata servers mint into it
        fixed = iam.initial(secure=False)
        self.policy = policy or (lambda: fixed)  # the project's IAM, as it is now
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self._storage = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        from gcp_storage_emulator.server import RequestHandler
        from gcp_storage_emulator.storage import Storage

        # Its per-request INFO lines would flood the daemon's log and pytest's capture.
        logging.getLogger("gcp_storage_emulator").setLevel(logging.WARNING)
        gcs_strict.quiet_refusals()
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        storage_class = gcs_media.appending_resumable(_lazy_meta_storage(Storage))
        if os.environ.get(STORE_VAR):
            store = Path(os.environ[STORE_VAR])
            store.mkdir(parents=True, exist_ok=True, mode=0o700)
            storage_class = _shared_envs(storage_class, store)
        storage_class = gcs_strict.strict_storage(storage_class)  # GCS's preconditions
        self._storage = storage_class(data_dir=str(self.data_dir.resolve()))
        gcs_media.atomic_writes(self._storage)
        self.ensure_bucket()
        try:
            self._httpd = _Server((self.host, self.port),
                                  partial(gcs_media.serialized(_outage_handler(gcs_auth.auth_handler(
                                      gcs_strict.strict_handler(gcs_media.streaming_handler(
                                          _generation_handler(RequestHandler))),
                                      self.tokens, self.policy))), self._storage))
            self._httpd.storage = self._storage
        except OSError as e:
            raise FakeCloudError(f"the fake GCS cannot listen on {self.host}:{self.port}: {e}") from e
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="podctl-fake-gcs", daemon=True)
        self._thread.start()

    def ensure_bucket(self) -> None:
        from gcp_storage_emulator.handlers import buckets

        buckets.create_bucket(self.bucket, self._storage)  # no-op when it exists

    def outage(self, seconds: float) -> None:
        """Answer every request with 503 for SECONDS of wall-clock time from now (0 ends one)."""
        if self._httpd is not None:
            self._httpd.outage_until = time.monotonic() + seconds if seconds > 0 else 0.0

    def wipe(self) -> None:
        """Forget every object and bucket, then make the default bucket again."""
        if self._storage is not None:
            with self._httpd.lock if self._httpd is not None else contextlib.nullcontext():
                self._storage.wipe()
                self.ensure_bucket()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._storage is not None:
            self._storage.flush_meta()  # what was written survives the fake's restart
