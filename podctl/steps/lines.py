"""A host's line as the callers print it: its label (`host 0003 p5`, with the JAX process
index its script announced) and whether it is a progress line (an install's, rewritten
in place on a terminal). jobs/host_label.py and jobs/agent_env.py own these (they ship to
the hosts with the agent); the callers above the steps read them here."""

from __future__ import annotations

from podctl.jobs.agent_env import is_progress
from podctl.jobs.host_label import host_name, label, process_of

__all__ = ["host_name", "is_progress", "label", "process_of"]
