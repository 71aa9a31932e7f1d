"""podctl's own SSH key: made once, kept in the config directory (0600), and put
into every slice's `ssh-keys` metadata so that the job layer can reach its hosts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SSH_USER = "podctl"
KEY_NAME = "podctl_ed25519"


@dataclass(frozen=True)
class SshKey:
    private_path: Path
    public_key: str  # "ssh-ed25519 AAAA..."

    @property
    def metadata_entry(self) -> str:
        """One `ssh-keys` metadata line, in gcloud's "USER:KEY USER" form."""
        return f"{SSH_USER}:{self.public_key} {SSH_USER}"


def _write_private(path: Path, data: bytes) -> bool:
    """Create PATH with mode 0600 only if it does not exist; False if another won."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return True


def ensure_ssh_key(config_dir: Path) -> SshKey:
    import asyncssh  # heavy; only the commands that provision need it

    key_dir = config_dir / "ssh"
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(key_dir, 0o700)
    path = key_dir / KEY_NAME
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519", comment="podctl")
        _write_private(path, key.export_private_key())
    os.chmod(path, 0o600)  # an older copy with looser modes is tightened, as ssh demands
    key = asyncssh.read_private_key(path)
    public = key.export_public_key().decode().split()
    pub_path = key_dir / f"{KEY_NAME}.pub"
    if not pub_path.exists():
        _write_private(pub_path, (" ".join(public) + "\n").encode())
    return SshKey(private_path=path, public_key=" ".join(public[:2]))
