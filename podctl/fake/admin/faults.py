"""Every fault the fake cloud can be made to show: one table, read by the admin API
(POST /admin/NAME, admin_api.py), its client (FakeAdmin.NAME(...) and
FakeAdmin.inject(NAME, ...), admin_client.py) and `podctl fake inject NAME`
(cli/fake_inject.py). One name per fault everywhere: the CLI's `kill-host` is
POST /admin/kill-host and FakeAdmin.kill_host.

Adding a fault is one `Fault(...)` below (its arguments from fault_args.Arg, the World
or HostManager action it takes, the line the CLI prints) plus that behaviour and its
tests; nothing else lists faults.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podctl.fake.admin.fault_args import Arg
from podctl.fake.api.apierror import ApiError, invalid, precondition

if TYPE_CHECKING:
    from podctl.fake.api.server import FakeCloud

_CODES = ("403", "429", "503", "drop", "lose")


@dataclass(frozen=True)
class Fault:
    name: str  # CLI subcommand and admin route; FakeAdmin's method with "_" for "-"
    summary: str  # one line: the CLI's help and the admin API's listing
    args: tuple[Arg, ...]
    act: Callable[[FakeCloud, dict[str, Any]], dict[str, Any]]  # checked arguments -> the JSON answer
    said: Callable[[dict[str, Any], dict[str, Any]], str]  # (arguments, answer) -> what the CLI prints

    @property
    def method(self) -> str:
        return self.name.replace("-", "_")

    def check(self, body: dict[str, Any]) -> dict[str, Any]:
        """BODY's arguments checked and typed (defaults filled); ValueError if bad."""
        known = {a.name for a in self.args}
        unknown = sorted(set(body) - known)
        if unknown:
            raise ValueError(f"{self.name} takes no {unknown[0]!r}; it takes {sorted(known)}")
        return {a.name: a.parse(body.get(a.name), a.name) for a in self.args}

    def usage(self) -> str:
        parts = [a.label for a in self.args if a.positional]
        parts += [f"[{a.flag}]" if a.kind == "flag" else f"[{a.flag} {a.metavar or a.name.upper()}]"
                  for a in self.args if not a.positional]
        return " ".join([self.name, *parts])


# ---- what each fault does ---------------------------------------------------------------


def find(cloud: FakeCloud, name: str) -> tuple[str, dict[str, Any]]:
    try:
        return cloud.world.find(name)
    except ApiError as e:
        raise ApiError(404, "NOT_FOUND", f"no node or queued resource named {name!r} in the "
                       "fake cloud (see `podctl ls`)") from e


def find_node(cloud: FakeCloud, name: str) -> dict[str, Any]:
    kind, resource = find(cloud, name)
    if kind != "node":
        raise invalid(f"{resource['name']} is a queued resource; name one of its nodes")
    return resource


def on_host(cloud: FakeCloud, args: dict[str, Any], act: Callable[[Any, str, int], Any]) -> Any:
    """ACT(host manager, node name, worker) on a live host named by ARGS' name and worker."""
    node = find_node(cloud, args["name"])
    if cloud.hosts is None:
        raise precondition("the fake cloud's hosts are not running")
    try:
        return act(cloud.hosts, node["name"], args["worker"])
    except LookupError as e:
        raise precondition(str(e.args[0])) from e


def _preempt(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    if find(cloud, args["name"])[1].get("_api") == "compute":
        raise invalid(f"{args['name']} is a Compute Engine MIG: its VMs are preempted one by one "
                      "(`preempt-vm NAME WORKER`), and the MIG recreates them")
    cloud.world.preempt(args["name"], args["after"], args["grace"])
    return cloud.world.resources()


def _kill_host(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    sig = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}[args["signal"]]
    killed = on_host(cloud, args, lambda hosts, node, worker: hosts.kill_processes(node, worker, sig))
    return {"signalled": killed, "signal": args["signal"]}


def _cut_ssh(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    return {"connections_cut": on_host(cloud, args, lambda h, node, worker: h.cut_ssh(node, worker))}


def _drop_host(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    on_host(cloud, args, lambda hosts, node, worker: hosts.drop_host(node, worker))
    return {"dropped": args["worker"]}


def _gcs_outage(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    if cloud.gcs is None:
        raise precondition("the fake cloud's GCS is not running")
    cloud.gcs.outage(args["seconds"])
    return {"gcs_outage_seconds": args["seconds"]}


def _fail_calls(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    from podctl.fake.api import tpu_api

    call = args["call"]
    if call is not None and not any(route.call == call for route in tpu_api.ROUTES):
        raise invalid(f"no call named {call!r}; e.g. nodes.create, operations.get")
    cloud.faults = [(args["code"], call)] * args["count"]
    return {"pending_faults": len(cloud.faults)}


def _capacity(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    world, zone, chips = cloud.world, args["zone"] or cloud.zone, args["chips"]
    if zone not in world.zones:
        raise invalid(f"the fake cloud has no zone {zone!r}; its zones: {', '.join(world.zones)}")
    if chips is None:
        world.capacity.pop(zone, None)
    else:
        world.capacity[zone] = chips
    return {"zone": zone, "capacity": world.zone_capacity(zone), "free": world.free_chips(zone)}


def _latency(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    cloud.latency = args["seconds"]
    return {"latency": args["seconds"]}


def _host_latency(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    if cloud.hosts:
        cloud.hosts.latency = args["seconds"]
    return {"host_latency": args["seconds"]}


def _maintenance(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    from podctl.fake.vm import maintenance

    plan = maintenance.announce(cloud.world, find_node(cloud, args["name"]), args["after"],
                                args["workers"], args["window"])
    return {"maintenance": maintenance.upcoming(find_node(cloud, args["name"])),
            "workers": plan["workers"]}


def _unhealthy(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    from podctl.fake.vm import maintenance

    node = find_node(cloud, args["name"])
    if args["worker"] is not None and not 0 <= args["worker"] < int(node.get("_hosts", 1)):
        raise invalid(f"{node['name']} has workers 0 to {int(node.get('_hosts', 1)) - 1}, "
                      f"not {args['worker']}")
    return maintenance.set_health(cloud.world, node, args["health"], args["symptom"], args["worker"])


def host_faults(cloud: FakeCloud) -> Any:
    """The slow and crash-looping hosts (host_faults.py), made on first use."""
    from podctl.fake.vm.host_faults import HostFaults

    if cloud.hosts is None:
        raise precondition("the fake cloud's hosts are not running")
    if cloud.host_faults is None or cloud.host_faults.manager is not cloud.hosts:
        cloud.host_faults = HostFaults(cloud.hosts)
    return cloud.host_faults


def _slow(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    sick = host_faults(cloud)
    on_host(cloud, args, lambda hosts, node, worker: sick.slow(node, worker, args["factor"]))
    return {"slow": sick.describe()}


def _crash_loop(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    sick = host_faults(cloud)
    if args["off"]:
        sick.clear("crash-loop", find_node(cloud, args["name"])["name"], args["worker"])
    else:
        sig = signal.SIGSEGV if args["signal"] == "SEGV" else signal.SIGKILL
        on_host(cloud, args, lambda hosts, node, worker: sick.crash_loop(node, worker, args["after"], sig))
    return {"crash_loop": sick.describe()}


def _os_login(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    from podctl.fake.api import access, oslogin

    project = args["project"] or cloud.project
    # Google's projects.setCommonInstanceMetadata on a project nobody has: refused, not made up
    access.require_project(cloud.world.projects, cloud.project, project,
                           "compute.projects.setCommonInstanceMetadata")
    return oslogin.set_enabled(cloud.world, project, not args["off"])


def _no_ssh(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    node = find_node(cloud, args["name"])
    if args["off"]:
        node.pop("_no_ssh", None)
    else:
        node["_no_ssh"] = True  # on the world's node: it outlives its hosts (maintenance)
    if cloud.hosts is not None:
        cloud.hosts.apply_no_ssh(node["name"])
    return {"name": node["name"], "no_ssh": not args["off"]}


def _reboot(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    node = find_node(cloud, args["name"])
    if cloud.hosts is None:
        raise precondition("the fake cloud's hosts are not running")
    if args["worker"] is not None and not 0 <= args["worker"] < int(node.get("_hosts", 1)):
        raise invalid(f"{node['name']} has workers 0 to {int(node.get('_hosts', 1)) - 1}, "
                      f"not {args['worker']}")
    try:
        workers = cloud.hosts.reboot(node["name"], args["worker"])
    except LookupError as e:
        raise precondition(str(e.args[0])) from e
    return {"rebooted": workers}


DISK_FULL_FILE = ".fake-disk-full"  # tpu_vm/sitecustomize.py's: the host's disk is full while it exists


def _disk_full(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    def act(hosts: Any, node: str, worker: int) -> str:
        marker = hosts.host(node, worker).root / DISK_FULL_FILE
        if args["off"]:
            marker.unlink(missing_ok=True)
        else:
            marker.touch()
        return node

    return {"name": on_host(cloud, args, act), "worker": args["worker"], "disk_full": not args["off"]}


# ---- the table ------------------------------------------------------------------------

NAME = Arg("name", "node", "A node (or, where it says so, a queued resource): full name or id.",
           metavar="NAME")
WORKER = Arg("worker", "worker", "The host's index (0, 1, ...).", metavar="WORKER")
ZONE = Arg("zone", "text", "Default: the fake cloud's zone.", default=None, flag="--zone", metavar="Z")


def _preempt_said(a: dict[str, Any]) -> str:
    when = f"in {a['after']:g} simulated s" if a["after"] else "now"
    notice = f"{a['grace']:g} s" if a["grace"] is not None else "the default"
    return f"{a['name']}: preempted {when}; its processes get SIGTERM, then SIGKILL after {notice} grace"


def _seconds_said(what: str) -> Callable[[dict[str, Any], dict[str, Any]], str]:
    return lambda a, r: f"{what}: {a['seconds']:g} s" if a["seconds"] else f"{what}: none"


FAULTS: tuple[Fault, ...] = (
    Fault("preempt", "spot preemption, with notice: hosts stop taking SSH, processes get SIGTERM",
          (NAME, Arg("after", "seconds", "Simulated seconds (or 90s, 10m) from now; default now.",
                     default=0.0, flag="--after", metavar="T"),
           Arg("grace", "seconds", "Wall-clock seconds between SIGTERM and SIGKILL "
               "(default: the fake's, 10 s).", default=None, flag="--grace", metavar="S")),
          _preempt,
          lambda a, r: _preempt_said(a)),
    Fault("kill-host", "a host's processes die (a crash, an OOM kill); the host stays up",
          (NAME, WORKER, Arg("signal", "choice", "KILL (a crash, an OOM kill; default) or TERM.",
                             default="KILL", choices=("TERM", "KILL"), flag="--signal",
                             metavar="TERM|KILL")),
          _kill_host,
          lambda a, r: (f"{a['name']} worker {a['worker']}: SIG{a['signal']} to {r['signalled']} "
                        "process(es); the host stays up")),
    Fault("cut-ssh", "a host's SSH connections drop mid-command; new ones work",
          (NAME, WORKER), _cut_ssh,
          lambda a, r: f"{a['name']} worker {a['worker']}: {r['connections_cut']} SSH connection(s) cut"),
    Fault("drop-host", "a host vanishes, its processes killed; the node stays READY",
          (NAME, WORKER), _drop_host,
          lambda a, r: f"{a['name']} worker {a['worker']}: dropped (its processes killed, no SSH)"),
    Fault("gcs-outage", "GCS answers 503 to everything for SECONDS (wall clock); 0 ends it",
          (Arg("seconds", "seconds", "How long (2.5, 90s, 10m).", metavar="SECONDS"),),
          _gcs_outage,
          lambda a, r: (f"GCS: 503 to every request for {a['seconds']:g} s" if a["seconds"]
                        else "GCS: outage ended")),
    Fault("fail-calls", "the next COUNT Cloud TPU API calls fail with CODE (0 clears)",
          (Arg("count", "count", "How many calls.", metavar="COUNT"),
           Arg("code", "choice", "The answer: 429, 503, 403, drop (reset, not done) or lose "
               "(done, answer lost).", default="503", choices=_CODES, flag="--code",
               metavar="429|503|drop"),
           Arg("call", "text", "Only calls of this method, e.g. nodes.create (default: any call).",
               default=None, flag="--call", metavar="METHOD")),
          _fail_calls,
          lambda a, r: (f"the next {a['count']} Cloud TPU call(s)"
                        + (f" of {a['call']}" if a["call"] else "") + f" fail with {a['code']}")),
    Fault("stockout", "no capacity left in the zone: new slices fail (error 8), queued ones wait",
          (ZONE,), lambda cloud, a: _capacity(cloud, {**a, "chips": 0}),
          lambda a, r: f"{r['zone']}: stocked out (capacity 0 chips)"),
    Fault("capacity", "chips free for TPUs in the zone; `unlimited` restores the default (a whole pod)",
          (Arg("chips", "chips", "Chips, or `unlimited`.", metavar="CHIPS"), ZONE), _capacity,
          lambda a, r: f"{r['zone']}: capacity {r['capacity']} chips, {r['free']} free"),
    Fault("latency", "SECONDS added to every Cloud TPU API call",
          (Arg("seconds", "seconds", "Seconds per call (0 ends it).", metavar="SECONDS"),),
          _latency, _seconds_said("Cloud TPU API latency")),
    Fault("host-latency", "SECONDS before each SSH connection to a fake host is accepted",
          (Arg("seconds", "seconds", "Seconds per connection (0 ends it).", metavar="SECONDS"),),
          _host_latency, _seconds_said("SSH connection latency")),
)
FAULTS += (
    Fault("maintenance", "host maintenance: announced in the hosts' metadata, then the hosts go "
          "down for WINDOW (health UNHEALTHY_MAINTENANCE) and come back",
          (NAME, Arg("after", "seconds", "Simulated seconds (or 90s, 10m) until the window; "
                     "default 5m.", default=300.0, flag="--in", metavar="T"),
           Arg("workers", "workers", "The workers it names (0,1; default all).", default=None,
               flag="--workers", metavar="W,..."),
           Arg("window", "seconds", "How long the hosts are down (simulated; default 10m).",
               default=600.0, flag="--window", metavar="D")),
          _maintenance,
          lambda a, r: (f"{a['name']}: maintenance of worker(s) {','.join(map(str, r['workers']))} "
                        f"from {r['maintenance']['windowStartTime']} to "
                        f"{r['maintenance']['windowEndTime']}")),
    Fault("unhealthy", "a node's health (and a symptom) as Cloud TPU reports a sick host; "
          "--health HEALTHY clears it",
          (NAME, Arg("health", "choice", "The node's health.", default="UNHEALTHY_TENSORFLOW",
                     choices=("HEALTHY", "TIMEOUT", "UNHEALTHY_TENSORFLOW", "UNHEALTHY_MAINTENANCE"),
                     flag="--health", metavar="H"),
           Arg("symptom", "choice", "A symptom to add.", default=None,
               choices=("LOW_MEMORY", "OUT_OF_MEMORY", "EXECUTE_TIMED_OUT", "MESH_BUILD_FAIL",
                        "HBM_OUT_OF_MEMORY", "PROJECT_ABUSE"), flag="--symptom", metavar="S"),
           Arg("worker", "worker", "The worker the symptom names.", default=None, flag="--worker",
               metavar="W")),
          _unhealthy,
          lambda a, r: f"{a['name']}: health {r['health']}"
                       + "".join(f"; {s['symptomType']} on worker {s.get('workerId', '?')}"
                                 for s in r["symptoms"][-1:])),
    Fault("slow", "a host's processes run 1/FACTOR of the time (SIGSTOP/SIGCONT); --factor 1 "
          "ends it", (NAME, WORKER, Arg("factor", "factor", "How many times slower (default 3).",
                                         default=3.0, flag="--factor", metavar="F")),
          _slow, lambda a, r: (f"{a['name']} worker {a['worker']}: " + (
              f"{a['factor']:g}x slower" if a["factor"] > 1 else "full speed again"))),
    Fault("crash-loop", "a host's script crashes (SIGSEGV, as a runtime meeting bad hardware "
          "does) AFTER seconds of each start",
          (NAME, WORKER, Arg("after", "seconds", "Wall-clock seconds after each start (default 5).",
                             default=5.0, flag="--after", metavar="S"),
           Arg("signal", "choice", "SEGV (a crash; default) or KILL (an OOM kill).", default="SEGV",
               choices=("SEGV", "KILL"), flag="--signal", metavar="SEGV|KILL"),
           Arg("off", "choice", "yes: stop crash-looping.", default="", choices=("", "yes"),
               flag="--off", metavar="yes")),
          _crash_loop, lambda a, r: (f"{a['name']} worker {a['worker']}: " + (
              "crash loop ended" if a["off"] else
              f"its script gets SIG{a['signal']} {a['after']:g} s after each start"))),
)
FAULTS += (
    Fault("os-login", "OS Login for the project (metadata enable-oslogin=TRUE): hosts ignore "
          "ssh-keys and take keys imported through the OS Login API; --off turns it off",
          (Arg("off", "flag", "Turn it off (enable-oslogin removed from project metadata).",
               default=False, flag="--off"),
           Arg("project", "text", "Default: the fake cloud's project.", default=None, flag="--project",
               metavar="P")),
          _os_login, lambda a, r: f"project {r['project']}: OS Login " + (
              "off; hosts take ssh-keys metadata again" if a["off"] else
              "on (enable-oslogin=TRUE); hosts take only keys imported through OS Login")),
)
FAULTS += (
    Fault("no-ssh", "a node's hosts take no SSH connection (port 22 closed: refused), as under "
          "OS Login without a key or with internal IPs only; it outlives maintenance; --off ends it",
          (NAME, Arg("off", "flag", "SSH again.", default=False, flag="--off")),
          _no_ssh, lambda a, r: f"{r['name']}: " + (
              "SSH answers again" if a["off"] else "no SSH (connections refused) until --off")),
    Fault("reboot", "a node's hosts (or one: --worker) reboot: SSH connections cut, processes "
          "killed, the startup-script runs again (a maintenance without the notice)",
          (NAME, Arg("worker", "worker", "Only this worker (default: every host).", default=None,
                     flag="--worker", metavar="N")),
          _reboot, lambda a, r: f"{a['name']}: rebooted worker(s) "
                                f"{','.join(map(str, r['rebooted'])) or 'none'}"),
)
FAULTS += (
    Fault("disk-full", "a host's disk is full: its Pythons' file creations and mkdirs under "
          "the host fail with ENOSPC; --off frees it",
          (NAME, WORKER, Arg("off", "flag", "Free the disk again.", default=False, flag="--off")),
          _disk_full, lambda a, r: f"{a['name']} worker {a['worker']}: " + (
              "disk has room again" if a["off"] else "disk full (No space left on device)")),
)


def _no_zstd(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    node = find_node(cloud, args["name"])
    hosts = int(node.get("_hosts", 1))
    if args["worker"] is not None and not 0 <= args["worker"] < hosts:
        raise invalid(f"{node['name']} has workers 0 to {hosts - 1}, not {args['worker']}")
    chosen = set(range(hosts)) if args["worker"] is None else {args["worker"]}
    now = set(node.get("_no_zstd", ()))
    # on the world's node: the image outlives its hosts (maintenance, reboot)
    node["_no_zstd"] = sorted(now - chosen if args["off"] else now | chosen)
    return {"name": node["name"], "no_zstd": node["_no_zstd"]}


FAULTS += (
    Fault("no-zstd", "a node's hosts (or one: --worker) have an image without Ubuntu's package "
          "zstd: no zstd on their PATH from the next command on; --off gives it back",
          (NAME, Arg("worker", "worker", "Only this worker (default: every host).", default=None,
                     flag="--worker", metavar="N"),
           Arg("off", "flag", "zstd again.", default=False, flag="--off")),
          _no_zstd, lambda a, r: f"{r['name']}: no zstd on worker(s) "
                                 f"{','.join(map(str, r['no_zstd'])) or 'none'}"),
)
def _topology_fail(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    from podctl.fake.api import compute_tpu

    compute_tpu.fail_topology(cloud.world, args["name"], args["why"])
    return {"name": args["name"]}


FAULTS += (
    Fault("topology-fail", "a Compute Engine MIG's accelerator topology cannot form: its workload "
          "policy's topology FAILED, its VMs never come up",
          (Arg("name", "text", "The MIG (the slice's name).", metavar="NAME"),
           Arg("why", "text", "The reason said.", default="the topology could not be formed",
               flag="--why", metavar="TEXT")),
          _topology_fail, lambda a, r: f"{a['name']}: accelerator topology FAILED"),
)


def _mig_error(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    cloud.world.compute_insert_errors.append(args["code"])
    return {"pending": list(cloud.world.compute_insert_errors)}


FAULTS += (
    Fault("mig-error", "the next Compute Engine MIG insert's operation ends DONE with CODE in "
          "its error.errors[] (no MIG is made)",
          (Arg("code", "choice", "The error's code.", default="QUOTA_EXCEEDED",
               choices=("QUOTA_EXCEEDED", "ZONE_RESOURCE_POOL_EXHAUSTED", "RESOURCE_NOT_FOUND"),
               flag="--code", metavar="CODE"),),
          _mig_error, lambda a, r: f"the next MIG insert fails with {a['code']}"),
)


def _preempt_vm(cloud: FakeCloud, args: dict[str, Any]) -> dict[str, Any]:
    """One VM of a MIG preempted: its processes killed at once (a spot VM's notice is not
    modelled), the MIG recreating it for `timings.node_create`; it boots again (its
    startup-script) under the same name and address."""
    from podctl.fake.api import compute_tpu

    node = find_node(cloud, args["name"])
    if node.get("_api") != "compute":
        raise invalid(f"{node['name']} is no Compute Engine MIG; use `preempt` for a Cloud TPU node")
    if cloud.hosts is None or node.get("state") != "READY":
        raise precondition(f"{node['name']}'s VMs are not running")
    worker = int(args["worker"])
    if not 0 <= worker < int(node.get("_hosts", 1)):
        raise invalid(f"{node['name']} has workers 0 to {int(node.get('_hosts', 1)) - 1}, not {worker}")
    cloud.hosts.reboot(node["name"], worker)
    compute_tpu.recreate(cloud.world, node["name"], worker)
    return {"name": node["name"], "worker": worker}


FAULTS += (
    Fault("preempt-vm", "one VM of a Compute Engine MIG is preempted: its processes die, the MIG "
          "recreates it (RECREATING, then RUNNING again under the same name)",
          (NAME, WORKER), _preempt_vm, lambda a, r: f"{a['name']} worker {a['worker']}: preempted; "
                                                     "the MIG recreates it"),
)


BY_NAME: dict[str, Fault] = {fault.name: fault for fault in FAULTS}


def fault(name: str) -> Fault:
    """The fault named NAME (its CLI name, or FakeAdmin's method name); KeyError if none."""
    return BY_NAME[name.replace("_", "-")]


def listing() -> list[dict[str, Any]]:
    """The table as JSON (GET /admin/faults)."""
    return [{"name": f.name, "summary": f.summary,
             "args": [{"name": a.name, "kind": a.kind, "help": a.help, "flag": a.flag or None,
                       "required": a.positional} for a in f.args]} for f in FAULTS]
