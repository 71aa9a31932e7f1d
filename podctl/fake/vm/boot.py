"""A fake host's boot: its node's `startup-script`, run as GCE's
google-startup-scripts.service runs it at every boot of a TPU VM.

Each time a node's hosts come up (creation, the end of a maintenance, nodes.start, a
daemon restart, the `reboot` fault) every live host runs the `startup-script` value of
the node's metadata, as its hosts see it (node_fields.host_metadata), if there is one:
`/bin/bash FILE`, FILE being the script written to the host's directory
(`host-NNNN/startup-script`), from the host's `/` (its directory), with the environment
an SSH session on the host gets (hosts.Host.environment: GCE_METADATA_HOST,
STORAGE_EMULATOR_HOST, ...; no TPU_WORKER_*, as on a VM) for the user `root`, whose HOME is the host's
`/root` (`host-NNNN/root/`). Its output (and its children's) is appended to
`host-NNNN/startup-script.log`, the fake's serial console. It carries the host's
token (hosts.TOKEN_VAR), so everything it starts, detached or not, dies with the host
(preemption, delete, maintenance, reboot).

READY is not booted: each host runs its script late, the later the larger the node, as
big slices on Google do (reference/cloud-tpu.md, "READY is not booted"). Worker w of a
node of n hosts waits `late_seconds(name, w, n, mean)`: the quantile (r + 0.5) / n of an
exponential distribution of mean `timings.boot_late` x sqrt(n) simulated seconds (r: the
worker's rank in a shuffle seeded by the node's name: the same for every boot of that
node, so tests are repeatable), capped at BOOT_LATE_CAP means. With the default 10 s: a
v5p-8's one host 7 s late, a v5p-512's 64 from 0.6 s to 6.5 min, a v5p-2048's 256 up to
16 min (marin waits up to 30 min there). Divided by the time scale like every timing;
`boot_late` 0 starts every host at once.

Approximate: the script runs as the daemon's own user, not the VM's root (uid 0 only
where the daemon runs as root, and then the machine's: a script on a fake host, which
PODCTL_FAKE_HOST=1 names, must not `useradd`, setuid or write outside its host). The boots
are not waited for: one task per node starts its hosts' scripts in the order they are
due, giving the loop back between two (with `boot_late` 0, a v5p-4096's 512 start in
about 3 s while the API answers within 0.1 s), and each exit is reaped through a pidfd;
a node without a startup-script costs nothing. A host booted again before its script
began (a reboot, a maintenance) runs it once, for the later boot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import subprocess
from typing import TYPE_CHECKING, Any

from podctl.fake.api.node_fields import host_metadata
from podctl.fake.vm.host_ssh import BASH, uts_preexec

if TYPE_CHECKING:
    from podctl.fake.vm.hosts import Host, NodeHosts

SCRIPT_KEY = "startup-script"
SCRIPT_FILE = "startup-script"
LOG_FILE = "startup-script.log"
USER = "root"
BOOT_LATE_CAP = 6.0  # no host later than this many means (the distribution's tail, cut)
log = logging.getLogger(__name__)


def script_of(node: dict[str, Any]) -> str | None:
    """The node's startup-script as its hosts see it; None when it has none."""
    script = host_metadata(node).get(SCRIPT_KEY)
    return script if isinstance(script, str) and script.strip() else None


def boot_node(nh: NodeHosts) -> int:
    """Every live host of NH runs the node's startup-script (not waited for). Returns
    how many started one (0, at no cost, without a script)."""
    return boot_hosts([h for h in nh.hosts if h.alive])


def boot_hosts(hosts: list[Host]) -> int:
    """HOSTS (of one node) run its startup-script, each when it is due; see boot_node."""
    if not hosts:
        return 0
    nh = hosts[0].node
    script = script_of(nh.node)
    if script is None:
        return 0
    for host in hosts:
        count_boot(host)
    world = nh.manager.world
    mean, scale = (world.timings.boot_late, world.time_scale) if world is not None else (0.0, 1.0)
    n = int(nh.node.get("_hosts") or len(nh.hosts))
    due = sorted((late_seconds(nh.name, h.index, n, mean) / scale, h.index, h) for h in hosts)
    nh.manager.track(asyncio.ensure_future(_boot([(after, h, boots(h)) for after, _, h in due], script)))
    return len(hosts)


def late_seconds(node_name: str, worker: int, hosts: int, mean: float) -> float:
    """Simulated seconds between WORKER's host coming up and its startup-script (see the
    module's docstring): 0 when MEAN is 0."""
    if mean <= 0 or hosts <= 0:
        return 0.0
    scaled = mean * math.sqrt(hosts)
    ranks = list(range(hosts))
    random.Random(node_name).shuffle(ranks)
    quantile = (ranks[worker % hosts] + 0.5) / hosts
    return min(BOOT_LATE_CAP * scaled, -scaled * math.log(1.0 - quantile))


def boots(host: Host) -> int:
    from podctl.fake.vm.host_counters import host_counters

    return host_counters(host.node.node, host.index)["boots"]


async def _boot(due: list[tuple[float, Host, int]], script: str) -> None:
    """Each host when it is due (wall-clock seconds from now), in that order, the loop free
    between two (each start forks: with 512 hosts at once, the API and the metadata
    servers would wait for all of them). A host booted again meanwhile (its boots counter
    moved) is left to that boot."""
    began = asyncio.get_running_loop().time()
    for after, host, boot in due:
        wait = began + after - asyncio.get_running_loop().time()
        await asyncio.sleep(max(0.0, wait))
        if boots(host) == boot:
            _start(host, script)


def count_boot(host: Host) -> None:
    """The host's `boots` counter (hosts.count: on the world's node, it outlives the host)."""
    from podctl.fake.vm.host_counters import count

    count(host.node.node, "boots", host.index)


def environment(host: Host) -> dict[str, str]:
    env = host.environment(USER, {})
    home = host.root / "root"
    home.mkdir(exist_ok=True, mode=0o700)
    env["HOME"] = str(home)
    return env


def _start(host: Host, script: str) -> None:
    """Start HOST's script; its exit is reaped through a pidfd in the loop (no thread, no
    task waits for it)."""
    if not host.alive:
        return
    try:
        path = host.root / SCRIPT_FILE
        path.write_text(script)
        path.chmod(0o700)
        env = environment(host)
        with open(host.root / LOG_FILE, "ab") as out:
            proc = subprocess.Popen(
                [BASH, str(path)], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=str(host.root), env=env, start_new_session=True,
                preexec_fn=(uts_preexec(host.hostname, str(host.node.directory / "etc-hosts"))
                            if os.geteuid() == 0 else None))
    except OSError as e:
        log.warning("fake host %s/%d cannot run its startup-script: %s", host.node.name, host.index, e)
        with contextlib.suppress(OSError), open(host.root / LOG_FILE, "a") as out:
            out.write(f"fake host: cannot run the startup-script: {e}\n")
        return
    _reap(proc)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Collect PROC's exit status when it ends, without waiting for it."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel): a thread waits for it
        loop.run_in_executor(None, proc.wait)
        return

    def ended() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        proc.wait()  # it has exited: this returns at once

    loop.add_reader(fd, ended)
