"""The fake GCS's media reads of large objects: ranged, and served side by side.

The emulator answers a media GET by reading the whole object into memory (a 16 MB
range of a 2 GB object reads 2 GB), one request at a time. Real GCS serves an object's
bytes as fast as the network takes them, to many readers at once, and honours
`Range: bytes=A-B` (206, Content-Range), `bytes=A-` and `bytes=-N`, and answers 416
to a range that starts past the end (https://cloud.google.com/storage/docs/xml-api/reference-headers#range).

So the fake's server runs each request in a thread of its own, holding the server's
one lock for everything that touches the emulator's storage (which is not thread-safe),
and a media GET of an object of STREAM_BYTES or more is answered here: the object's
file is opened under the lock, then the lock is let go and its bytes are sent with
sendfile(2). The emulator's own writes are made atomic (a new file renamed over the
old), so a reader keeps the generation it opened, as on GCS.

A resumable upload's chunks are appended to its file (`appending_resumable`): the
emulator read the whole upload so far and wrote it back for each chunk, so a 176 MB
environment in 16 MB chunks wrote about 1 GB (17 s of the demo's first run).
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

STREAM_BYTES = 1 << 20
_MEDIA_PATH = re.compile(r"^(?:/download)?/storage/v1/b/([^/]+)/o/(.+)$")
_RANGE = re.compile(r"^\s*bytes=(\d*)-(\d*)\s*$")


def serialized(base: type) -> type:
    """Each request handled under the server's lock (a streaming read lets go of it)."""

    class Serialized(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        def _locked(self, method: str) -> None:
            with self.server.lock:
                getattr(base, method)(self)

    for verb in ("GET", "POST", "PUT", "DELETE", "PATCH"):
        setattr(Serialized, f"do_{verb}", lambda self, _m=f"do_{verb}": self._locked(_m))
    return Serialized


def atomic_writes(storage: Any) -> None:
    """STORAGE's files written whole and renamed into place (a reader keeps its file)."""
    store = storage._store
    if getattr(store, "_use_memory", True):
        return

    def write_bytes(rel: str, content: bytes) -> None:
        path: Path = store._disk_path(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, path)

    store.write_bytes = write_bytes


def appending_resumable(base: type) -> type:
    """BASE's storage whose resumable uploads append each chunk (on disk; in memory, as the
    emulator does): the same answers, the same checks, linear in the object's size."""
    from gcp_storage_emulator.exceptions import BadRequest
    from gcp_storage_emulator.storage import RESUMABLE_DIR

    class Appending(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        def add_to_resumable_upload(self, file_id: str, content: bytes | None, total_size: int | None = None,
                                    expected_start: int | None = None) -> bytes | None:
            store = self._store
            if getattr(store, "_use_memory", True):
                done: bytes | None = super().add_to_resumable_upload(file_id, content, total_size, expected_start)
                return done
            path: Path = store._disk_path(self._object_path(RESUMABLE_DIR, self.safe_id(file_id)))
            had = path.stat().st_size if path.exists() else 0
            if expected_start is not None and expected_start != had:
                raise BadRequest(f"Invalid Content-Range start: expected {had}, got {expected_start}")
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as f:
                f.write(content or b"")
            if total_size is None or had + len(content or b"") < total_size:
                return None
            return path.read_bytes()[:total_size]

    return Appending


def streaming_handler(base: type) -> type:
    """Media GETs of large objects, ranged, sent without the lock (see the module)."""

    class Streaming(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            match = _MEDIA_PATH.match(url.path)
            if not match or query.get("alt") != ["media"] or set(query) != {"alt"}:
                super().do_GET()
                return
            from gcp_storage_emulator.exceptions import NotFound

            bucket, name = unquote(match.group(1)), unquote(match.group(2))
            try:
                obj = self.storage.get_file_obj(bucket, name)
                path = self.storage._store._disk_path(self.storage._object_path(bucket, name))
                f = open(path, "rb")  # noqa: SIM115 - closed by the `with` below
            except (NotFound, OSError, AttributeError):
                super().do_GET()
                return
            with f:
                length = os.fstat(f.fileno()).st_size
                if length < STREAM_BYTES:
                    super().do_GET()
                    return
                self._send(f, length, obj)

        def _send(self, f: Any, length: int, obj: dict[str, Any]) -> None:
            start, end, status = 0, length - 1, 200
            asked = self.headers.get("Range")
            if asked:
                found = _RANGE.match(asked)
                if found and (found.group(1) or found.group(2)):
                    if not found.group(1):  # bytes=-N: the last N
                        start = max(0, length - int(found.group(2)))
                    else:
                        start = int(found.group(1))
                        if found.group(2):
                            end = min(end, int(found.group(2)))
                    if start >= length or start > end:
                        self.send_response(416, "Requested range not satisfiable")
                        self.send_header("Content-Range", f"bytes */{length}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
            self.send_response(status)
            self.send_header("Content-Type", obj.get("contentType") or "application/octet-stream")
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("x-goog-generation", str(obj["generation"]))
            self.send_header("x-goog-metageneration", str(obj.get("metageneration", "1")))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{length}")
            else:
                self.send_header("x-goog-hash", f"crc32c={obj['crc32c']},md5={obj['md5Hash']}")
            self.end_headers()
            self.wfile.flush()
            lock = self.server.lock
            lock.release()  # the bytes go out beside other requests
            try:
                offset, left = start, end - start + 1
                while left > 0:
                    sent = os.sendfile(self.connection.fileno(), f.fileno(), offset, min(left, 1 << 24))
                    if sent == 0:
                        break
                    offset, left = offset + sent, left - sent
            except OSError:  # the reader went away
                self.close_connection = True
            finally:
                lock.acquire()

    return Streaming
