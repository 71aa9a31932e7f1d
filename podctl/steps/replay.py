"""A run's lines back from GCS, every attempt of a recovered run in turn: `podctl logs`
and `Run.logs()`. With FOLLOW, the last attempt is followed until every host ends."""

from __future__ import annotations

from dataclasses import dataclass

from podctl.jobs import channels
from podctl.jobs.job import parse_hosts
from podctl.jobs.logs import LogReader
from podctl.jobs.run_files import attempt_ids, load_record
from podctl.jobs.run_record import HostStatus, RunRecord, job_exit_code
from podctl.steps.runs import LineSink, Notice
from podctl.steps.session import Session


@dataclass
class Replayed:
    record: RunRecord  # the run's (a recovered run: its first attempt's)
    statuses: dict[int, HostStatus]  # the last attempt's hosts' ends, those written so far

    def ended(self) -> tuple[int, HostStatus | None]:
        """(the exit code, the failed host's status or None), as `podctl run` gives it."""
        return job_exit_code(self.statuses)


async def replay(session: Session, run_id: str, sink: LineSink, *, hosts: str = "0",
                 follow: bool = False, notice: Notice = lambda text: None) -> Replayed:
    """Send RUN_ID's lines of HOSTS ("all", "0,3") to SINK, attempt after attempt."""
    record = await load_record(session.storage, run_id)
    attempts = attempt_ids(record)
    # as the run's own first line: where, and the channel it reached its hosts by
    via = channels.recorded(record.extra.get("via")).name  # a name the registry knows, never the record's text
    notice(f"run {run_id} on {record.slice_name} ({record.num_hosts} hosts, via {via})")
    statuses: dict[int, HostStatus] = {}
    for number, attempt_id in enumerate(attempts, 1):
        if len(attempts) > 1:
            notice(f"attempt {number} of {len(attempts)}: run {attempt_id}")
        reader = LogReader(session.storage, attempt_id, record.num_hosts, sink,
                           parse_hosts(hosts, record.num_hosts), notice=notice)
        statuses = await reader.follow(follow=follow and number == len(attempts))
    return Replayed(record, statuses)
