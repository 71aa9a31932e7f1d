"""A training script whose preflight hook raises (tests/test_preflight.py)."""


def preflight(argv, devices):
    raise ValueError("boom from preflight")
