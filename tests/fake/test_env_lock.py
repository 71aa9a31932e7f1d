"""The hosts' environment as the client decides it (podctl/jobs/env_lock.py): what is
refused before anything starts, what the lock holds and what it keeps out, and which
Python the hosts get. Resolving asks the package index (uv), for small packages."""

from __future__ import annotations

from pathlib import Path

import pytest

from podctl.base.errors import RequirementsError
from podctl.host import agent_env, run_layout
from podctl.jobs import env_lock


def reqs(tmp_path: Path, text: str, name: str = "requirements.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("line", ["./mypkg", "../libs/mypkg", "/opt/wheels/x-1.0-py3-none-any.whl",
                                  "-e .", "--editable ./mypkg", "file:///tmp/x.tar.gz",
                                  "mypkg @ file:///home/me/mypkg", "dist/mypkg-1.0.tar.gz", "~/mypkg"])
def test_a_local_path_requirement_is_refused_in_one_line_naming_it(tmp_path, line):
    path = reqs(tmp_path, f"six\n{line}\n")
    with pytest.raises(RequirementsError) as caught:
        env_lock.read_requirements(path, "cpu")
    message = str(caught.value)
    assert "\n" not in message and f"`{line}`" in message and "the hosts do not have" in message
    assert RequirementsError.exit_code == 2


def test_an_editable_vcs_line_is_called_editable_not_a_local_path(tmp_path):
    """`-e git+https://...` is no path: the fix is to drop the -e, which the line says."""
    line = "-e git+https://github.com/x/y#egg=y"
    with pytest.raises(RequirementsError) as caught:
        env_lock.read_requirements(reqs(tmp_path, f"{line}\n"), "cpu")
    message = str(caught.value)
    assert f"`{line}` is an editable install" in message and "drop the -e" in message
    assert "local path" not in message


def test_an_included_file_that_is_missing_is_refused_naming_it(tmp_path):
    path = reqs(tmp_path, "-r base.txt\n")
    with pytest.raises(RequirementsError, match="base.txt, which is not a file"):
        env_lock.read_requirements(path, "cpu")


def test_r_and_c_lines_are_followed_and_index_options_kept_apart_from_the_requirements(tmp_path):
    (tmp_path / "sub").mkdir()
    reqs(tmp_path / "sub", "six  # a comment\n-c pins.txt\n", "base.txt")
    reqs(tmp_path / "sub", "six==1.17.0\n", "pins.txt")
    path = reqs(tmp_path, "# top\n-r sub/base.txt\njax[${PODCTL_JAX_EXTRA}]\n"
                "--extra-index-url https://me:s3cret@pkgs.example.com/simple\n")
    requirements, constraints, index = env_lock.read_requirements(path, "cpu")
    # the fake's CPU hosts also take the jax bound they run under (env_lock.CPU_HOST_CONSTRAINTS)
    assert requirements == ["six", "jax[cpu]"] and constraints == ["six==1.17.0", *env_lock.CPU_HOST_CONSTRAINTS]
    assert env_lock.read_requirements(path, "tpu")[1] == ["six==1.17.0"]  # a TPU VM's jax is the user's
    assert index == ("--extra-index-url", "https://me:s3cret@pkgs.example.com/simple")


def test_the_lock_pins_every_package_for_the_hosts_and_its_hash_is_the_key(tmp_path):
    path = reqs(tmp_path, "six\n-r more.txt\n")
    reqs(tmp_path, "packaging\n", "more.txt")
    cache = tmp_path / "locks"
    plan = env_lock.plan(path, jax_extra="cpu", python="3.11", cache=cache)
    versions = env_lock.locked_versions(plan.lock)
    assert set(versions) == {"six", "packaging"} and plan.python == "3.11"
    assert plan.key == env_lock.env_key(plan.lock, "3.11") and len(plan.key) == 32
    # a later run gets the same lock (kept), and --relock resolves again to the same pins
    again = env_lock.plan(path, jax_extra="cpu", python="3.11", cache=cache)
    assert again.lock == plan.lock and any("--relock" in note for note in again.notes)
    assert env_lock.plan(path, jax_extra="cpu", python="3.11", cache=cache, relock=True).key == plan.key


def test_the_image_python_is_kept_when_the_requirements_resolve_the_same_on_a_current_one(tmp_path):
    plan = env_lock.plan(reqs(tmp_path, "six==1.17.0\n"), jax_extra="cpu", cache=tmp_path / "l")
    assert plan.python == env_lock.IMAGE_PYTHON and "Python 3.10" in plan.notes[-1]


def test_jax_gets_a_current_cpython_rather_than_the_old_jax_the_image_python_would_get(tmp_path):
    plan = env_lock.plan(reqs(tmp_path, "jax>=0.4.30\n"), jax_extra="cpu", cache=tmp_path / "l")
    assert plan.python == env_lock.CURRENT_PYTHON
    assert "the image's Python 3.10 would get jax 0.6" in plan.notes[0]
    assert f"jax {plan.version_of('jax')}" in plan.notes[-1]
    # the requirements' own pin wins: jax 0.6.2 runs on the image's Python
    pinned = env_lock.plan(reqs(tmp_path, "jax==0.6.2\n", "p.txt"), jax_extra="cpu", cache=tmp_path / "l")
    assert pinned.python == env_lock.IMAGE_PYTHON


def test_a_package_that_does_not_exist_is_said_in_one_line_before_any_host_is_asked(tmp_path):
    with pytest.raises(RequirementsError) as caught:
        env_lock.plan(reqs(tmp_path, "podctl-no-such-package-zz9==1.0\n"), jax_extra="cpu", python="3.12",
                      cache=tmp_path / "l")
    assert "podctl-no-such-package-zz9" in str(caught.value) and "\n" not in str(caught.value)


def test_the_hosts_config_carries_a_per_environment_key_never_the_clients_secret(tmp_path):
    secret = env_lock.client_secret(tmp_path)
    assert env_lock.client_secret(tmp_path) == secret and (tmp_path / "env-signing.key").stat().st_mode & 0o077 == 0
    plan = env_lock.EnvPlan(key="a" * 32, python="3.12", lock="six==1.17.0\n",
                            index_args=("--index-url", "https://me:s3cret@x/simple"))
    config = plan.to_config(secret, None)
    assert secret.hex() not in repr(config)
    other = env_lock.EnvPlan(key="b" * 32, python="3.12", lock="six==1.17.0\n").to_config(secret, None)
    assert config["sign_key"] != other["sign_key"]
    # what a host signs with that key cannot be signed without it
    sig = agent_env.signature(config["sign_key"], plan.key, "0" * 64, 10)
    assert sig != agent_env.signature(other["sign_key"], plan.key, "0" * 64, 10)
    assert "s3cret" not in plan.lock


def test_a_queued_runs_requirements_come_from_its_bundle_and_its_lock_is_kept_with_the_run(fake, tmp_path):
    import asyncio

    from podctl.fake.storage.gcs import DEFAULT_BUCKET
    from podctl.jobs import bundle, env_ship
    from podctl.cloud.storage import Storage

    work = tmp_path / "work"
    work.mkdir()
    (work / "job.py").write_text("print('hi')\n")
    (work / "requirements.txt").write_text("six==1.17.0\n")
    storage = Storage.connect(DEFAULT_BUCKET, endpoint=fake.gcs_url)
    packed = bundle.pack(work, out_dir=tmp_path / "out")
    notes: list[str] = []

    async def go() -> tuple:
        await bundle.upload(storage, packed)
        return await env_ship.prepare(storage, run_id="q-1", requirements=None, root=None,
                                      bundle_hash=packed.hash, python="3.12", jax_extra="cpu",
                                      ship_python=False, notice=notes.append)

    config, summary = asyncio.run(go())
    assert config["python"] == "3.12" and summary["key"] == config["key"] and config["interpreter"] == "host"
    assert asyncio.run(storage.exists(config["archive"]["object"]))  # built here, uploaded
    assert "lock" not in config and "sign_key" not in config
    assert asyncio.run(storage.download_bytes(run_layout.requirements_lock_object("q-1"))) == b"six==1.17.0\n"
    assert any("Python 3.12, 1 packages locked" in note for note in notes)
