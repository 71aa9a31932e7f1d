"""A host's line as the callers print it: its label (`host 0003 p5`, with the JAX process
index its script announced), whether it is a progress line (an install's, rewritten
in place on a terminal) and the metric record it carries (`metric`, `step_summary`).
jobs/host_label.py, host/agent_env.py and host/metric_line.py own these (they ship to
the hosts with the agent); the callers above the steps read them here."""

from __future__ import annotations

from podctl.host.agent_env import is_progress
from podctl.host.metric_line import parse as metric
from podctl.host.metric_line import step_summary
from podctl.jobs.host_label import host_name, label, process_of

__all__ = ["host_name", "is_progress", "label", "metric", "process_of", "step_summary"]
