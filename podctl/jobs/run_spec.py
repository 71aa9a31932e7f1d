"""What a run is, as its user gave it: one shape from the CLI, the Python API and the
queue down to the hosts.

A run's program and its environment (the script, its arguments, the directory shipped
with it, the environment variables, the setup command, the requirements and the hosts'
Python) are given once, as a RunSpec. Each layer adds only how it runs it around the
spec, never a copy of its fields:

    steps.RunOptions   spec + whose lines to show, resume, detach, once-only start
    jobs.RunRequest    spec + the slice, ports, checkpoint directory, record extras
    queue.AddRequest   spec + slice type, tier, priority, budgets, attempts

so a `--env` value crosses from the command line to the hosts' config in this one
dataclass (launch.JobSpec, the hosts' own config, is what the agent reads: not a
user's shape).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from podctl.base.errors import BundleError, InvalidValueError


@dataclass(frozen=True)
class RunSpec:
    script: Path
    args: tuple[str, ...] = ()
    workdir: Path | None = None  # shipped to every host; None: the script's directory
    # may hold secrets: they go only into the run's configs in GCS, never into a
    # record, a log or this object's repr (env_keys says which were given)
    env: dict[str, str] = field(default_factory=dict, repr=False)
    setup: str | None = None  # a shell command run on each host before the script
    requirements: Path | None = None  # None: the workdir's requirements.txt, if any
    python: str | None = None  # the hosts' environment's Python (--python); None: podctl decides
    relock: bool = False  # --relock: resolve the requirements anew, not from an earlier lock
    # --build-on: "client" builds the hosts' environment here, where the package index is;
    # "host" has host 0 build it from the index (needs the hosts to reach it; SSH only)
    build_on: str = "client"

    @property
    def env_keys(self) -> list[str]:
        return sorted(self.env)

    def check(self) -> None:
        """A script to run must be a file here (and --workdir a directory): bad input, exit 2."""
        if not self.script.expanduser().is_file():
            raise InvalidValueError(f"no script {str(self.script)!r}: give the path of a Python file.")
        if self.workdir is not None and not self.workdir.expanduser().is_dir():
            raise InvalidValueError(f"--workdir {str(self.workdir)!r} is not a directory.")

    def bundle_root(self) -> tuple[Path, str]:
        """(the directory shipped to the hosts, the script's path inside it)."""
        self.check()
        script = self.script.expanduser()
        root = (self.workdir or script.parent).expanduser().resolve()
        try:
            relative = script.resolve().relative_to(root)
        except ValueError as e:
            raise BundleError(f"the script {script} is outside the working directory {root}; "
                              "pass --workdir with a directory that holds it.") from e
        return root, relative.as_posix()
