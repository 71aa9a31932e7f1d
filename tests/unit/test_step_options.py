"""The hooks the queue's tick takes through the steps door, checked without a cloud:
a once-only start goes with a fixed run id, a Session moved to an entry's project,
zone and bucket shares its clients, and an entry's slice is the spec it always was."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from podctl import steps
from podctl.cloud.types import SliceSpec
from podctl.base.errors import InvalidValueError
from podctl.queue.execution import run_options
from podctl.queue.provision import options_of
from podctl.queue.store import Entry
from podctl.base.settings import Settings

RUN_ID = "q-abc123-3-2-20261202-173000-ab12"
FIRST = "q-abc123-3-1-20261202-173000-cd34"


def _settings(tmp_path: Path) -> Settings:
    return Settings(backend="fake", project="test-project", zone="us-central1-a",
                    config_dir=tmp_path / "config", state_dir=tmp_path / "state", bucket="b")


def _entry(**changes) -> Entry:
    fields = dict(id=3, name="x", accelerator_type="v5p-16", project="other-project",
                  zone="us-east5-a", bucket="their-bucket", script="train.py", bundle_hash="h" * 64,
                  slice_name="q-abc123-3-1")
    return Entry(**{**fields, **changes})


@pytest.mark.parametrize("once, run_id", [(True, None), (False, RUN_ID)])
def test_a_once_only_start_and_a_fixed_run_id_go_together(once, run_id):
    with pytest.raises(InvalidValueError, match="once-only"):
        steps.RunOptions(steps.RunSpec(Path("train.py")), bundle_hash="h" * 64, once=once, run_id=run_id)


def test_a_retried_entry_starts_once_detached_from_its_bundle_and_resumes_its_first_attempt():
    entry = _entry(run_id=RUN_ID, attempt=2, attempts=[{"attempt": 1, "run_id": FIRST},
                                                       {"attempt": 2, "run_id": RUN_ID}])
    options = run_options(entry)
    assert (options.once, options.detach, options.run_id) == (True, True, RUN_ID)
    assert (options.bundle_hash, options.spec.script, options.resume) == ("h" * 64, Path("train.py"), FIRST)
    assert options.extra == {"parent": FIRST, "attempt": 2}
    first = run_options(_entry(run_id=FIRST, attempt=1, attempts=[{"attempt": 1, "run_id": FIRST}]))
    assert first.resume is None and first.extra == {}


def test_a_session_at_an_entrys_place_shares_the_clients(tmp_path):
    session = steps.Session(_settings(tmp_path), api=None, ports=(2222, 8476))
    entry = _entry()
    moved = session.at(project=entry.project, zone=entry.zone, bucket=entry.bucket)
    assert moved.settings.parent == "projects/other-project/locations/us-east5-a"
    assert moved.settings.bucket == "their-bucket" and moved.settings.config_dir == tmp_path / "config"
    assert moved.storages is session.storages and moved.job_ports() == (2222, 8476)


@pytest.mark.parametrize("tier, valid_for", [("on-demand", None), ("spot", None), ("spot", 7200),
                                             ("queued", 600)])
def test_an_entrys_slice_request_is_the_spec_it_asked_for(tmp_path, tier, valid_for):
    entry = _entry(tier=tier, valid_for=valid_for)
    settings = dataclasses.replace(_settings(tmp_path), project=entry.project, zone=entry.zone)
    request = steps.up_request(settings, options_of(entry, "abc123"))
    # on-demand: a plain node; spot and queued: a queued resource, with its validity
    expected = (SliceSpec.build("v5p-16") if tier == "on-demand" else SliceSpec.build(
        "v5p-16", queued=True, tier="spot" if tier == "spot" else "on-demand",
        valid_for_seconds=valid_for))
    assert request.spec == expected
    assert (request.name, request.wait) == ("q-abc123-3-1", False)
    assert request.parent == "projects/other-project/locations/us-east5-a"
    assert request.labels["podctl-queue"] == "abc123" and request.labels["podctl-queue-entry"] == "3"


def test_one_run_spec_crosses_every_layer_and_never_shows_its_env(tmp_path):
    """The CLI's, the API's and the queue's run is one RunSpec, carried (not copied field
    by field) into the steps' options and the queue's request; its repr names no secret."""
    from podctl.queue.add import AddRequest, validate

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    spec = steps.RunSpec(script=script, args=("--steps", "3"), env={"HF_TOKEN": "s3cret"})
    assert steps.RunOptions(spec).spec is spec
    request = AddRequest(slice_type="v5p-8", spec=spec)
    validate(request)
    assert request.spec is spec
    assert "s3cret" not in repr(spec) + repr(steps.RunOptions(spec)) + repr(request)
    assert spec.env_keys == ["HF_TOKEN"]
    assert spec.bundle_root() == (tmp_path.resolve(), "train.py")


def test_a_queued_run_refuses_what_the_queue_cannot_keep(tmp_path):
    """A queued entry's hosts get its bundle's requirements.txt: a spec asking for another
    file, Python or setup step is refused in one line, not silently dropped."""
    from podctl.queue.add import AddRequest, validate

    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(InvalidValueError, match="does not take --python, --relock"):
        validate(AddRequest(slice_type="v5p-8", spec=steps.RunSpec(script, python="3.12", relock=True)))
    with pytest.raises(InvalidValueError, match="no script"):
        validate(AddRequest(slice_type="v5p-8", spec=steps.RunSpec(tmp_path / "gone.py")))
