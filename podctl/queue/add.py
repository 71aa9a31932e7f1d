"""`podctl queue add`: check the request, bundle the workdir NOW (pack + upload to
GCS, content-addressed), and store the entry. The tick later runs that bundle, so
an edit to the workdir after `add` does not change the queued run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podctl import steps
from podctl.base.errors import InvalidValueError
from podctl.base.numbers import check_number
from podctl.base.topology import parse_slice
from podctl.queue.entry import Entry, check_name
from podctl.queue.interface import QueueStore


@dataclass
class AddRequest:
    slice_type: str
    spec: steps.RunSpec  # the entry's program; its hosts' packages are the workdir's requirements.txt
    name: str | None = None
    priority: int = 0
    tier: str = "on-demand"
    valid_for: int | None = None
    max_hours: float | None = None
    max_cost: float | None = None
    max_attempts: int = 3
    preflight: dict[str, Any] | None = None  # the report of `queue add --preflight`
    via: str | None = None  # `queue add --via` (None: the ticker's PODCTL_VIA, else auto)
    num_slices: int = 1  # `queue add --num-slices K`: a multislice
    elastic: bool = False  # one queued resource per slice; a lost one asked for again alone
    min_slices: int | None = None  # with elastic: below it the run waits (None: 1)
    grow_deadline: float | None = None  # with elastic: seconds to ask for a lost slice (None: 6 h)


def validate(request: AddRequest) -> None:
    parse_slice(request.slice_type)  # InvalidSliceError says what is wrong
    check_slices(request)
    request.spec.check()
    spec = request.spec
    # an entry keeps its bundle, arguments and env; its environment is its bundle's own
    # requirements.txt, locked at its start (the queue's store keeps no more of a spec)
    given = [flag for flag, value in (("--setup", spec.setup), ("--requirements", spec.requirements),
                                      ("--python", spec.python), ("--relock", spec.relock),
                                      ("--build-on host", spec.build_on == "host")) if value]
    if given:
        raise InvalidValueError(f"a queued run does not take {', '.join(given)}: its hosts get the "
                                "workdir's requirements.txt, locked when it starts; put what you "
                                "need there (a setup step in the script), or use `podctl run`.")
    if request.valid_for is not None and request.tier == "on-demand":
        raise InvalidValueError("--valid-for applies to queued resources: add --queued or --spot.")
    # as the CLI's options check them, for every other caller: finite (an infinite budget
    # is none), in range, whole numbers within the store's 64-bit columns
    for option, value in (("--max-hours", request.max_hours), ("--max-cost", request.max_cost)):
        if value is not None:
            check_number(value, option, above=0)
    check_number(request.max_attempts, "--max-attempts", whole=True, low=1)
    check_number(request.priority, "--priority", whole=True)
    if request.name is not None:
        check_name(request.name, "--name")
    if request.via is not None:
        steps.check_via(request.via, "queue add --via")


def check_slices(request: AddRequest) -> None:
    """--num-slices, --elastic and its floor and deadline, as `up` and `run` take them."""
    from podctl.base.topology import parse_multislice
    from podctl.steps.elastic import ElasticPolicy

    check_number(request.num_slices, "--num-slices", whole=True, low=1)
    if request.num_slices > 1:
        parse_multislice(request.slice_type, request.num_slices)  # a type that cannot be one
    if not request.elastic:
        given = [flag for flag, value in (("--min-slices", request.min_slices),
                                          ("--grow-deadline", request.grow_deadline)) if value is not None]
        if given:
            raise InvalidValueError(f"{given[0]} goes with --elastic.")
        return
    if request.num_slices < 2:
        raise InvalidValueError("--elastic makes one queued resource per slice and goes on on the "
                                "others when one is lost: give --num-slices 2 or more.")
    if request.min_slices is not None:
        check_number(request.min_slices, "--min-slices", whole=True, low=1)
        ElasticPolicy(min_slices=request.min_slices).check(request.num_slices)
    if request.grow_deadline is not None:
        check_number(request.grow_deadline, "--grow-deadline", above=0)


def check_api(api: str | None) -> None:
    """An entry keeps no API: the tick makes its slice through the API the tick's own
    settings choose (its --api, PODCTL_API, podctl.toml; else the slice type's: Compute
    Engine for TPU7x). --api compute at `queue add` would be dropped, so it is refused."""
    if api == "compute":
        raise InvalidValueError("an entry keeps no API: drop --api compute here, and run the tick "
                                "with it (`podctl queue tick --api compute`, or api = \"compute\" in "
                                "the tick's podctl.toml); TPU7x needs neither.")


def check_priced(request: AddRequest, zone: str) -> None:
    """A budget the tick could not price is no budget: --max-cost without a known price
    for the slice in ZONE is refused, as `up` refuses it."""
    if request.max_cost is None:
        return
    if steps.slice_hourly_cost(request.slice_type, zone, spot=request.tier == "spot") is None:
        why = steps.unknown_price(request.slice_type, zone).replace("pass --price or ", "")
        raise InvalidValueError(f"--max-cost needs a price: {why}.")


async def bundle_now(session: steps.Session, request: AddRequest,
                     notice: Callable[[str], None]) -> tuple[str, str]:
    """(bundle hash, the script's path inside the bundle), uploaded to the session's GCS."""
    return await steps.ship_bundle(session, request.spec, notice)


def add(store: QueueStore, request: AddRequest, *, project: str, zone: str, bucket: str,
        bundle_hash: str, script: str, owner: str) -> Entry:
    entry = Entry(id=0, name=request.name or Path(script).stem, accelerator_type=request.slice_type,
                  project=project, zone=zone, bucket=bucket, script=script,
                  bundle_hash=bundle_hash, args=list(request.spec.args), env=dict(request.spec.env),
                  priority=request.priority, tier=request.tier, valid_for=request.valid_for,
                  max_hours=request.max_hours, max_cost=request.max_cost,
                  max_attempts=request.max_attempts, preflight=request.preflight, owner=owner,
                  via=request.via, num_slices=request.num_slices, elastic=request.elastic,
                  min_slices=request.min_slices, grow_deadline=request.grow_deadline)
    return store.add(entry)
