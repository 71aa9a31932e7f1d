"""podctl.cloud.storage against gcp-storage-emulator, through google-cloud-storage over HTTP.

The emulator is served here from its own request handler and in-memory storage
(not `create_server`, which hides an ephemeral port), with two additions real
GCS has and the emulator lacks: list pages (it ignores maxResults/pageToken, so
pagination could not be tested at all) and injected HTTP errors (to show what is
retried and what is not). Everything else is the emulator's own behaviour.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from functools import partial
from http import server
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlparse

import pytest

from podctl.base.errors import ConfigError, StorageError
from podctl.base.settings import FAKE_BUCKET
from podctl.cloud.storage import RetryPolicy, Storage, StorageNotFound, StorageUnavailable

FAST = RetryPolicy(attempts=4, initial=0.01, maximum=0.05, deadline=10, jitter=0.01)
_LIST = re.compile(r"/storage/v1/b/(?P<bucket>[^/]+)/o")


def _handler_class():
    from gcp_storage_emulator.server import RequestHandler

    class Handler(RequestHandler):
        def _intercept(self, method: str) -> bool:
            srv = self.server
            srv.requests.append((method, self.path))
            if srv.fail:
                status = srv.fail.pop(0)
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)  # drain the body so the client sees a response
                self._send(status, {"error": {"code": status, "message": f"injected {status}"}})
                return True
            url = urlparse(self.path)
            match = _LIST.fullmatch(url.path)
            query = parse_qs(url.query)
            if method == "GET" and match and "maxResults" in query:
                self._page(match["bucket"], query)
                return True
            return False

        def _page(self, bucket: str, query: dict) -> None:
            from gcp_storage_emulator.exceptions import NotFound

            prefix = query.get("prefix", [None])[0]
            try:
                files, _ = self.storage.get_file_list(bucket, prefix, None, None)
            except NotFound:
                return self._send(404, {"error": {"code": 404, "message": "no bucket"}})
            files = sorted(files, key=lambda f: f["name"])
            start, size = int(query.get("pageToken", ["0"])[0]), int(query["maxResults"][0])
            body = {"kind": "storage#objects", "items": files[start:start + size]}
            if start + size < len(files):
                body["nextPageToken"] = str(start + size)
            self._send(200, body)

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._intercept("GET") or super().do_GET()

        def do_POST(self):
            self._intercept("POST") or super().do_POST()

        def do_PUT(self):
            self._intercept("PUT") or super().do_PUT()

        def log_message(self, format, *args):
            pass

    return Handler


@pytest.fixture(scope="session")
def emulator() -> Iterator[server.HTTPServer]:
    from gcp_storage_emulator.handlers import buckets
    from gcp_storage_emulator.storage import Storage as EmulatorStorage

    store = EmulatorStorage(use_memory_fs=True)
    buckets.create_bucket(FAKE_BUCKET, store)
    httpd = server.HTTPServer(("127.0.0.1", 0), partial(_handler_class(), store))
    httpd.store, httpd.requests, httpd.fail = store, [], []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


@pytest.fixture
def gcs(emulator) -> server.HTTPServer:
    emulator.store.wipe(keep_buckets=True)
    emulator.requests.clear()
    emulator.fail.clear()
    return emulator


def _url(httpd: server.HTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


def _storage(httpd: server.HTTPServer, bucket: str = FAKE_BUCKET, **kw) -> Storage:
    return Storage.connect(bucket, endpoint=_url(httpd), retry=FAST, **kw)


def test_bytes_round_trip_exists_and_json(gcs):
    s = _storage(gcs)
    assert s.gs_url("podctl/runs/r1/run.json") == f"gs://{FAKE_BUCKET}/podctl/runs/r1/run.json"
    assert not asyncio.run(s.exists("podctl/x.json"))
    asyncio.run(s.upload_bytes("podctl/x.json", b'{"a": [1, 2]}', content_type="application/json"))
    assert asyncio.run(s.exists("podctl/x.json"))
    assert asyncio.run(s.download_bytes("podctl/x.json")) == b'{"a": [1, 2]}'
    assert asyncio.run(s.read_json("podctl/x.json")) == {"a": [1, 2]}
    asyncio.run(s.upload_bytes("podctl/bad.json", b"not json"))
    with pytest.raises(StorageError, match="not valid JSON"):
        asyncio.run(s.read_json("podctl/bad.json"))


def test_large_file_goes_up_resumably_and_comes_back(gcs, tmp_path):
    s = _storage(gcs, chunk_size=1024 * 1024)
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(5 * 1024 * 1024 + 12345))
    assert asyncio.run(s.upload_file(big, "podctl/big.bin")) is True
    assert any("uploadType=resumable" in path for _, path in gcs.requests)
    assert sum(method == "PUT" for method, _ in gcs.requests) >= 5  # one request per chunk
    # and no background bucket lookups from the library (see Storage.__init__)
    assert not [p for _, p in gcs.requests if re.fullmatch(r"/storage/v1/b/[^/]+", urlparse(p).path)]
    out = tmp_path / "out" / "big.bin"
    out.parent.mkdir()
    asyncio.run(s.download_file("podctl/big.bin", out))
    assert out.read_bytes() == big.read_bytes()
    assert sorted(p.name for p in out.parent.iterdir()) == ["big.bin"]  # no .part left behind


def test_upload_if_missing_uploads_once(gcs, tmp_path):
    s = _storage(gcs)
    f = tmp_path / "b.tar.gz"
    f.write_bytes(b"bundle")
    assert asyncio.run(s.upload_file(f, "podctl/bundles/h.tar.gz", if_missing=True)) is True
    assert asyncio.run(s.upload_file(f, "podctl/bundles/h.tar.gz", if_missing=True)) is False
    assert s.calls["upload"] == 1 and s.calls["exists"] == 2
    assert asyncio.run(s.upload_bytes_if_missing("podctl/agents/a.py", b"x")) is True
    assert asyncio.run(s.upload_bytes_if_missing("podctl/agents/a.py", b"y")) is False
    assert asyncio.run(s.download_bytes("podctl/agents/a.py")) == b"x"


def test_missing_object_is_storage_not_found(gcs, tmp_path):
    s = _storage(gcs)
    with pytest.raises(StorageNotFound, match=f"gs://{FAKE_BUCKET}/podctl/nope"):
        asyncio.run(s.download_bytes("podctl/nope"))
    with pytest.raises(StorageNotFound):
        asyncio.run(s.download_file("podctl/nope", tmp_path / "nope"))
    assert not (tmp_path / "nope").exists()
    assert s.calls["bucket.check"] == 1  # the bucket was looked at once, then known


def test_missing_bucket_says_how_to_make_one(gcs, tmp_path):
    s = _storage(gcs, bucket="no-such-bucket")
    hint = "create it with `gcloud storage buckets create gs://no-such-bucket` or pass --bucket"
    calls = [lambda: s.download_bytes("x"), lambda: s.upload_bytes("x", b"1"), lambda: s.list("x/"),
             lambda: s.download_file("x", tmp_path / "x")]
    for call in calls:
        with pytest.raises(StorageError, match=re.escape(hint)) as info:
            asyncio.run(call())
        assert not isinstance(info.value, StorageNotFound)
    assert not asyncio.run(s.exists("x"))


def test_unreachable_fails_fast_with_a_hint():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    s = Storage.connect(FAKE_BUCKET, endpoint=f"http://127.0.0.1:{port}", retry=FAST)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match=r"cannot reach .* is it running\? `podctl fake status`"):
        asyncio.run(s.download_bytes("x"))
    assert time.monotonic() - started < 5
    assert s.calls["download"] == FAST.attempts


def test_transient_errors_are_retried_and_final_ones_are_not(gcs):
    s = _storage(gcs)
    asyncio.run(s.upload_bytes("k", b"v"))
    gcs.fail.extend([503, 429, 408])
    assert asyncio.run(s.download_bytes("k")) == b"v"
    assert s.calls["download"] == 4
    gcs.fail.append(403)
    with pytest.raises(StorageError, match=r"permission denied .*roles/storage\.objectAdmin"):
        asyncio.run(s.upload_bytes("k", b"w"))
    assert s.calls["upload"] == 2  # the first upload, then the refused one, not retried
    gcs.fail.extend([503] * FAST.attempts)
    with pytest.raises(StorageUnavailable, match="GCS failed for a moment"):
        asyncio.run(s.exists("k"))


def test_list_follows_pages_and_keeps_to_the_prefix(gcs):
    s = _storage(gcs)

    async def fill() -> None:
        for i in range(23):  # one at a time: the emulator serves one request at a time
            await s.upload_bytes(f"runs/r1/logs/{i:04d}.txt", b"x" * i)
        await s.upload_bytes("runs/r10/logs/0000.txt", b"other run")
        await s.upload_bytes("runs/r2/logs/0000.txt", b"other run")

    asyncio.run(fill())
    before = time.time()
    objects = asyncio.run(s.list("runs/r1/", page_size=10))
    assert [o.name for o in objects] == [f"runs/r1/logs/{i:04d}.txt" for i in range(23)]
    assert [o.size for o in objects] == list(range(23))
    assert all(isinstance(o.updated, float) and abs(o.updated - before) < 600 for o in objects)
    assert s.calls["list"] == 3  # 10 + 10 + 3
    assert asyncio.run(s.list("runs/none/", page_size=10)) == []


def test_real_gcs_without_credentials_is_a_config_error():
    with pytest.raises(ConfigError, match="gcloud auth application-default login"):
        Storage.connect("some-bucket")


def test_import_does_not_load_google_cloud(tmp_path: Path):
    code = ("import sys, podctl.cloud.storage, podctl.jobs.bundle; "
            "print([m for m in sys.modules if m.startswith(('google', 'pathspec'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
