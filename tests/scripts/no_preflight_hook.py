"""A training script without podctl preflight's hook (tests/test_preflight.py)."""

import sys

if __name__ == "__main__":
    print("training", file=sys.stderr)
