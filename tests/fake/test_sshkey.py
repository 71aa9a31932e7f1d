import os
import stat
from concurrent.futures import ProcessPoolExecutor

import pytest

from podctl.cloud.sshkey import ensure_ssh_key
from podctl.base.errors import ConfigError


def _key(path: str) -> str:
    from pathlib import Path

    return ensure_ssh_key(Path(path)).public_key


def test_key_is_made_once_even_by_racing_processes(tmp_path):
    with ProcessPoolExecutor(4) as pool:
        keys = set(pool.map(_key, [str(tmp_path)] * 8))
    assert len(keys) == 1 and next(iter(keys)).startswith("ssh-ed25519 ")
    private = tmp_path / "ssh" / "podctl_ed25519"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert not [p for p in private.parent.iterdir() if p.name.startswith(".")]  # no temp files left


def test_loose_modes_are_tightened_and_a_broken_key_is_explained(tmp_path):
    key = ensure_ssh_key(tmp_path)
    os.chmod(key.private_path, 0o644)
    assert ensure_ssh_key(tmp_path).public_key == key.public_key
    assert stat.S_IMODE(key.private_path.stat().st_mode) == 0o600
    assert key.metadata_entry == f"podctl:{key.public_key} podctl"
    key.private_path.write_bytes(b"")
    with pytest.raises(ConfigError, match="remove it"):
        ensure_ssh_key(tmp_path)
