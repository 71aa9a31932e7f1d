"""The fake GCS speaks enough of GCS for tensorstore (orbax's array store): the
generation of what was read, and conditional reads and writes on it."""

from __future__ import annotations

import pytest

from podctl.base.settings import FAKE_USER_TOKEN

ts = pytest.importorskip("tensorstore")


def test_tensorstore_reads_generations_and_conditional_reads(fake, monkeypatch):
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", fake.gcs_url)
    # the fake's GCS wants a token: the user's own, which tensorstore takes from here
    monkeypatch.setenv("GOOGLE_AUTH_TOKEN_FOR_TESTING", FAKE_USER_TOKEN)
    kv = ts.KvStore.open({"driver": "gcs", "bucket": "podctl-fake", "path": "t/"}).result()
    kv.write("x", b"one").result()
    first = kv.read("x").result()
    assert first.value == b"one"
    assert first.stamp.generation != b"\x00" * len(first.stamp.generation)  # a real generation
    unchanged = kv.read("x", if_not_equal=first.stamp.generation).result()
    assert unchanged.state == "unspecified"  # 304: not sent again
    kv.write("x", b"two", if_equal=first.stamp.generation).result()
    second = kv.read("x", if_not_equal=first.stamp.generation).result()
    assert second.value == b"two" and second.stamp.generation != first.stamp.generation
    assert kv.read("missing").result().state == "missing"
