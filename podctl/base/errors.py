"""podctl's one exception tree.

Every error a user can cause or meet is a PodctlError whose message says what
happened and what to do, in one or two lines; the CLI prints it without a
traceback and exits with its `exit_code`. Errors of the libraries underneath
(google-api-core, requests, asyncssh) are translated where they enter podctl,
with `raise PodctlX(...) from e`, so nothing above `podctl/cloud/` sees them.

    PodctlError                      exit 1 unless noted
    ├── UsageError                   exit 2: bad input, fix the command line
    │   ├── InvalidSliceError        a bad `v5p-N` / `v6e-N` ..., `--num-slices`
    │   ├── InvalidValueError        a bad name, zone, duration, label, ...
    │   └── RequirementsError        the run's requirements cannot be locked for the hosts
    ├── ConfigError                  exit 2: no project, no credentials, bad podctl.toml
    ├── CloudError                   the Cloud TPU API said no
    │   ├── NotFoundError            404: no such slice / zone
    │   ├── AlreadyExistsError       409: the name is taken
    │   ├── SpecMismatchError        `up` found the name taken by a different spec
    │   ├── QuotaExceededError       429 with a quota violation: ask for more quota
    │   ├── StockoutError            operation error code 8: no capacity in the zone
    │   ├── PermissionDeniedError    403: the account may not do this (or no such project)
    │   │   └── ApiDisabledError     403 SERVICE_DISABLED: enable tpu.googleapis.com
    │   ├── TransientError           429 rate limit / 503 / reset connection, after retries
    │   ├── SliceLostError           PREEMPTED, SUSPENDED, FAILED while podctl waited
    │   │   └── SliceDeletedError    deleted (DELETING, or gone) by someone, not preempted
    │   └── WaitTimeoutError         the slice was not ready by the deadline
    ├── StorageError                 GCS said no (bucket missing, permission, unreachable)
    │   ├── StorageNotFound          no such object (the bucket exists)
    │   ├── StoragePermissionError   the slice's nodes (service account, scopes) may not use the bucket
    │   └── StorageUnavailable       GCS unreachable or failing for a moment, after retries
    ├── PreflightError               `podctl preflight` could not compile the step
    ├── DoesNotFitError              the compiled step needs more HBM per chip than the slice has
    ├── BundleError                  the working directory cannot be packed (or unpacked)
    ├── JobError                     a run could not start, or its hosts could not be reached
    │   └── HostKeyError             a host's SSH key changed since podctl pinned it
    ├── QueueError                   the queue of runs (`podctl queue`) cannot be used
    │   ├── QueueDatabaseError       queue.db is corrupt, or from a newer podctl: never overwritten
    │   ├── QueueUnreachableError    the team's PostgreSQL queue cannot be reached (or refuses the login)
    │   ├── QueueBusyError           a tick holds the queue's lock (cancel waits for it, then gives up)
    │   └── NoSuchEntryError         no queue entry with that id
    ├── BudgetExceededError          a budget was reached: the run stopped, the slice deleted
    ├── DiskFullError                this machine's disk (or quota) is full: ENOSPC, EDQUOT
    └── FakeCloudError               the local fake cloud could not start or be reached

Outside the tree, on purpose: the host agent (host/agent*.py) runs standalone on the hosts
(standard library, its own zip) with EnvError and GcsError of its own, which end in the
host's status, never as exceptions in the client; so does the host's watcher
(host/host_watch.py, inlined in the slice's startup-script), whose Refused and its pin
check's PinRefusal (host/host_pin.py) end in its `podctl/run` guest attribute; and the
fake's ApiError is the fake cloud's wire answer (fake/api/apierror.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: the floor imports nothing of podctl's at run time
    from podctl.policy.preflight import PreflightResult


class PodctlError(Exception):
    """Base of every error podctl raises on purpose."""

    exit_code = 1


class UsageError(PodctlError):
    exit_code = 2


class InvalidSliceError(UsageError):
    pass


class InvalidValueError(UsageError):
    pass


class RequirementsError(UsageError):
    pass


class ConfigError(PodctlError):
    exit_code = 2


class CloudError(PodctlError):
    pass


class NotFoundError(CloudError):
    pass


class AlreadyExistsError(CloudError):
    pass


class SpecMismatchError(CloudError):
    pass


class QuotaExceededError(CloudError):
    pass


class StockoutError(CloudError):
    pass


class PermissionDeniedError(CloudError):
    pass


class ApiDisabledError(PermissionDeniedError):
    pass


class TransientError(CloudError):
    pass


class SliceLostError(CloudError):
    pass


class SliceDeletedError(SliceLostError):
    """Deleted, not preempted: recovery does not make such a slice again."""


class WaitTimeoutError(CloudError):
    pass


class StorageError(PodctlError):
    pass


class StorageNotFound(StorageError):
    """The object is not in the bucket (the bucket itself exists)."""


class StoragePermissionError(StorageError):
    """The nodes' service account or scopes cannot use the run's bucket (jobs/identity.py).
    WITHOUT_SLICE: the same line without what it says of the slice (still up), for a
    caller that deletes the slice itself (the queue, the demo)."""

    def __init__(self, message: str, *, without_slice: str | None = None):
        super().__init__(message)
        self.without_slice = message if without_slice is None else without_slice


class StorageUnavailable(StorageError):
    """GCS could not be reached or failed for a moment; retried, then raised."""


class PreflightError(PodctlError):
    """The preflight could not compile the step (the script's error, or libtpu missing)."""


class DoesNotFitError(PodctlError):
    """The compiled step needs more HBM per chip than the slice has."""

    def __init__(self, message: str, result: PreflightResult):
        super().__init__(message)
        self.result = result


class BundleError(PodctlError):
    pass


class JobError(PodctlError):
    pass


class HostKeyError(JobError):
    pass


class SliceBusyError(JobError):
    """Another run holds the slice's chips (one TPU owner per host: jobs/owner.py)."""


class BudgetExceededError(PodctlError):
    pass


class DiskFullError(PodctlError):
    pass


def disk_full(e: BaseException) -> DiskFullError | None:
    """E as a DiskFullError when it is the local disk (or the user's quota on it) that is
    full, else None. Every write podctl makes on this machine can meet it, so the CLI's
    error guard asks here rather than each write."""
    import errno

    if not isinstance(e, OSError) or e.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    where = f" ({e.filename})" if e.filename else ""
    return DiskFullError(f"no space left on this machine's disk{where}; free some space, then run "
                         "the command again.")


class QueueError(PodctlError):
    pass


class QueueDatabaseError(QueueError):
    pass


class QueueUnreachableError(QueueError):
    pass


class QueueBusyError(QueueError):
    pass


class QueueDeniedError(QueueError):
    """A PostgreSQL queue's roles refused: another's entry, a quota without podctl_admin."""


class NoSuchEntryError(QueueError):
    pass


class FakeCloudError(PodctlError):
    pass
