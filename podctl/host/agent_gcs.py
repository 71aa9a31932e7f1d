"""GCS for podctl's host agent, with the standard library only (Python 3.10+).

A fresh TPU VM has no google-cloud-storage, so the agent speaks GCS's JSON API with
urllib: media upload, media download (to a file, streamed), object metadata, and
list by prefix. The access token comes from the host's metadata server
(`GCE_METADATA_HOST`, else metadata.google.internal), as every TPU VM has one; the
endpoint is Google's, or `STORAGE_EMULATOR_HOST` where the fake cloud sets it.
Shipped to hosts next to agent.py; imports nothing from podctl.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

GOOGLE = "https://storage.googleapis.com"
_CHUNK = 1 << 20


class GcsError(Exception):
    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """401/403: the host's account or scopes may not do this; retrying will not help."""
        return self.status in (401, 403)


def metadata_host() -> str:
    return os.environ.get("GCE_METADATA_HOST") or "metadata.google.internal"


def metadata_get(path: str, timeout: float = 10.0) -> str:
    """GET http://METADATA/computeMetadata/v1/PATH with Metadata-Flavor: Google."""
    request = urllib.request.Request(f"http://{metadata_host()}/computeMetadata/v1/{path}",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text: str = response.read().decode()
        return text


def metadata_put(path: str, value: str, timeout: float = 10.0) -> None:
    request = urllib.request.Request(f"http://{metadata_host()}/computeMetadata/v1/{path}",
                                     data=value.encode(), method="PUT",
                                     headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


class Bucket:
    """One bucket through the JSON API; a token from the metadata server, renewed early."""

    def __init__(self, name: str, endpoint: str | None = None):
        self.name = name
        self.endpoint = (endpoint or os.environ.get("STORAGE_EMULATOR_HOST") or GOOGLE).rstrip("/")
        self._token, self._expires = "", 0.0

    def _auth(self) -> dict[str, str]:
        if time.time() > self._expires - 60:
            data = json.loads(metadata_get("instance/service-accounts/default/token"))
            self._token, self._expires = data["access_token"], time.time() + float(data["expires_in"])
        return {"Authorization": f"Bearer {self._token}"}

    def _object_url(self, name: str, download: bool = False) -> str:
        base = f"{self.endpoint}/download" if download else self.endpoint
        return (f"{base}/storage/v1/b/{urllib.parse.quote(self.name, safe='')}/o/"
                f"{urllib.parse.quote(name, safe='')}")

    def _open(self, url: str, data: bytes | None = None, method: str = "GET",
              headers: dict[str, str] | None = None, timeout: float = 300.0) -> http.client.HTTPResponse:
        for fresh in (False, True):
            if fresh:  # a 401: the token was revoked or outlived its issuer; ask once more
                self._expires = 0.0
            request = urllib.request.Request(url, data=data, method=method,
                                             headers={**self._auth(), **(headers or {})})
            try:
                response: http.client.HTTPResponse = urllib.request.urlopen(request, timeout=timeout)  # http(s) only
                return response
            except urllib.error.HTTPError as e:
                body = e.read()[:300].decode(errors="replace")
                if e.code == 401 and not fresh:
                    continue
                raise GcsError(f"GCS {method} {url.split('?')[0]}: HTTP {e.code} {body}", e.code) from e
            except (urllib.error.URLError, OSError) as e:
                raise GcsError(f"GCS {method} {url.split('?')[0]}: {e}") from e
        raise AssertionError("unreachable")

    def upload(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """A multipart upload (metadata part, then the bytes), as google-cloud-storage does."""
        boundary = "podctl-" + os.urandom(12).hex()
        meta = json.dumps({"name": name, "contentType": content_type}).encode()
        body = b"".join([
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(), meta,
            f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(), data,
            f"\r\n--{boundary}--\r\n".encode()])
        url = (f"{self.endpoint}/upload/storage/v1/b/{urllib.parse.quote(self.name, safe='')}/o"
               "?uploadType=multipart")
        with self._open(url, body, "POST",
                        {"Content-Type": f'multipart/related; boundary="{boundary}"'}) as response:
            response.read()

    def upload_file(self, name: str, path: str, content_type: str = "application/gzip") -> None:
        with open(path, "rb") as f:
            self.upload(name, f.read(), content_type)

    def download(self, name: str) -> bytes:
        with self._open(self._object_url(name, download=True) + "?alt=media") as response:
            return response.read()

    def download_file(self, name: str, path: str) -> int:
        with self._open(self._object_url(name, download=True) + "?alt=media") as response, \
                open(path, "wb") as f:
            shutil.copyfileobj(response, f, _CHUNK)
            return f.tell()

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes START..END (inclusive) of the object, by a ranged media read (206)."""
        if end < start:
            return b""
        url = self._object_url(name, download=True) + "?alt=media"
        with self._open(url, headers={"Range": f"bytes={start}-{end}"}) as response:
            data = response.read()
            if response.status != 206 and not (start == 0 and response.status == 200):
                raise GcsError(f"GCS GET {url.split('?')[0]}: a range read answered {response.status}",
                               response.status)
        if response.status == 200:  # the whole object, from its first byte
            data = data[:end + 1]
        return data

    def delete(self, name: str) -> None:
        with self._open(self._object_url(name), method="DELETE") as response:
            response.read()

    def stat(self, name: str) -> dict[str, Any] | None:
        """The object's metadata, or None if there is none."""
        try:
            with self._open(self._object_url(name)) as response:
                meta: dict[str, Any] = json.loads(response.read())
                return meta
        except GcsError as e:
            if e.status == 404:
                return None
            raise

    def list(self, prefix: str) -> list[str]:
        names, token = [], ""
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            url = (f"{self.endpoint}/storage/v1/b/{urllib.parse.quote(self.name, safe='')}/o?"
                   + urllib.parse.urlencode(query))
            with self._open(url) as response:
                page = json.loads(response.read())
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return names
