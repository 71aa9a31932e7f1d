"""A checkpoint whose objects changed after its save: `ckpt ls` calls it damaged, `ckpt
pull` and the template's restore (`run --resume`; `--recover` relaunches the same way)
pass it by for the newest whole step and say which they skipped and why."""

from __future__ import annotations

import importlib.util
import json

import pytest

from podctl.jobs import checkpoints
from podctl.cloud.storage import ObjectInfo
from tests.conftest import Podctl, slice_on_daemon, user_credentials
from tests.e2e.test_template import SCRIPT, TINY, metrics, of

ARGS = [*TINY, "--checkpoint-every", "4"]


def _template_manifest():
    spec = importlib.util.spec_from_file_location("ckpt_manifest", SCRIPT.parent / "ckpt_manifest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("now, said", [
    ({"a": (10, "x"), "big": (1000, "y")}, None),
    ({"a": (10, "x"), "big": (999, "y")}, "big is 999 bytes, the save wrote 1,000"),
    ({"a": (10, "x")}, "big is missing (the save wrote 2 objects)"),
    ({"a": (10, "z"), "big": (1000, "y")}, "a changed since the save (its crc32c differs)"),
    ({"a": (10, None), "big": (1000, "y"), "extra": (5, "q")}, None),  # no crc32c: sizes only
])
def test_podctl_and_the_template_read_a_manifest_alike(now, said):
    """The template (on the hosts, no podctl there) and `ckpt ls` each check a step against
    its manifest: the same answer, in the same words, from the same objects."""
    template = _template_manifest()
    assert template.MANIFEST == checkpoints.MANIFEST_FILE
    recorded = {"format": 1, "step": 12, "objects": {"a": {"size": 10, "crc32c": "x"},
                                                     "big": {"size": 1000, "crc32c": "y"}}}
    listed = {name: ObjectInfo(name, size, 0.0, crc) for name, (size, crc) in now.items()}
    assert checkpoints.damage(recorded, listed) == said
    assert template.differs(recorded, {n: {"size": s, "crc32c": c} for n, (s, c) in now.items()}) == said


def _truncate_largest(cli: Podctl, prefix: str) -> str:
    """Step's largest object in the fake GCS, written again with its first 1,000 bytes (as
    a copy cut short would leave it): a new generation, its size and crc32c GCS's own."""
    from google.cloud import storage

    status = json.loads(cli("fake", "status", "--json").stdout)
    client = storage.Client(project="fake", credentials=user_credentials(),
                            client_options={"api_endpoint": status["gcs"]})
    blobs = [b for b in client.list_blobs(status["bucket"], prefix=prefix)
             if not b.name.endswith((checkpoints.MANIFEST_FILE, checkpoints.COMMIT_FILE))]
    largest = max(blobs, key=lambda b: b.size)
    data = largest.download_as_bytes()
    client.bucket(status["bucket"]).blob(largest.name).upload_from_string(data[:1000])
    return largest.name[len(prefix):]


@pytest.mark.host_env
def test_a_truncated_latest_checkpoint_is_marked_passed_by_and_saved_again(tmp_path):
    with slice_on_daemon(Podctl(tmp_path), "v5p-8", "ck8") as podctl:
        # bare hosts: the first run of a test session builds the template's env (minutes)
        first = podctl("run", "ck8", str(SCRIPT), *ARGS, "--steps", "12", timeout=1500)
        run_id = next(l.split()[2] for l in first.stderr.splitlines() if l.startswith("podctl: run "))
        listed = podctl.json("ckpt", "ls", run_id)["checkpoints"]
        assert [(c["step"], c["complete"], c["verified"]) for c in listed] == [
            (4, True, True), (8, True, True), (12, True, True)]

        name = _truncate_largest(podctl, f"podctl/runs/{run_id}/checkpoints/12/")
        listed = podctl.json("ckpt", "ls", run_id)["checkpoints"]
        bad = listed[-1]
        assert (bad["step"], bad["complete"]) == (12, False)
        assert bad["problem"].startswith(f"{name} is 1,000 bytes, the save wrote "), bad
        shown = podctl("ckpt", "ls", run_id).stdout
        assert f"DAMAGED: {name} is 1,000 bytes" in shown and shown.count(" complete") == 2

        pulled = podctl("ckpt", "pull", run_id, str(tmp_path / "pulled"))
        assert "pulled step 8" in pulled.stdout
        assert f"skipped checkpoint step 12: {name} is 1,000 bytes" in pulled.stderr

        again = podctl("run", "ck8", "--resume", run_id, str(SCRIPT), *ARGS, "--steps", "14",
                       timeout=600, check=False)
        assert again.returncode == 0, again.stdout[-8000:] + again.stderr
        said = [l for l in again.stdout.splitlines() if "skipped checkpoint" in l]
        assert len(said) == 1 and f"step 12: {name} is 1,000 bytes" in said[0], again.stdout
        assert "restoring step 8" in said[0] and "Traceback" not in again.stdout + again.stderr
        lines = metrics(again.stdout)
        assert (lines[0]["start_step"], lines[0]["restored_step"]) == (8, 8)
        assert [m["step"] for m in of("step", lines)] == list(range(9, 15))
        assert [m["step"] for m in of("checkpoint", lines)] == [12, 14]
        listed = podctl.json("ckpt", "ls", run_id)["checkpoints"]
        assert [(c["step"], c["complete"], c["verified"]) for c in listed] == [
            (8, True, True), (12, True, True), (14, True, True)]
