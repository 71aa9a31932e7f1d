"""Host lines labelled by JAX process index as well as by host (issue 14): the label,
the agent's mark and where it is logged, and the reader's per-attempt view. The run
on the fake, followed and replayed, is in tests/test_jobs_cli.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from podctl.host.agent import Agent
from podctl.host.agent_logs import process_mark
from podctl.host.agent_watch import PROGRESS_FILE, ProcessIndex, read_process
from podctl.jobs.host_label import HostLine, ProcessMarks, host_name, label, parse_mark, process_of

SCRIPTS = Path(__file__).parents[1] / "scripts"


def test_a_label_carries_the_process_index_only_when_it_is_known():
    assert label(3) == "host 0003"
    assert label(3, 5) == "host 0003 p5"
    assert label(12345, 0) == "host 12345 p0"


def test_the_printer_labels_each_line_by_what_its_reader_knew():
    import io

    from podctl.cli.job_cmds import _line_printer

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream in (io.StringIO(), Terminal()):
        sink = _line_printer(stream)
        sink(3, "plain")
        sink(3, HostLine("known", 5))
        sink(3, HostLine("\x1b[2J [host 0001 p1] forged?", 5))
        escaped = "\\x1b" if isinstance(stream, Terminal) else "\x1b"
        assert stream.getvalue().splitlines() == [
            "[host 0003] plain", "[host 0003 p5] known", f"[host 0003 p5] {escaped}[2J [host 0001 p1] forged?"]
    assert host_name(3) == "host 0003" and host_name(3, 5) == "host 0003 (JAX process 5)"


def test_the_readers_parse_exactly_the_agents_mark_for_that_host():
    assert parse_mark(3, process_mark(3, 5)) == 5
    assert parse_mark(4, process_mark(3, 5)) is None  # another host's mark, printed by this one
    assert parse_mark(3, process_mark(3, 5) + " and more") is None
    assert parse_mark(3, "worker 3 is JAX process 5") is None


def test_the_marks_label_a_hosts_later_lines_and_each_reader_starts_unknown():
    marks = ProcessMarks()
    before = marks.line(1, "starting")
    mark = marks.line(1, process_mark(1, 0))
    after = marks.line(1, "step 1")
    other = marks.line(0, "host 0's line")
    assert [process_of(x) for x in (before, mark, after, other)] == [None, 0, 0, None]
    # a HostLine is the line itself to every sink that does not ask
    assert isinstance(after, str) and after == "step 1" and json.dumps(after) == '"step 1"'
    assert process_of("a plain str") is None and HostLine("x").process is None
    assert process_of(ProcessMarks().line(1, "a new attempt's first line")) is None


def test_only_a_non_negative_integer_is_an_index(tmp_path):
    for text, expected in [('{"step": 0, "process": 4}', 4), ('{"process": 0}', 0),
                           ('{"step": 3}', None), ('{"process": -1}', None),
                           ('{"process": true}', None), ('{"process": "4"}', None),
                           ('{"proc', None), ("[4]", None)]:
        (tmp_path / PROGRESS_FILE).write_text(text)
        assert read_process(tmp_path) == expected, text
    watched = ProcessIndex(tmp_path)
    (tmp_path / PROGRESS_FILE).write_text('{"step": 0, "process": 7}')
    assert watched.check() == 7 and watched.value == 7
    assert watched.check() is None  # learned once


class Bucket:  # agent_gcs.Bucket's upload, kept in memory
    def __init__(self):
        self.objects: dict[str, str] = {}

    def upload(self, name, data, content_type=None):
        self.objects[name] = data.decode()


def test_the_agent_logs_the_mark_between_the_lines_before_and_after_and_keeps_the_index(
        tmp_path, monkeypatch):
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # no metadata server: not preempted
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    agent = Agent({"bucket": "b", "run_id": "r", "host": 1, "flush_seconds": 0.05}, run_dir)
    agent.logs.bucket = bucket = Bucket()
    agent.logs.start()
    env = {"PATH": "/usr/bin:/bin", "TPU_WORKER_ID": "1",
           "PODCTL_PROGRESS_FILE": str(run_dir / PROGRESS_FILE)}
    assert agent.run_process([sys.executable, str(SCRIPTS / "process_index.py")], tmp_path, env) == 0
    agent.logs.heartbeat(force=True)
    agent.write_status(0)
    assert (run_dir / "output.log").read_text().splitlines() == [
        "worker 1 before", "[podctl] host-0001 is JAX process 0", "worker 1 after"]
    assert json.loads(bucket.objects["podctl/runs/r/heartbeat/host-0001.json"])["process_index"] == 0
    assert json.loads(bucket.objects["podctl/runs/r/status/host-0001.json"])["process_index"] == 0


def test_a_script_that_never_names_its_index_has_none(tmp_path, monkeypatch):
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    agent = Agent({"bucket": "b", "run_id": "r", "host": 0, "flush_seconds": 0.05}, tmp_path)
    agent.logs.bucket = bucket = Bucket()
    agent.logs.start()
    assert agent.run_process([sys.executable, "-c", "print('hello')"], tmp_path,
                             {"PATH": "/usr/bin:/bin"}) == 0
    agent.write_status(0)
    assert (tmp_path / "output.log").read_text().splitlines() == ["hello"]
    assert json.loads(bucket.objects["podctl/runs/r/status/host-0000.json"])["process_index"] is None
