"""The Cloud TPU client is made at the first request, not when a provider is opened: a
session that only reads GCS never builds it (nor imports google.cloud.tpu_v2)."""

from __future__ import annotations

from typing import Any

import pytest

from podctl.cloud.lazy_tpu import LazyModule
from podctl.cloud.tpu_client import TpuApi


class _Transport:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class _Client:
    def __init__(self) -> None:
        self.transport = _Transport()


def test_the_client_is_made_at_first_use_and_once() -> None:
    made: list[_Client] = []

    def maker() -> Any:
        made.append(_Client())
        return made[-1]

    api = TpuApi(maker, endpoint="http://127.0.0.1:9")
    assert made == []
    api.close()  # never made: nothing to close, nothing made to close it
    assert made == []
    assert api.client is made[0] and api.client is made[0]
    assert len(made) == 1
    api.close()
    assert made[0].transport.closed == 1


def test_a_client_given_is_used_as_it_is() -> None:
    client = _Client()
    api = TpuApi(client, endpoint="http://127.0.0.1:9")  # type: ignore[arg-type]
    assert api.client is client
    api.close()
    assert client.transport.closed == 1


def test_a_lazy_module_imports_at_the_first_attribute_and_fails_as_the_import_does() -> None:
    json_module = LazyModule("json")
    assert json_module.dumps([1]) == "[1]"
    missing = LazyModule("podctl_no_such_module")
    with pytest.raises(ModuleNotFoundError):
        _ = missing.anything
