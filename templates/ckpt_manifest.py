"""What a checkpoint save wrote, so that a step truncated or changed later is known before
a restore tries it (and a resume falls back to the newest step that is whole).

    DIR/<step>/podctl_manifest.json
        {"format": 1, "step": N, "objects": {NAME: {"size": BYTES, "crc32c": C or null}}}

NAME is an object's path under the step's directory. Process 0 writes the manifest once
orbax has committed the step: by then every process's objects are in (orbax writes
`commit_success.txt` after a barrier of all processes), and on GCS, whose listing is
strongly consistent, one listing sees them all with their sizes and the crc32c GCS itself
computed on upload; nothing is read back or hashed here. On a local directory, sizes only.

A step with a commit marker and no manifest (its save ended between the two, or another
script wrote it) is trusted as orbax marks it. podctl's `ckpt ls` and `ckpt pull` read
the same file (podctl/jobs/checkpoints.py): keep the two in step.
"""

from __future__ import annotations

import json
import os

MANIFEST = "podctl_manifest.json"
COMMIT = "commit_success.txt"  # orbax's mark of a finished save
FORMAT = 1


def _fs():
    import gcsfs  # the template's requirements; orbax's own gs:// paths go through it too

    return gcsfs.GCSFileSystem()


def objects(step_dir: str) -> dict[str, dict]:
    """NAME -> {"size", "crc32c"} of every object under STEP_DIR now (the manifest aside)."""
    found: dict[str, dict] = {}
    if "://" in step_dir:
        fs = _fs()
        base = step_dir.split("://", 1)[1].rstrip("/") + "/"
        fs.invalidate_cache(base)  # a listing cached before a change would hide it
        for name, info in fs.find(base, detail=True).items():
            if info.get("type") != "directory" and name.startswith(base):
                found[name[len(base):]] = {"size": int(info["size"]), "crc32c": info.get("crc32c")}
    else:
        for root, _, files in os.walk(step_dir):
            for file in files:
                path = os.path.join(root, file)
                found[os.path.relpath(path, step_dir).replace(os.sep, "/")] = {
                    "size": os.path.getsize(path), "crc32c": None}
    found.pop(MANIFEST, None)
    return found


def _step_dir(directory: str, step: int) -> str:
    return directory.rstrip("/") + "/" + str(step)


def write(directory: str, step: int) -> None:
    """Record what step STEP's committed save holds (process 0, once orbax committed it)."""
    step_dir = _step_dir(directory, step)
    text = json.dumps({"format": FORMAT, "step": step, "objects": objects(step_dir)}, sort_keys=True)
    if "://" in step_dir:
        with _fs().open(step_dir + "/" + MANIFEST, "w") as f:
            f.write(text)
    else:
        with open(os.path.join(step_dir, MANIFEST), "w") as f:
            f.write(text)


def _read(step_dir: str) -> dict | None:
    try:
        if "://" in step_dir:
            with _fs().open(step_dir + "/" + MANIFEST, "r") as f:
                return json.loads(f.read())
        with open(os.path.join(step_dir, MANIFEST)) as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return None


def problem(directory: str, step: int) -> str | None:
    """Why step STEP is not what its save wrote (one clause), or None: it is, or it has no
    manifest to say otherwise."""
    step_dir = _step_dir(directory, step)
    try:
        recorded = _read(step_dir)
    except (ValueError, OSError) as e:
        return f"its {MANIFEST} cannot be read ({type(e).__name__})"
    if recorded is None:
        return None
    return differs(recorded, objects(step_dir))


def differs(recorded: dict, now: dict[str, dict]) -> str | None:
    """The first object (largest first) that is missing or differs from RECORDED."""
    wrote = recorded.get("objects") or {}
    for name, saved in sorted(wrote.items(), key=lambda kv: (-kv[1]["size"], kv[0])):
        have = now.get(name)
        if have is None:
            return f"{name} is missing (the save wrote {len(wrote)} objects)"
        if have["size"] != saved["size"]:
            return f"{name} is {have['size']:,} bytes, the save wrote {saved['size']:,}"
        if saved.get("crc32c") and have.get("crc32c") and saved["crc32c"] != have["crc32c"]:
            return f"{name} changed since the save (its crc32c differs)"
    return None


def committed_steps(directory: str) -> list[int]:
    """The steps under DIRECTORY whose save orbax committed: `commit_success.txt` on GCS
    (no atomic rename there: the marker is the commit); on a local directory, orbax renames
    a finished save into place, so a step's own directory is the commit."""
    if "://" in directory:
        fs = _fs()
        base = directory.split("://", 1)[1].rstrip("/")
        fs.invalidate_cache()  # every listing from here on is GCS's own, not a cached one
        try:
            names = [name.rstrip("/").rsplit("/", 1)[-1] for name in fs.ls(base, detail=False)]
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit() and fs.exists(f"{base}/{n}/{COMMIT}"))
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory)
                  if n.isdigit() and os.path.isdir(os.path.join(directory, n)))


def newest_whole(directory: str, steps: list[int]) -> tuple[int | None, list[tuple[int, str]]]:
    """The newest of STEPS (committed ones) that is whole, and the newer ones skipped,
    each with why. Every process reads the same objects, so all choose alike."""
    skipped = []
    for step in sorted(steps, reverse=True):
        why = problem(directory, step)
        if why is None:
            return step, skipped
        skipped.append((step, why))
    return None, skipped


def remove(directory: str, step: int) -> None:
    """Delete step STEP (a damaged one the run is about to save again: orbax refuses to save
    a step at or below the newest it finds). Before orbax's CheckpointManager looks at the
    directory: a listing it cached with the step in it would outlive the delete."""
    step_dir = _step_dir(directory, step)
    if "://" in step_dir:
        fs = _fs()
        for path in fs.find(step_dir.split("://", 1)[1]):  # one by one: no batch request
            fs.rm_file(path)
        fs.invalidate_cache()
    else:
        import shutil

        shutil.rmtree(step_dir, ignore_errors=True)
