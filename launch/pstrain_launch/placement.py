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
  * A hostfile's batch= gives the worker in each of a host's slots its samples per step; the
    job's --worker-batch list is theirs in worker order, the job's default for the others.
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
    batch: tuple = ()  # hostfile batch=: samples per step of each slot's worker (None: the job's default)
    stated: bool = field(default=False, compare=False)  # slots given (slots=, host:N, a batch= list)


@dataclass(frozen=True)
class Proc:
    name: str        # ps0, w3
    role: str        # "ps" or "worker"
    index: int       # shard or worker index
    host: str        # host name as given by the user ("localhost" for the local launcher)
    local_rank: int  # index among the same role's processes on that host
    port: int = 0    # PS: TCP port (0 = any free port, local launcher only)
    device: str = ""  # worker: its --devices entry ("" = the job's --device)
    batch: int = None  # worker: samples per step from batch= or --worker-batch (None = the job's)

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


def parse_batch_list(text, what):
    """'64,32' -> [64, 32]: samples per step, positive integers."""
    sizes = []
    for item in text.split(","):
        if not re.fullmatch(r"[0-9]+", item.strip()) or int(item) < 1:
            raise PlacementError(f"{what}: '{item}' is not a positive integer")
        sizes.append(int(item))
    return sizes


def _hostfile_line(words, where):
    """(name, slots, batch tuple or None, slots stated) of one hostfile line."""
    name, slots, batch = words[0], None, None
    _check_host_name(name, where)
    for word in words[1:]:
        key, _, value = word.partition("=")
        if key in ("slots", "slot") and value:
            slots = _positive_int(value, where, word)
        elif key in ("max_slots", "max-slots") and value:
            _positive_int(value, where, word)  # accepted; slots is what is used
        elif key == "batch" and value:
            batch = tuple(parse_batch_list(value, f"{where}: {word}"))
        else:
            raise PlacementError(f"{where}: unknown field '{word}' (expected slots=N or batch=B[,B...])")
    stated = slots is not None or (batch is not None and len(batch) > 1)
    if slots is None:
        slots = len(batch) if batch else 1
    if batch is not None and len(batch) == 1:
        batch *= slots
    elif batch is not None and len(batch) != slots:
        raise PlacementError(f"{where}: batch= lists {len(batch)} sizes for {slots} slot(s) "
                             "(give one per slot, or one for all)")
    return name, slots, batch, stated


def parse_hostfile(text, path="hostfile"):
    """Open MPI's hostfile format: `host [slots=N] [max_slots=M]` per line, '#' comments, and
    pstrain's `batch=B0,B1,...`: samples per step of the worker in each slot, in local-rank
    order (one value: every slot; a list without slots=: one slot per value).

    A host named twice adds its slots (as Open MPI does), and its batches in line order."""
    lines = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words:
            entry = _hostfile_line(words, f"{path}:{number}")
            lines.setdefault(entry[0], []).append(entry[1:])
    if not lines:
        raise PlacementError(f"{path}: no hosts (lines are 'host [slots=N] [batch=B,...]')")
    hosts = []
    for name, parts in lines.items():
        batch = ()
        if any(b for _, b, _ in parts):
            batch = tuple(size for slots, b, _ in parts for size in (b or (None,) * slots))
        stated = len(parts) > 1 or parts[0][2]
        hosts.append(Host(name, sum(slots for slots, _, _ in parts), batch, stated))
    return hosts


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
    stated (slots=N, host:N, a batch= list) must have that many; one batch= value fills them."""
    out = []
    for h in hosts:
        if h.stated and h.slots != count:
            raise PlacementError(f"{h.name} has {h.slots} slot(s) but --devices lists {count} device(s); with "
                                 "--devices every host runs one worker per device "
                                 f"(give {h.name} {count} slots, or none)")
        out.append(replace(h, slots=count, batch=h.batch if h.stated else h.batch * count))
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
    seats = [(h, slot) for h in hosts for slot in range(h.slots)]
    for i in range(num_workers):
        host, slot = seats[i % len(seats)]
        rank = next_local("worker", host.name)
        device = devices[rank % len(devices)] if devices else ""
        batch = host.batch[slot] if host.batch else None
        procs.append(Proc(f"w{i}", "worker", i, host.name, rank, device=device, batch=batch))
    return procs


def worker_batches(procs, default):
    """The job's --worker-batch list, in worker order, when batch= reached a worker (else None):
    workers on hosts without batch= get `default` (None: --batch-size auto, an error)."""
    workers = [p for p in procs if p.role == "worker"]
    if all(p.batch is None for p in workers):
        return None
    missing = sorted({p.host for p in workers if p.batch is None}, key=[p.host for p in workers].index)
    if missing and default is None:
        raise PlacementError(f"{', '.join(missing)} ha{'s' if len(missing) == 1 else 've'} no batch= in the hostfile "
                             "and --batch-size is auto: give every host batch=")
    return [default if p.batch is None else p.batch for p in workers]


def worker_cpus(mode, local, num_workers, cpus):
    """--cpu-bind: the CPU of each worker's training thread, in worker order (--bind-cpu), or []
    for none. auto binds on the local launcher when there are workers to keep apart (two or
    more) and every one gets a CPU of its own, worker i on the i-th of `cpus` (the CPUs the
    launcher may use); the PS stays free. Across hosts the launcher does not know the other
    hosts' CPUs: none there (srun's --cpu-bind and mpirun's --bind-to do it for their steps)."""
    if mode not in ("auto", "none"):
        raise PlacementError(f"--cpu-bind: '{mode}' is not auto or none")
    cpus = sorted(cpus)
    if mode == "none" or not local or num_workers < 2 or num_workers > len(cpus):
        return []
    return cpus[:num_workers]


def describe(procs):
    """The placement as printed before anything starts: one line per process."""
    width = max(len(p.name) for p in procs)
    host_width = max(len(p.host) for p in procs)
    device_width = max(len(p.device) for p in procs)
    lines = []
    for p in procs:
        port = f"  port {p.port}" if p.port else ""
        device = f"  device {p.device:<{device_width}}" if p.device else ""
        batch = f"  batch {p.batch}" if p.batch is not None else ""
        line = f"{p.name:<{width}}  on {p.host:<{host_width}}  local rank {p.local_rank}{port}{device}{batch}"
        lines.append(line.rstrip())
    return lines
