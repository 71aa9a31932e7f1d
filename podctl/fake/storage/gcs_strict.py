"""What the GCS emulator leaves out and real GCS does (podctl/fake/README.md has the
sources): preconditions, pages, and error bodies.

- Preconditions: `ifGenerationMatch` / `ifGenerationNotMatch` / `ifMetagenerationMatch`
  / `ifMetagenerationNotMatch` on uploads (media, multipart, resumable: checked when the
  upload starts and when it completes), on reads and on deletes; a condition that does
  not hold is 412 `conditionNotMet` (a read's `ifGenerationNotMatch`/
  `ifMetagenerationNotMatch` that does not hold is 304, as for a media download).
  `ifGenerationMatch=0`: only if no live object has the name.
- Pages: `objects.list` gives at most `maxResults` (at most and by default 1,000)
  entries of items and prefixes together, and a `nextPageToken` while more remain.
- Errors: a missing bucket or object is 404 with the JSON body GCS gives (recorded).
- A new object (generation) has metageneration 1.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

MAX_RESULTS = 1000
_CONDITIONS = ("ifGenerationMatch", "ifGenerationNotMatch", "ifMetagenerationMatch",
               "ifMetagenerationNotMatch")
_API = r"(?:/storage/v1)?"
_LIST = re.compile(rf"^{_API}/b/([^/]+)/o$")
_OBJECT = re.compile(rf"^(?:/download/storage/v1|{_API})/b/([^/]+)/o/(.+)$")
_UPLOAD = re.compile(r"^/upload/storage/v1/b/([^/]+)/o$")
_PRECONDITION = "At least one of the pre-conditions you specified did not hold."


def error_body(code: int, message: str, reason: str, status: str | None = None) -> bytes:
    """GCS's JSON error (recorded: k8s-config-connector mockstorage and storagebucket logs)."""
    error: dict[str, Any] = {"code": code, "errors": [{"domain": "global", "message": message,
                                                        "reason": reason}], "message": message}
    if status:
        error["status"] = status
    return json.dumps({"error": error}).encode()


def no_bucket() -> tuple[int, bytes]:
    return 404, error_body(404, "The specified bucket does not exist.", "notFound")


def no_object(bucket: str, name: str) -> tuple[int, bytes]:
    return 404, error_body(404, f"No such object: {bucket}/{name}", "notFound", "NOT_FOUND")


def not_met() -> tuple[int, bytes]:
    return 412, error_body(412, _PRECONDITION, "conditionNotMet")


class PreconditionFailed(Exception):
    """An upload's condition did not hold (raised in the storage, answered by the handler)."""


_refusing = threading.local()  # set while a PreconditionFailed crosses the emulator's router


class _QuietRefusals(logging.Filter):
    """The emulator's router logs every exception from a handler as an error; a 412 is
    an answer, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_refusing, "on", False)


def quiet_refusals() -> None:
    """Install the filter on the emulator's router logger (once)."""
    emulator = logging.getLogger("gcp_storage_emulator.server")
    if not any(isinstance(f, _QuietRefusals) for f in emulator.filters):
        emulator.addFilter(_QuietRefusals())


def _conditions(query: dict[str, list[str]]) -> dict[str, str]:
    return {k: query[k][0] for k in _CONDITIONS if k in query}


def holds(conditions: dict[str, str], obj: dict[str, Any] | None) -> bool:
    """Whether CONDITIONS hold for OBJ (None: no live object)."""
    generation = str(obj["generation"]) if obj else "0"
    metageneration = str(obj.get("metageneration", "1")) if obj else None
    for key, want in conditions.items():
        if key == "ifGenerationMatch" and generation != want:
            return False
        if key == "ifGenerationNotMatch" and generation == want:
            return False
        if key == "ifMetagenerationMatch" and metageneration != want:
            return False
        if key == "ifMetagenerationNotMatch" and metageneration == want:
            return False
    return True


def strict_storage(base: type) -> type:
    """The emulator's storage, checking each upload's conditions (set by the handler
    for the request at hand; a resumable upload keeps those of its start)."""
    from gcp_storage_emulator.exceptions import NotFound

    class StrictStorage(base):  # type: ignore[misc]  # the emulator's classes are untyped (Any)
        conditions: dict[str, str] = {}

        def _live(self, bucket_name: str, file_name: str) -> dict[str, Any] | None:
            try:
                return dict(super().get_file_obj(bucket_name, file_name))
            except NotFound:
                return None

        def _check(self, bucket_name: str, file_name: str, conditions: dict[str, str]) -> None:
            if conditions and not holds(conditions, self._live(bucket_name, file_name)):
                _refusing.on = True
                raise PreconditionFailed

        def create_resumable_upload(self, bucket_name: str, file_name: str, file_obj: dict[str, Any]) -> Any:
            self._check(bucket_name, file_name, self.conditions)
            upload_id = super().create_resumable_upload(bucket_name, file_name, file_obj)
            self.__dict__.setdefault("_upload_conditions", {})[upload_id] = dict(self.conditions)
            return upload_id

        def create_file(self, bucket_name: str, file_name: str, content: bytes, file_obj: dict[str, Any],
                        file_id: str | None = None) -> Any:
            kept = self.__dict__.get("_upload_conditions", {})
            conditions = kept.pop(file_id, {}) if file_id else self.conditions
            self._check(bucket_name, file_name, conditions)
            # a new generation's metadata is at its first version (the emulator counts
            # the metadata of a multipart upload as a second one)
            file_obj["metageneration"] = "1"
            return super().create_file(bucket_name, file_name, content, file_obj, file_id)

    return StrictStorage


def _token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def list_page(storage: Any, bucket: str, query: dict[str, list[str]]) -> tuple[int, bytes]:
    """objects.list with GCS's pages (items and prefixes in name order, MAX_RESULTS at most)."""
    from gcp_storage_emulator.exceptions import BadRequest, NotFound

    def one(key: str) -> str | None:
        return query[key][0] if key in query else None

    try:
        size = min(int(one("maxResults") or MAX_RESULTS), MAX_RESULTS)
        after = base64.urlsafe_b64decode((one("pageToken") or "").encode()).decode()
    except ValueError:
        return 400, error_body(400, "Invalid argument.", "invalid")
    if size < 1:
        return 400, error_body(400, "Invalid argument.", "invalid")
    try:
        items, prefixes = storage.get_file_list(bucket, one("prefix"), one("delimiter"), one("matchGlob"))
    except NotFound:
        return no_bucket()
    except BadRequest as e:
        return 400, error_body(400, str(e) or "Invalid argument.", "invalid")
    entries = sorted([(obj["name"], obj) for obj in items] + [(p, None) for p in prefixes],
                     key=lambda entry: entry[0])
    entries = [entry for entry in entries if entry[0] > after] if after else entries
    chunk = entries[:size]
    page: dict[str, Any] = {"kind": "storage#objects"}
    if len(entries) > size:
        page["nextPageToken"] = _token(chunk[-1][0])
    page["prefixes"] = [name for name, obj in chunk if obj is None]
    page["items"] = [obj for _, obj in chunk if obj is not None]
    return 200, json.dumps(page).encode()


if TYPE_CHECKING:
    class _Emulator:
        """What _Strict uses of the emulator's handler (an http.server handler)."""

        storage: Any
        path: str
        headers: Any
        wfile: Any

        def send_response(self, code: int, message: str | None = None) -> None: ...
        def send_header(self, keyword: str, value: str) -> None: ...
        def end_headers(self) -> None: ...
        def do_GET(self) -> None: ...
        def do_DELETE(self) -> None: ...
        def do_PATCH(self) -> None: ...
        def do_POST(self) -> None: ...
        def do_PUT(self) -> None: ...
else:
    _Emulator = object


class _Strict(_Emulator):
    """What StrictHandler adds to the emulator's handler (a mixin: the emulator's class is
    known only once it is imported, in strict_handler)."""

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _object_first(self, method: str) -> bool:
        """For a read, delete or patch of one object: answer here when the bucket or
        object is missing or a condition does not hold. True when answered."""
        from gcp_storage_emulator.exceptions import NotFound

        url = urlsplit(self.path)
        match = _OBJECT.match(url.path)
        if not match or self.headers.get("x-http-method-override"):
            return False
        query = parse_qs(url.query)
        if "generation" in query or "softDeleted" in query:
            return False  # older generations: the emulator's own
        bucket, name = unquote(match.group(1)), unquote(match.group(2))
        if self.storage.get_bucket(bucket) is None:
            self._answer(*no_bucket())
            return True
        try:
            obj = self.storage.get_file_obj(bucket, name)
        except NotFound:
            self._answer(*no_object(bucket, name))
            return True
        conditions = _conditions(query)
        if holds(conditions, obj):
            return False
        if method == "GET" and not holds({k: v for k, v in conditions.items() if "Not" not in k}, obj):
            self._answer(*not_met())
        elif method == "GET":
            self.send_response(304, "Not Modified")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._answer(*not_met())
        return True

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        listing = _LIST.match(url.path)
        if listing:
            query = parse_qs(url.query)
            if "softDeleted" not in query:
                self._answer(*list_page(self.storage, unquote(listing.group(1)), query))
                return
        if not self._object_first("GET"):
            super().do_GET()

    def do_DELETE(self) -> None:
        if not self._object_first("DELETE"):
            super().do_DELETE()

    def do_PATCH(self) -> None:
        if not self._object_first("PATCH"):
            self._with_conditions(super().do_PATCH)

    def do_POST(self) -> None:
        self._with_conditions(super().do_POST)

    def do_PUT(self) -> None:
        self._with_conditions(super().do_PUT)

    def _with_conditions(self, handle: Any) -> None:
        self.storage.conditions = _conditions(parse_qs(urlsplit(self.path).query))
        try:
            handle()
        except PreconditionFailed:
            self._answer(*not_met())
        finally:
            self.storage.conditions = {}
            _refusing.on = False



def strict_handler(base: type) -> type:
    """The emulator's request handler with GCS's 404 bodies, preconditions and pages."""
    return type("StrictHandler", (_Strict, base), {})
