"""A host's fetch + unpack of the environment the client built, against the floor:
`curl URL | zstd -d | tar -x` of the same object from the same fake GCS server.

The archive is the template's environment (templates/requirements.txt, jax[cpu] for the
fake's hosts), built and packed by podctl's client (jobs/env_build.py; kept in
STATE_DIR/envs, so a rerun packs nothing), uploaded to an in-process fake GCS. Then,
alternated, ROUNDS times each, into a fresh directory:

  - podctl: agent_env_fetch.stream_into, the host's code: 8 ranged reads in flight
    through agent_gcs.Bucket (urllib), each part's sha256 checked, in order into
    `zstd -d | tar -x`, the whole sha256 checked;
  - podctl on a host without `zstd` (PATH: a directory holding `tar` only): the same
    reads and checks, decompressed in the agent's process by the `zstandard` package
    (the client's, the version it ships to such hosts: env_zstandard.py) into `tar -x`;
  - floor: `curl -s URL | zstd -d | tar -x` (one stream, nothing checked).

And the fake GCS's own speed on that object (curl to /dev/null), with its large-object
path (fake/storage/gcs_media.py) and without it (the emulator's: the whole object read into
memory per request, one request at a time).

    python benchmarks/bench_env_fetch.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from podctl.fake.storage import gcs_media  # noqa: E402
from podctl.fake.storage.gcs import FakeGcs  # noqa: E402
from podctl.host import agent_env_fetch, agent_gcs
from podctl.jobs import env_build, env_lock  # noqa: E402
from podctl.base.settings import FAKE_USER_TOKEN  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class UserBucket(agent_gcs.Bucket):
    """The host's GCS client, with the fake project owner's token instead of a metadata server's."""

    def _auth(self) -> dict:
        return {"Authorization": f"Bearer {FAKE_USER_TOKEN}"}


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requirements", type=Path, default=ROOT / "templates" / "requirements.txt")
    args = parser.parse_args()

    started = time.perf_counter()
    plan = env_lock.plan(args.requirements, jax_extra="cpu")
    built = env_build.build(plan, ship_python=False)
    print(f"environment {plan.key[:12]}: Python {plan.python}, {len(env_lock.locked_versions(plan.lock))} "
          f"packages, {built.size / 1e6:.1f} MB zstd ({'packed' if built.seconds else 'packed earlier'}, "
          f"{time.perf_counter() - started:.1f} s)")
    with tempfile.TemporaryDirectory(prefix="bench-env-fetch-") as tmp:
        gcs = FakeGcs(Path(tmp) / "gcs")
        gcs.start()
        try:
            name = f"podctl/envs/{plan.key}/{built.sha256}.tar.zst"
            bucket = UserBucket(gcs.bucket, endpoint=gcs.url)
            bucket.upload_file(name, str(built.path), "application/zstd")
            url = bucket._object_url(name, download=True) + "?alt=media"
            auth = f"Authorization: Bearer {FAKE_USER_TOKEN}"
            config = built.host_config(plan, name)["archive"]

            def ours(dest: Path) -> None:
                agent_env_fetch.stream_into(bucket, name, config, dest)

            tar_only = Path(tmp) / "tar-only"  # the PATH of an image without Ubuntu's zstd
            tar_only.mkdir()
            (tar_only / "tar").symlink_to(shutil.which("tar") or "/bin/tar")

            def no_zstd(dest: Path) -> None:
                import zstandard

                path, os.environ["PATH"] = os.environ["PATH"], str(tar_only)
                try:
                    _, how = agent_env_fetch.stream_into(bucket, name, config, dest,
                                                         zstandard_module=lambda: zstandard)
                finally:
                    os.environ["PATH"] = path
                assert how.startswith("python-zstandard"), how

            def floor(dest: Path) -> None:
                dest.mkdir()
                subprocess.run(f"curl -sf -H '{auth}' '{url}' | zstd -d -q | tar -x -C '{dest}'",
                               shell=True, check=True)

            def serve_only() -> None:
                subprocess.run(["curl", "-sf", "-o", "/dev/null", "-H", auth, url], check=True)

            times: dict[str, list[float]] = {"podctl": [], "no-zstd": [], "floor": [], "gcs": [], "emulator": []}
            for round_ in range(args.rounds):
                for what, fn in (("podctl", ours), ("no-zstd", no_zstd), ("floor", floor)):
                    dest = Path(tmp) / f"{what}-{round_}"
                    times[what].append(timed(lambda fn=fn, dest=dest: fn(dest)))
                    shutil.rmtree(dest)
                times["gcs"].append(timed(serve_only))
                kept, gcs_media.STREAM_BYTES = gcs_media.STREAM_BYTES, 1 << 62  # the emulator's own path
                try:
                    times["emulator"].append(timed(serve_only))
                finally:
                    gcs_media.STREAM_BYTES = kept
        finally:
            gcs.stop()
    mb = built.size / 1e6
    floor_median = statistics.median(times["floor"])
    print(f"\nfetch + unpack of {mb:.1f} MB, median of {args.rounds} (cores: {os.cpu_count()})")
    print("| approach | median | MB/s (compressed) | vs floor |\n|---|---:|---:|---:|")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for what, label in (("podctl", "podctl: 8 ranged reads, each part checked, `zstd -d | tar -x`"),
                        ("no-zstd", "podctl, host without zstd: the same, python-zstandard into `tar -x`"),
                        ("floor", "floor: `curl | zstd -d | tar -x`")):
        median = statistics.median(times[what])
        print(f"| {label} | {median:.2f} s | {mb / median:.0f} | {median / floor_median:.2f}x |")
    print("\nthe fake GCS serving that object (curl to /dev/null)")
    print("| server | median | MB/s |\n|---|---:|---:|")
    for what, label in (("gcs", "fake GCS (gcs_media: sendfile, ranged, threads)"),
                        ("emulator", "the emulator's own path (whole object read per request)")):
        median = statistics.median(times[what])
        print(f"| {label} | {median:.3f} s | {mb / median:.0f} |")


if __name__ == "__main__":
    main()
