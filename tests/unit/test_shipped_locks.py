"""The template's requirements come locked with podctl (env_lock.SHIPPED_LOCKS): a first run
of the template (the demo's) resolves nothing from the package index, and each shipped lock
is the one its requirements file would give, holding versions that file allows. When
templates/requirements.txt changes, these fail until `python tools/lock_template.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

from podctl.jobs import env_lock

REPO = Path(__file__).resolve().parents[2]
TEMPLATE_REQUIREMENTS = REPO / "templates" / "requirements.txt"
EXTRAS = ("cpu", "tpu")  # the fake's hosts, TPU VMs (tools/lock_template.py)
REMAKE = "the template's requirements changed: `python tools/lock_template.py` locks them again"


def _shipped(extra: str, path: Path = TEMPLATE_REQUIREMENTS, python: str | None = None) -> Path:
    requirements, constraints, index = env_lock.read_requirements(path, extra)
    return env_lock.SHIPPED_LOCKS / f"{env_lock.lock_inputs(requirements, constraints, index, python)}.json"


@pytest.mark.parametrize("extra", EXTRAS)
def test_a_lock_ships_for_the_templates_requirements_and_allows_what_they_ask(extra):
    assert _shipped(extra).is_file(), REMAKE
    requirements, constraints, _ = env_lock.read_requirements(TEMPLATE_REQUIREMENTS, extra)
    stored = env_lock._stored(_shipped(extra), ())
    assert stored is not None
    locked = env_lock.locked_versions(stored.lock)
    assert len(locked) == len([line for line in stored.lock.splitlines() if line.strip()])  # all pinned
    for line in (*requirements, *constraints):
        wanted = Requirement(line)
        name = wanted.name.lower().replace("_", "-")
        assert name in locked, f"{name} is not in the shipped lock: {REMAKE}"
        assert wanted.specifier.contains(locked[name], prereleases=True), f"{line} vs {locked[name]}: {REMAKE}"
    # the extra's own packages: CPU jaxlib for the fake's hosts, libtpu for TPU VMs
    assert ("libtpu" in locked) == (extra == "tpu") and "jaxlib" in locked
    assert stored.python in env_lock.SUPPORTED_PYTHONS


def test_no_other_lock_ships():
    assert {p.name for p in env_lock.SHIPPED_LOCKS.glob("*")} == {_shipped(e).name for e in EXTRAS}


def test_plan_takes_the_shipped_lock_without_resolving(tmp_path):
    """No subprocess here (this tier refuses one): the plan is the shipped lock, said so."""
    plan = env_lock.plan(TEMPLATE_REQUIREMENTS, jax_extra="cpu", cache=tmp_path / "locks")
    stored = env_lock._stored(_shipped("cpu"), ())
    assert stored is not None and (plan.key, plan.lock, plan.python) == (stored.key, stored.lock, stored.python)
    assert "when this podctl was released" in plan.notes[-1] and "--relock" in plan.notes[-1]


def test_a_changed_requirement_set_is_locked_anew(tmp_path):
    changed = tmp_path / "requirements.txt"
    changed.write_text(TEMPLATE_REQUIREMENTS.read_text() + "einops>=0.8\n")
    assert not _shipped("cpu", changed).exists()
    assert not _shipped("cpu", python="3.12").exists()  # nor --python X.Y: not what they were made for
