"""What the fake tier's Compute Engine tests share: their zone (one that serves TPU7x) and a
wait policy at test speed (their `provider` fixture is in this folder's conftest.py)."""

from __future__ import annotations

from podctl.cloud.wait import WaitPolicy
from tests.conftest import PROJECT

ZONE = "us-central1-c"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
FAST = WaitPolicy(initial=0.05, maximum=0.2, jitter=0.0, timeout=60)

