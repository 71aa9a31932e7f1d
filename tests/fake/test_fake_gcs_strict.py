"""The fake GCS as strict as GCS (podctl/fake/storage/gcs_strict.py): 404 bodies as recorded,
preconditions, and pages of objects.list, through google-cloud-storage (what podctl
uses) and raw HTTP (for the bodies' shapes)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.cloud import storage

from podctl.fake.storage.gcs import DEFAULT_BUCKET
from podctl.base.settings import FAKE_USER_TOKEN
from podctl.cloud.storage import Storage
from tests.conftest import user_credentials

# As k8s-config-connector recorded real GCS (mockgcp/mockstorage/testdata/folder/crud and
# pkg/test/resourcefixture/.../storagebucketbasic/_http.log), names normalised.
RECORDED_NO_OBJECT = {"error": {"code": 404, "errors": [
    {"domain": "global", "message": "No such object: {bucket}/{name}", "reason": "notFound"}],
    "message": "No such object: {bucket}/{name}", "status": "NOT_FOUND"}}
RECORDED_NO_BUCKET = {"error": {"code": 404, "errors": [
    {"domain": "global", "message": "The specified bucket does not exist.", "reason": "notFound"}],
    "message": "The specified bucket does not exist."}}


@pytest.fixture
def gcs(fake):
    client = storage.Client(project="p", credentials=user_credentials(),
                            client_options={"api_endpoint": fake.gcs_url})
    return client, client.bucket(DEFAULT_BUCKET)


def raw(url: str, method: str = "GET", token: str | None = FAKE_USER_TOKEN,
        data: bytes | None = None) -> tuple[int, dict | None]:
    """One request as GCS's clients send it, with TOKEN (the user's own by default)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers),
                                    timeout=30) as r:
            body = r.read()
            return r.status, json.loads(body) if body else None
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, json.loads(body) if body else None


def filled(shape: dict, **names: str) -> dict:
    return json.loads(json.dumps(shape).replace("{bucket}", names.get("bucket", ""))
                      .replace("{name}", names.get("name", "")))


def test_a_missing_object_or_bucket_is_404_with_the_recorded_body(fake, gcs):
    base = f"{fake.gcs_url}/storage/v1/b"
    for method in ("GET", "DELETE"):
        assert raw(f"{base}/{DEFAULT_BUCKET}/o/no%2Fsuch", method) == (
            404, filled(RECORDED_NO_OBJECT, bucket=DEFAULT_BUCKET, name="no/such"))
    assert raw(f"{fake.gcs_url}/download/storage/v1/b/{DEFAULT_BUCKET}/o/nope?alt=media") == (
        404, filled(RECORDED_NO_OBJECT, bucket=DEFAULT_BUCKET, name="nope"))
    assert raw(f"{base}/no-such-bucket/o/x") == (404, RECORDED_NO_BUCKET)
    assert raw(f"{base}/no-such-bucket/o") == (404, RECORDED_NO_BUCKET)
    _, bucket = gcs
    with pytest.raises(gexc.NotFound, match="No such object"):
        bucket.blob("nope").download_as_bytes()


def test_uploads_reads_and_deletes_obey_generation_preconditions(gcs):
    _, bucket = gcs
    blob = bucket.blob("pre/x")
    blob.upload_from_string(b"one", if_generation_match=0)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("pre/x").upload_from_string(b"two", if_generation_match=0)
    first = bucket.get_blob("pre/x")
    assert first.download_as_bytes() == b"one"
    bucket.blob("pre/x").upload_from_string(b"two", if_generation_match=first.generation)
    with pytest.raises(gexc.PreconditionFailed):  # the generation moved on
        bucket.blob("pre/x").upload_from_string(b"three", if_generation_match=first.generation)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.get_blob("pre/x", if_generation_match=first.generation)
    with pytest.raises(gexc.PreconditionFailed):
        bucket.blob("pre/x").delete(if_generation_match=first.generation)
    assert bucket.blob("pre/x").download_as_bytes() == b"two"
    second = bucket.get_blob("pre/x", if_metageneration_match=1)
    bucket.blob("pre/x").delete(if_generation_match=second.generation)
    assert not bucket.blob("pre/x").exists()


def test_a_resumable_upload_keeps_the_condition_it_started_with(gcs, tmp_path: Path):
    _, bucket = gcs
    big = tmp_path / "big"
    big.write_bytes(b"x" * (600 * 1024))
    bucket.blob("res/y").upload_from_string(b"there already")
    blob = bucket.blob("res/y", chunk_size=256 * 1024)
    with pytest.raises(gexc.PreconditionFailed), big.open("rb") as f:
        blob.upload_from_file(f, if_generation_match=0)
    assert bucket.blob("res/y").download_as_bytes() == b"there already"


def test_objects_list_comes_in_pages_of_max_results(fake, gcs):
    client, bucket = gcs
    for i in range(5):
        bucket.blob(f"page/{i}").upload_from_string(b"x")
    bucket.blob("page/sub/z").upload_from_string(b"x")
    pages = client.list_blobs(DEFAULT_BUCKET, prefix="page/", max_results=None, page_size=2).pages
    assert [[b.name for b in page] for page in pages] == [
        ["page/0", "page/1"], ["page/2", "page/3"], ["page/4", "page/sub/z"]]
    # items and prefixes together count towards maxResults, in name order
    url = f"{fake.gcs_url}/storage/v1/b/{DEFAULT_BUCKET}/o?prefix=page/&delimiter=/&maxResults=5"
    status, first = raw(url)
    assert status == 200 and [i["name"] for i in first["items"]] == [f"page/{i}" for i in range(5)]
    assert first["prefixes"] == [] and first["nextPageToken"]
    status, second = raw(f"{url}&pageToken={first['nextPageToken']}")
    assert second["prefixes"] == ["page/sub/"] and second["items"] == [] and "nextPageToken" not in second
    # ... and podctl's own lister, page by page, sees them all
    found = asyncio.run(Storage(client, DEFAULT_BUCKET).list("page/", page_size=2))
    assert [o.name for o in found] == [f"page/{i}" for i in range(5)] + ["page/sub/z"]


def test_podctls_upload_if_missing_takes_the_412_as_already_there(gcs, tmp_path: Path):
    client, bucket = gcs
    bucket.blob("once").upload_from_string(b"first")
    local = tmp_path / "f"
    local.write_bytes(b"second")
    store = Storage(client, DEFAULT_BUCKET)

    async def race() -> bool:  # as a second uploader that checked before the first wrote
        async def absent(name: str) -> bool:
            return False
        store.exists = absent  # type: ignore[method-assign]
        return await store.upload_file(local, "once", if_missing=True)

    assert asyncio.run(race()) is False
    assert bucket.blob("once").download_as_bytes() == b"first"
