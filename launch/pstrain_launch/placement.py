"""Where every process of a job runs: hosts from a hostfile or -H, PS shards and workers on them.

Pure functions (no I/O besides reading the hostfile's text), so the rules are unit-tested
(tests/launch/test_placement.py) and the same placement is printed, dry-run and started.

Rules (docs/cluster.md):
  * PS shard s runs on hosts[s % H], or on ps_hosts[s % len(ps_hosts)] when --ps-hosts-list
    names hosts. PS shards take no slot: slots count workers.
  * Workers fill the slots in host order: host 0's slots, then host 1's, ... With
    --oversubscribe a job with more workers than slots goes round again.
  * A process's local rank is its index among the processes of its role on its host; a worker's
    local rank selects its GPU (--device auto), or its entry of --devices.
  * --devices with K entries: every host runs K workers (its slots become K), local rank r on
    the r-th device.
  * PS s listens on base_port + s; in allreduce mode worker 0's rendezvous is on base_port.
"""

import re
from dataclasses import dataclass, field, replace


class PlacementError(Exception):
    """A hostfile, host list or placement that cannot work; the message says why."""


@dataclass(frozen=True)
class Host:
    name: str
    slots: int = 1
    stated: bool = field(default=False, compare=False)  # slots given (slots=N, host:N)


@dataclass(frozen=True)
class Proc:
    name: str        # ps0, w3
    role: str        # "ps" or "worker"
    index: int       # shard or worker index
    host: str        # host name as given by the user ("localhost" for the local launcher)
    local_rank: int  # index among the same role's processes on that host
    port: int = 0    # PS: TCP port (0 = any free port, local launcher only)
    device: str = ""  # worker: its --devices entry ("" = the job's --device)

    @property
    def label(self):
        """The name used in output prefixes and messages: w3@node2 (plain w3 on the local host)."""
        return self.name if self.host == "localhost" else f"{self.name}@{self.host}"


_HOST_RE = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")


def _check_host_name(name, where):
    if not _HOST_RE.match(name):
        raise PlacementError(f"{where}: '{name}' is not a host name or address")


def _positive_int(text, where, shown):
    if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
        raise PlacementError(f"{where}: '{shown}' is not a positive integer")
    return int(text)


def _hostfile_line(words, where):
    """(name, slots, slots stated) of one hostfile line."""
    name, slots = words[0], None
    _check_host_name(name, where)
    for word in words[1:]:
        key, _, value = word.partition("=")
        if key in ("slots", "slot") and value:
            slots = _positive_int(value, where, word)
        elif key in ("max_slots", "max-slots") and value:
            _positive_int(value, where, word)  # accepted; slots is what is used
        else:
            raise PlacementError(f"{where}: unknown field '{word}' (expected slots=N)")
    return name, slots or 1, slots is not None


def parse_hostfile(text, path="hostfile"):
    """Open MPI's hostfile format: `host [slots=N] [max_slots=M]` per line, '#' comments.

    A host named twice adds its slots (as Open MPI does)."""
    lines = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words:
            entry = _hostfile_line(words, f"{path}:{number}")
            lines.setdefault(entry[0], []).append(entry[1:])
    if not lines:
        raise PlacementError(f"{path}: no hosts (lines are 'host [slots=N]')")
    return [Host(name, sum(slots for slots, _ in parts), len(parts) > 1 or parts[0][1])
            for name, parts in lines.items()]


def parse_host_list(text):
    """-H host1:2,host2:2 (slots after the colon, default 1; an IPv6 address in brackets)."""
    hosts = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, slots, stated = item, 1, False
        if ":" in item and not (item.startswith("[") and item.endswith("]")):
            name, _, count = item.rpartition(":")
            slots, stated = _positive_int(count, "-H", item), True
        _check_host_name(name, "-H")
        slots_before, stated_before = hosts.get(name, (0, False))
        hosts[name] = (slots_before + slots, stated or stated_before or slots_before > 0)
    if not hosts:
        raise PlacementError("-H: no hosts given (e.g. -H node1:2,node2:2)")
    return [Host(name, slots, stated=stated) for name, (slots, stated) in hosts.items()]


def one_worker_per_device(hosts, count):
    """--devices with `count` entries: every host gets `count` slots. A host whose slots were
    stated (slots=N, host:N) must have that many."""
    out = []
    for h in hosts:
        if h.stated and h.slots != count:
            raise PlacementError(f"{h.name} has {h.slots} slot(s) but --devices lists {count} device(s); with "
                                 "--devices every host runs one worker per device "
                                 f"(give {h.name} {count} slots, or none)")
        out.append(replace(h, slots=count))
    return out


def place(hosts, num_ps, num_workers, base_port=0, ps_hosts=None, oversubscribe=False, devices=()):
    """Returns the Proc of every PS shard (in shard order) then every worker (in index order);
    a worker of local rank r gets devices[r] (devices: one_worker_per_device's hosts)."""
    if not hosts:
        raise PlacementError("no hosts to place the job on")
    names = [h.name for h in hosts]
    ps_on = list(ps_hosts) if ps_hosts else names
    for name in ps_on:
        if name not in names:
            raise PlacementError(f"--ps-hosts-list: '{name}' is not one of the job's hosts ({', '.join(names)})")
    slots = sum(h.slots for h in hosts)
    if num_workers > slots and not oversubscribe:
        raise PlacementError(
            f"{num_workers} workers but the hosts have {slots} slot(s) "
            f"({', '.join(f'{h.name}:{h.slots}' for h in hosts)}); add slots or pass --oversubscribe")
    local = {}

    def next_local(role, host):
        rank = local.get((role, host), 0)
        local[(role, host)] = rank + 1
        return rank

    procs = []
    for s in range(num_ps):
        host = ps_on[s % len(ps_on)]
        port = base_port + s if base_port else 0
        procs.append(Proc(f"ps{s}", "ps", s, host, next_local("ps", host), port))
    seats = [h.name for h in hosts for _ in range(h.slots)]
    for i in range(num_workers):
        host = seats[i % len(seats)]
        rank = next_local("worker", host)
        device = devices[rank % len(devices)] if devices else ""
        procs.append(Proc(f"w{i}", "worker", i, host, rank, device=device))
    return procs


def describe(procs):
    """The placement as printed before anything starts: one line per process."""
    width = max(len(p.name) for p in procs)
    host_width = max(len(p.host) for p in procs)
    lines = []
    for p in procs:
        port = f"  port {p.port}" if p.port else ""
        device = f"  device {p.device}" if p.device else ""
        lines.append(f"{p.name:<{width}}  on {p.host:<{host_width}}  local rank {p.local_rank}{port}{device}")
    return lines
