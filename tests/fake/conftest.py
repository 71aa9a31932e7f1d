"""Fixtures of the fake tier beside tests/conftest.py's."""

from __future__ import annotations

import pytest

from podctl.cloud.connect import compute_engine_at


@pytest.fixture
def provider(fake):
    """The Compute Engine provider on the in-process fake (tests/fake/compute_support.py)."""
    opened = compute_engine_at(fake.tpu_api_url)
    yield opened
    opened.close()
