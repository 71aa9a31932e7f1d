"""podctl's own SSH key: made once, kept in the config directory (0600), and put
into every slice's `ssh-keys` metadata so that the job layer can reach its hosts."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from podctl.base.errors import ConfigError

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


def write_private(path: Path, data: bytes) -> bool:
    """Create PATH (mode 0600) whole or not at all; False if another process was first.

    The bytes go to a temporary file that is then hard-linked into place, so no
    reader ever sees a half-written key, even with podctl killed in between.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def ensure_ssh_key(config_dir: Path) -> SshKey:
    import asyncssh  # heavy; only the commands that provision need it

    key_dir = config_dir / "ssh"
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(key_dir, 0o700)
    path = key_dir / KEY_NAME
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519", comment="podctl")
        write_private(path, key.export_private_key())
    os.chmod(path, 0o600)  # an older copy with looser modes is tightened, as ssh demands
    try:
        key = asyncssh.read_private_key(path)
    except (asyncssh.KeyImportError, OSError) as e:
        raise ConfigError(f"podctl's SSH key {path} is unreadable ({e}); remove it (and "
                          f"{path}.pub) and podctl makes a new one.") from e
    public = key.export_public_key().decode().split()
    pub_path = key_dir / f"{KEY_NAME}.pub"
    if not pub_path.exists():
        write_private(pub_path, (" ".join(public) + "\n").encode())
    return SshKey(private_path=path, public_key=" ".join(public[:2]))
