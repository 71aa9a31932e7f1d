"""Lock the training template's requirements for the hosts, to ship with podctl.

    python tools/lock_template.py

Resolves templates/requirements.txt as `podctl run` would (env_lock.plan: both of the
hosts' Pythons, the hosts' platform) for the fake's CPU hosts and for TPU VMs, from the
package index, and writes each lock to podctl/data/locks under the name STATE_DIR/locks
would give it (env_lock.lock_inputs), after removing the locks there before. Run it when
templates/requirements.txt changes (tests/unit/test_shipped_locks.py fails until then), or
to take newer releases of its packages.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from podctl.jobs import env_lock  # noqa: E402

TEMPLATE_REQUIREMENTS = REPO / "templates" / env_lock.REQUIREMENTS
JAX_EXTRAS = ("cpu", "tpu")  # the fake's hosts, TPU VMs (env_lock.jax_extra_for)


def main() -> int:
    env_lock.SHIPPED_LOCKS.mkdir(parents=True, exist_ok=True)
    for old in env_lock.SHIPPED_LOCKS.glob("*.json"):
        old.unlink()
    for extra in JAX_EXTRAS:
        made = env_lock.plan(TEMPLATE_REQUIREMENTS, jax_extra=extra, relock=True, cache=env_lock.SHIPPED_LOCKS)
        print(f"jax[{extra}]: {made.notes[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
