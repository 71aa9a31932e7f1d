"""Storage: the narrow async face of google-cloud-storage over one bucket.

Runs keep everything in GCS (bundles, agents, run records, log chunks, exit
status, checkpoints), so every layer above talks to one small class rather than
to the library. As in podctl/cloud/tpu_client.py: each call runs the blocking client in
a worker thread, is counted (tests show that uploads happen once and waiting
does not hammer GCS), is retried with capped exponential backoff and jitter only
when its error can pass (429, 5xx, a refused or reset connection), and has its
errors translated to podctl's where they enter. The client's own retries are
off (`retry=None`) so that this is the only retry policy.

The fake cloud's GCS emulator is reached by `client_options={"api_endpoint": URL}`
with the user's token on the fake (settings.FAKE_USER_TOKEN: its project's owner);
nothing sets STORAGE_EMULATOR_HOST, so one process can talk to real GCS and to a fake
at once. google-cloud-storage is imported in `connect` and in `_translate`, never at
import time (`podctl --help` stays fast).

A missing object is `StorageNotFound` (a StorageError), raised by the download
methods; the callers that expect absence catch it (or call `exists` first).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from podctl.base.errors import ConfigError, PodctlError
from podctl.base.errors import (
    StorageError as StorageError,  # base/errors.py owns them; re-exported for storage's callers
)
from podctl.base.errors import StorageNotFound as StorageNotFound
from podctl.base.errors import StorageUnavailable as StorageUnavailable
from podctl.base.retry import RetryPolicy
from podctl.base.settings import FAKE_BUCKET, FAKE_USER_TOKEN, endpoint_override

T = TypeVar("T")
# (a service account, a bucket) -> the command that grants it a role on the bucket, but for
# the role's name: gcloud's on Google, the fake cloud's (which gcloud cannot reach) there;
# cloud/connect.py `bucket_grant` chooses with the backend
Grant = Callable[[str, str], str]


def gcloud_grant(email: str, bucket: str) -> str:
    return (f"gcloud storage buckets add-iam-policy-binding gs://{bucket} "
            f"--member=serviceAccount:{email} --role=")


def fake_grant(email: str, bucket: str) -> str:
    return f"podctl fake grant serviceAccount:{email}{'' if bucket == FAKE_BUCKET else f' --bucket {bucket}'} "

CALL_TIMEOUT = 60.0  # seconds for one HTTP request (a chunk, not a whole upload)
CHUNK_SIZE = 16 * 1024 * 1024  # files above this go up resumably, in chunks of this size
PAGE_SIZE = 1000  # GCS's own maximum objects per list page
_PASSING = (408, 429, 500, 502, 503, 504)  # HTTP statuses GCS asks clients to retry
_NO_CREDENTIALS = ("no Google Cloud credentials for GCS: run `gcloud auth application-default "
                   "login` or set GOOGLE_APPLICATION_CREDENTIALS")


@dataclass(frozen=True)
class ObjectInfo:
    name: str
    size: int
    updated: float  # seconds since the epoch
    crc32c: str | None = None  # as GCS computed it on upload (base64), where it says


class Storage:
    """One bucket; object names are paths inside it (no gs:// prefix)."""

    def __init__(self, client: Any, bucket: str, *, endpoint: str | None = None,
                 retry: RetryPolicy = RetryPolicy(), chunk_size: int = CHUNK_SIZE,
                 timeout: float = CALL_TIMEOUT, sleep: Callable[[float], Any] = asyncio.sleep):
        if chunk_size % (256 * 1024):
            raise ValueError("chunk_size must be a multiple of 256 KiB (a GCS rule)")
        if getattr(client, "_bucket_metadata_cache", None) is not None:
            # google-cloud-storage >= 3.x fetches bucket metadata in background threads,
            # only to label OpenTelemetry spans podctl does not emit: requests that are
            # neither counted nor retried, and need storage.buckets.get. Off.
            client._bucket_metadata_cache = None
        self.client = client
        self.bucket_name = bucket
        self.endpoint = endpoint  # None: Google's GCS
        self.retry = retry
        self.chunk_size = chunk_size
        self.timeout = timeout
        self._sleep = sleep
        self._bucket = client.bucket(bucket)
        self._bucket_seen = False  # once a call proved it exists, a 404 means the object
        self.calls: Counter[str] = Counter()  # by method, each attempt once

    @classmethod
    def connect(cls, bucket: str, endpoint: str | None = None, *, project: str | None = None,
                retry: RetryPolicy = RetryPolicy(), chunk_size: int = CHUNK_SIZE,
                timeout: float = CALL_TIMEOUT) -> Storage:
        """Real GCS with Application Default Credentials, or the emulator at ENDPOINT."""
        from google.auth import exceptions as auth_exc
        from google.cloud import storage  # type: ignore[attr-defined]

        if endpoint is None:
            # Google's GCS, or where gcloud's override moves it (ADC credentials either way).
            # Read here rather than passed in, so every caller that means Google gets it.

            override = endpoint_override("storage")
            options = {"api_endpoint": override} if override else None
            try:
                client = storage.Client(project=project, client_options=options)
            except auth_exc.DefaultCredentialsError as e:
                raise ConfigError(_NO_CREDENTIALS + " (or use --backend fake).") from e
        else:
            from google.oauth2.credentials import Credentials

            # The fake's GCS wants a token, as GCS does: the user's own on the fake (base/settings.py)
            client = storage.Client(project=project, credentials=Credentials(token=FAKE_USER_TOKEN),
                                    client_options={"api_endpoint": endpoint.rstrip("/")})
        return cls(client, bucket, endpoint=endpoint, retry=retry, chunk_size=chunk_size,
                   timeout=timeout)

    def gs_url(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{name}"

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    # ---- the one way a call is made --------------------------------------------------

    async def _call(self, method: str, what: str, fn: Callable[..., T], /, *args: Any,
                    **kwargs: Any) -> T:
        async def once() -> T:
            self.calls[method] += 1
            try:
                return await asyncio.to_thread(fn, *args, **kwargs)
            except Exception as e:  # translated here; nothing of the library escapes
                raise self._translate(e, what) from e

        return await self.retry.retrying(StorageUnavailable, self._sleep)(once)

    def _translate(self, e: BaseException, what: str) -> PodctlError:
        import requests
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc

        if isinstance(e, PodctlError):
            return e
        if isinstance(e, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError,
                          auth_exc.TransportError)):
            if self.endpoint:
                return StorageUnavailable(
                    f"cannot reach the fake cloud's GCS at {self.endpoint} while {what} "
                    f"({e.__class__.__name__}): is it running? `podctl fake status` says.")
            return StorageUnavailable(f"cannot reach GCS while {what} ({e.__class__.__name__}): "
                                      "check the network and try again.")
        if isinstance(e, auth_exc.DefaultCredentialsError):
            return ConfigError(_NO_CREDENTIALS + ".")
        if isinstance(e, auth_exc.GoogleAuthError):
            return ConfigError(f"Google Cloud credentials were refused while {what}: {e}. "
                               "Run `gcloud auth application-default login` again.")
        if e.__class__.__name__ == "DataCorruption":  # google.cloud.storage.exceptions
            return StorageUnavailable(f"GCS sent bytes that fail their checksum while {what}; "
                                      "try again.")
        if isinstance(e, OSError):
            return StorageError(f"a local file failed while {what}: {e}")
        if not isinstance(e, gexc.GoogleAPICallError):
            return StorageError(f"unexpected error while {what}: {e}")
        text = (e.message or str(e)).split(": ", 1)[-1].strip()
        if isinstance(e, gexc.NotFound):
            return StorageNotFound(f"not found while {what}.")
        if isinstance(e, (gexc.Forbidden, gexc.PermissionDenied)):
            return StorageError(
                f"permission denied on gs://{self.bucket_name} while {what}: the account needs "
                "Storage Object Admin (roles/storage.objectAdmin) on the bucket; ask its owner "
                "for it, or pass --bucket with a bucket of yours.")
        if isinstance(e, gexc.Unauthorized):
            return ConfigError(f"not signed in to Google Cloud ({text}): run "
                               "`gcloud auth application-default login`.")
        if e.code in _PASSING:
            return StorageUnavailable(f"GCS failed for a moment while {what} "
                                      f"({e.code}): {text}; try again.")
        return StorageError(f"GCS refused {what} ({e.code}): {text}")

    def _missing_bucket(self) -> StorageError:
        hint = (f" (the fake cloud makes gs://{FAKE_BUCKET})" if self.endpoint else "")
        return StorageError(f"the bucket gs://{self.bucket_name} does not exist: create it with "
                            f"`gcloud storage buckets create gs://{self.bucket_name}` or pass "
                            f"--bucket{hint}.")

    async def _bucket_missing(self) -> bool:
        """After a download's 404: is the whole bucket missing, not just the object?

        The 404 has no body that says which, so look once: list one object (needs only
        storage.objects.list, which reading runs needs anyway); once seen, known."""
        if self._bucket_seen:
            return False
        try:
            await self._call("bucket.check", f"checking {self.gs_url('')}",
                             self._list_page, "", 1, None)
        except StorageNotFound:
            return True
        except StorageError:
            return False  # can't tell; report the object
        self._bucket_seen = True
        return False

    async def require_bucket(self) -> None:
        """The missing-bucket error when the bucket does not exist (one list call, as
        the user); nothing when it does or when that cannot be told."""
        if await self._bucket_missing():
            raise self._missing_bucket()

    # ---- objects --------------------------------------------------------------------

    async def exists(self, name: str) -> bool:
        # A missing bucket reads as False here; the upload that follows says why.
        found: bool = await self._call("exists", f"looking up {self.gs_url(name)}",
                                 self._bucket.blob(name).exists, retry=None, timeout=self.timeout)
        self._bucket_seen |= found
        return found

    async def upload_file(self, local_path: Path | str, name: str, *, if_missing: bool = False,
                          content_type: str | None = None) -> bool:
        """Upload a local file; False when IF_MISSING and the object was already there.

        Content-addressed objects (bundles) use IF_MISSING: one cheap existence check
        saves re-sending the file, and `if_generation_match=0` closes the race with a
        second uploader (a 412 then also means "already there")."""
        local_path = Path(local_path)
        if if_missing and await self.exists(name):
            return False

        def put() -> bool:
            from google.api_core import exceptions as gexc

            blob = self._bucket.blob(name)
            resumable = local_path.stat().st_size > self.chunk_size
            if resumable:
                # The library goes resumable only above 8 MiB, in 100 MiB chunks held in
                # memory; size=None streams the file in chunks of our size instead.
                blob.chunk_size = self.chunk_size
            try:
                with open(local_path, "rb") as f:
                    blob.upload_from_file(f, size=None if resumable else local_path.stat().st_size,
                                          content_type=content_type, retry=None,
                                          timeout=self.timeout,
                                          if_generation_match=0 if if_missing else None)
            except gexc.PreconditionFailed:
                return False
            return True

        try:
            uploaded = await self._call("upload", f"uploading {self.gs_url(name)}", put)
        except StorageNotFound as e:
            raise self._missing_bucket() from e  # an upload's 404 can only be the bucket
        self._bucket_seen = True
        return uploaded

    async def upload_bytes(self, name: str, data: bytes,
                           content_type: str = "application/octet-stream") -> None:
        """Write (or overwrite) a small object in one request."""
        try:
            await self._call("upload", f"uploading {self.gs_url(name)}",
                             self._bucket.blob(name).upload_from_string, data,
                             content_type=content_type, retry=None, timeout=self.timeout)
        except StorageNotFound as e:
            raise self._missing_bucket() from e
        self._bucket_seen = True

    async def upload_bytes_if_missing(self, name: str, data: bytes,
                                      content_type: str = "application/octet-stream") -> bool:
        """Like upload_bytes, for content-addressed objects; False when it was there."""
        if await self.exists(name):
            return False
        await self.upload_bytes(name, data, content_type=content_type)
        return True

    async def download_bytes(self, name: str) -> bytes:
        """The object's bytes; StorageNotFound when it is missing."""
        try:
            data: bytes = await self._call("download", f"downloading {self.gs_url(name)}",
                                    self._bucket.blob(name).download_as_bytes, retry=None,
                                    timeout=self.timeout)
        except StorageNotFound as e:
            if await self._bucket_missing():
                raise self._missing_bucket() from e
            raise
        self._bucket_seen = True
        return data

    async def download_file(self, name: str, local_path: Path | str) -> None:
        """Download to LOCAL_PATH via a hidden temporary file, so a failed or interrupted
        download never leaves a partial file under the final name."""
        local_path = Path(local_path)
        part = local_path.with_name(f".{local_path.name}.part")

        def get() -> None:
            try:
                self._bucket.blob(name).download_to_filename(str(part), retry=None,
                                                             timeout=self.timeout)
                os.replace(part, local_path)
            finally:
                part.unlink(missing_ok=True)

        try:
            await self._call("download", f"downloading {self.gs_url(name)}", get)
        except StorageNotFound as e:
            if await self._bucket_missing():
                raise self._missing_bucket() from e
            raise
        self._bucket_seen = True

    async def read_json(self, name: str) -> Any:
        data = await self.download_bytes(name)
        try:
            return json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StorageError(f"{self.gs_url(name)} is not valid JSON ({e}); was it written "
                               "by podctl?") from e

    def _list_page(self, prefix: str, page_size: int,
                   token: str | None) -> tuple[list[ObjectInfo], str | None]:
        iterator = self.client.list_blobs(self.bucket_name, prefix=prefix or None,
                                          page_size=page_size, page_token=token, retry=None,
                                          timeout=self.timeout)
        page = next(iterator.pages)  # this call's one request; the next page is its own call
        items = [ObjectInfo(name=b.name, size=int(b.size or 0),
                            updated=b.updated.timestamp() if b.updated else 0.0,
                            crc32c=b.crc32c) for b in page]
        return items, iterator.next_page_token

    async def list(self, prefix: str, *, page_size: int = PAGE_SIZE) -> list[ObjectInfo]:
        """Every object whose name starts with PREFIX, by name, page by page (each page
        its own counted, retried request)."""
        items: list[ObjectInfo] = []
        token: str | None = None
        while True:
            try:
                page, token = await self._call("list", f"listing {self.gs_url(prefix)}",
                                               self._list_page, prefix, page_size, token)
            except StorageNotFound as e:
                raise self._missing_bucket() from e  # a list's 404 is the bucket
            self._bucket_seen = True
            items.extend(page)
            if not token:
                return items
