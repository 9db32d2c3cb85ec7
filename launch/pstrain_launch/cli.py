"""launch/launch.sh's core: the command line, the placement, the start order and supervision.

launch.sh installs and builds (launch/setup.sh) and then runs this module; see usage() and
docs/operations.md (one host), docs/cluster.md (several hosts).
"""

import fcntl
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from . import args, check, devices, jobstate, placement, plot, progress, status, steps
from .args import DEFAULT_BASE_PORT, UsageError
from .supervisor import Output, Supervisor, describe_status

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SETUP, EXIT_START = 0, 1, 2, 3, 4
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Environment variables a remote process gets from the launcher's environment (ssh passes none).
FORWARDED_ENV = ("PSTRAIN_LOG_LEVEL", "FASHION_MNIST_DIR", "XDG_CACHE_HOME", "PSTRAIN_CURVE_KEY_FILE")
# --dry-run's check: a port only known once bound (a local PS's) is given to the binaries as this.
STAND_IN_PORT = "65535"
# Seconds a process may stay stopped (SIGSTOP, a debugger) while the final checkpoint is awaited
# before the launcher gives up on it: the job cannot take a step while one of its processes is
# stopped, and the launcher is to exit promptly when signalled.
STOPPED_GIVE_UP_S = 2
# Seconds the plots at the end of a run may take (matplotlib's first import builds a font cache).
PLOT_TIMEOUT_S = 120


def usage():
    return args.parser(REPO, FORWARDED_ENV).format_help()


class RestartJob(Exception):
    """A PS shard died and the job can start again from its last complete checkpoint."""


class Stop(Exception):
    """Ends the run: everything is stopped, then the launcher exits with `code`."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def parse_args(argv):
    """(flags: argparse.Namespace, job flags after --); see args.parse."""
    return args.parse(argv, REPO, FORWARDED_ENV)


def config_value(key, path):
    """The value of `key = value` in a Boost.Program_options config file ('#' starts a comment)."""
    found = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0]
            if "=" in line:
                k, v = line.split("=", 1)
                if k.strip() == key and v.strip():
                    found = v.strip()
    return found


def is_loopback(host):
    """As the binaries' is_loopback (shared/net/curve.cc) for a bind address: 127.0.0.0/8, ::1,
    localhost; "" is the binaries' default, 127.0.0.1."""
    return host in ("", "localhost", "::1", "[::1]") or host.startswith("127.")


def config_switch(key, path):
    """Whether a bool switch (--curve, --insecure) is on in a Boost.Program_options config file."""
    return (config_value(key, path) or "").lower() in ("1", "true", "yes", "on")


def require_int(name, text, low, high=None):
    if not re.fullmatch(r"[0-9]+", str(text)) or int(text) < low or (high is not None and int(text) > high):
        raise UsageError(f"{name} must be an integer >= {low}{f' and <= {high}' if high is not None else ''}, got '{text}'")
    return int(text)


def job_flag(extra, name):
    """The value of --name in the job flags after --, if given."""
    value = None
    for i, arg in enumerate(extra):
        if arg == f"--{name}" and i + 1 < len(extra):
            value = extra[i + 1]
        elif arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value


def without_job_flag(extra, name):
    """The job flags without --name VALUE / --name=VALUE."""
    kept, skip = [], False
    for i, arg in enumerate(extra):
        if skip:
            skip = False
        elif arg == f"--{name}" and i + 1 < len(extra):
            skip = True
        elif not arg.startswith(f"--{name}="):
            kept.append(arg)
    return kept


def click_data(extra):
    """How the job flags say the data is click-through-rate data (a feature schema, Criteo's
    format by flag or by a .tsv/.txt name: docs/data.md), as words; "" when they do not."""
    if job_flag(extra, "schema"):
        return "--schema"
    if job_flag(extra, "data-format") == "criteo":
        return "--data-format criteo"
    train = job_flag(extra, "train-data") or ""
    if "," not in train and re.search(r"\.(tsv|txt)(\.gz)?$", train, re.I):
        return f"--train-data {train}"
    return ""


def default_config(extra, worker_cmd=False):
    """(config, note): the job's config when --config is not given: for a --worker-cmd job
    configs/worker_cmd.cfg (the cluster's counts only: a script's model must not get the
    Fashion-MNIST MLP's optimizer and schedule unasked); configs/ctr.cfg for click-through-rate
    data (the Fashion-MNIST MLP's defaults reach chance level on it), else configs/fashion_mlp.cfg;
    the note says which was chosen and why, or is ""."""
    if worker_cmd:
        return (os.path.join(REPO, "configs", "worker_cmd.cfg"),
                "--worker-cmd without --config: configs/worker_cmd.cfg (1 PS, 2 workers; the optimizer, learning "
                "rate and schedule are the binaries' defaults unless the job flags give them)")
    why = click_data(extra)
    if why:
        return (os.path.join(REPO, "configs", "ctr.cfg"),
                f"click-through-rate data ({why}): the job of configs/ctr.cfg (embedding tables on the PS; "
                "--config FILE chooses another)")
    return os.path.join(REPO, "configs", "fashion_mlp.cfg"), ""


class Settings:
    """Everything the run needs, resolved from flags, the config file and the environment."""

    def __init__(self, flags, extra):
        self.extra = extra
        self.dry_run = flags.dry_run
        config, self.config_note = (flags.config, "") if flags.config else default_config(
            extra, flags.worker_cmd is not None)
        if not os.path.isfile(config) and not os.path.isabs(config) and os.path.isfile(os.path.join(REPO, config)):
            config = os.path.join(REPO, config)
        if not os.path.isfile(config):
            raise UsageError(f"config file not found: {config}")
        self.config = os.path.abspath(config)
        build_dir = os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(REPO, "build")
        self.ps_bin = os.environ.get("PSTRAIN_PS_BIN") or os.path.join(build_dir, "pstrain-ps")
        self.worker_bin = os.environ.get("PSTRAIN_WORKER_BIN") or os.path.join(build_dir, "pstrain-worker")
        self.keygen_bin = os.environ.get("PSTRAIN_KEYGEN_BIN") or os.path.join(build_dir, "pstrain-keygen")
        self.launcher = self._launcher(flags)
        # The job as the binaries resolve it (--check-config --json): its mode, hybrid mode and
        # counts by their rules, the config file read by their parser. None: see resolved_job.
        counts = [a for flag, value in (("--num-ps", flags.num_ps), ("--num-workers", flags.num_workers))
                  if value is not None for a in (flag, str(value))]
        self.job = check.resolved_job(self.ps_bin, self.config, extra + counts, check.environment(self.launcher))
        self.mode = self.job_value("mode", "mode") or "sync"
        self.num_ps = require_int("--num-ps", flags.num_ps or self.job_value("num_ps", "num-ps") or 1, 1)
        self.num_workers = require_int("--num-workers",
                                       flags.num_workers or self.job_value("num_workers", "num-workers") or 1, 1)
        if self.job is not None:
            self.hybrid = self.job["hybrid"]  # also where the tables come from --model "embedding D, ..."
        else:  # the binaries' rule (shared/config/job_topology.cc), on the flag and config key alone
            embedding_dim = job_flag(extra, "embedding-dim") or config_value("embedding-dim", self.config) or "0"
            self.hybrid = self.mode == "allreduce" and embedding_dim.strip() not in ("", "0")
        if self.mode == "allreduce" and not self.hybrid:
            self.num_ps = 0  # the workers all-reduce among themselves: no PS
        self.transport = flags.transport
        if self.transport not in ("ipc", "tcp"):
            raise UsageError(f"--transport: '{self.transport}' is not ipc or tcp")
        self.hosts = self._hosts(flags)
        self.devices = self._devices(flags)
        remote = self.launcher != "local"
        base_port = flags.base_port
        self.base_port = require_int("--base-port", base_port, 1, 65536 - max(self.num_ps, 1)) if base_port else (
            DEFAULT_BASE_PORT if remote else 0)
        # allreduce's rendezvous: base_port, or in hybrid mode the port after the PS shards' ports
        self.ring_port = self.base_port + self.num_ps if self.hybrid and self.base_port else self.base_port
        loopback = all(h.name in ("localhost", "127.0.0.1") for h in self.hosts)
        self.bind = flags.bind or ("127.0.0.1" if remote and loopback else "0.0.0.0" if remote else "")
        # CURVE (docs/security.md) by one rule for every process of the job, decided here once: on
        # when the processes bind off loopback (the PS shards; in allreduce the workers' ring too),
        # unless the job says --insecure. Each binary's own default looks at its own addresses
        # only: a PS bound to 0.0.0.0 turns CURVE on, while the workers reaching it on this host
        # over ipc:// or 127.0.0.1 would not, and none could register. So every process gets --curve.
        self.insecure = "--insecure" in extra or (self.job["insecure"] if self.job is not None
                                                   else config_switch("insecure", self.config))
        binds = job_flag(extra, "bind") or self.bind or self.job_value("bind", "bind") or ""
        self.curve = not self.insecure and not is_loopback(binds)
        self.security_flags = ["--curve"] if self.curve and "--curve" not in extra else []
        self.oversubscribe = flags.oversubscribe
        self.max_restarts = require_int("--max-restarts", flags.max_restarts, 0)
        resume = flags.resume
        if resume and not any(a == "--resume" or a.startswith("--resume=") for a in self.extra):
            self.extra = self.extra + ["--resume=auto" if resume == "auto" else "--resume"]
        self.checkpointing = bool(self.job_value("checkpoint_dir", "checkpoint-dir"))
        if flags.resume and not self.checkpointing:
            raise UsageError("--resume needs the job's --checkpoint-dir (after --, or in the config file)")
        self.checkpoint_grace = require_int("PSTRAIN_CHECKPOINT_GRACE",
                                            os.environ.get("PSTRAIN_CHECKPOINT_GRACE", "60"), 1)
        if self.max_restarts and self.mode != "sync" and not self.hybrid:
            raise UsageError("--max-restarts needs --mode sync (the PS takes the replacement into its barrier), or "
                             "hybrid mode (--mode allreduce with --embedding-dim) with --checkpoint-dir")
        if self.max_restarts and self.hybrid and not self.checkpointing:
            raise UsageError("--max-restarts in hybrid mode restarts the whole job from its last complete checkpoint "
                             "(the workers' ring cannot take a replacement in): it needs the job's --checkpoint-dir")
        if self.max_restarts and self.launcher not in ("local", "ssh"):
            raise UsageError(f"--max-restarts works with the local and ssh launchers, not {self.launcher} "
                             "(a step's ranks cannot be restarted one by one)")
        self.ps_hosts_list = [h for h in (flags.ps_hosts_list or "").split(",") if h]
        self.remote_dir = flags.remote_dir
        self.ssh = shlex.split(os.environ.get("PSTRAIN_SSH", "ssh")) + ["-o", "BatchMode=yes"]
        for option in flags.ssh_option:
            self.ssh += ["-o", option]
        self.start_timeout = require_int("PSTRAIN_START_TIMEOUT", os.environ.get("PSTRAIN_START_TIMEOUT", "60"), 1)
        self.ps_exit_timeout = require_int("PSTRAIN_PS_EXIT_TIMEOUT", os.environ.get("PSTRAIN_PS_EXIT_TIMEOUT", "30"), 0)
        self.stop_grace = require_int("PSTRAIN_STOP_GRACE", os.environ.get("PSTRAIN_STOP_GRACE", "5"), 0)
        # --worker-cmd: the workers are that command (a Python script on the package in
        # <build>/python, docs/python.md), given the binary's flags; the binary still checks them.
        self.worker_cmd = shlex.split(flags.worker_cmd or "")
        if flags.worker_cmd is not None and not self.worker_cmd:
            raise UsageError("--worker-cmd is empty")
        self.python_path = os.path.join(build_dir, "python")
        self.run_dir = flags.run_dir or os.path.join(REPO, "runs", time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
        try:
            self.procs = placement.place(self.hosts, self.num_ps, self.num_workers, self.base_port,
                                         self.ps_hosts_list, self.oversubscribe or self.launcher == "local",
                                         self.devices)
        except placement.PlacementError as e:
            raise UsageError(str(e)) from e
        self.worker_batch = self._worker_batch(flags)
        self.metrics_flag = self.job_value("metrics_file", "metrics-file")
        self.progress = self._progress(flags.progress)
        try:
            own = (self.job["bind_cpu"] >= 0 if self.job is not None
                   else job_flag(self.extra, "bind-cpu") is not None or config_value("bind-cpu", self.config) is not None)
            self.worker_cpus = [] if own else placement.worker_cpus(
                flags.cpu_bind, self.launcher == "local", self.num_workers, os.sched_getaffinity(0))
        except placement.PlacementError as e:
            raise UsageError(str(e)) from e

    def job_value(self, key, name):
        """The resolved job's `key` ("" read as not given); without one (self.job None), the job
        flag --name after --, else the config file's `name = value`."""
        if self.job is not None:
            value = self.job.get(key)
            return None if value == "" else value
        return job_flag(self.extra, name) or config_value(name, self.config)

    def _progress(self, mode):
        """--progress: True for the live status line (bar mode), False for today's lines."""
        if mode not in ("auto", "bar", "lines"):
            raise UsageError(f"--progress: '{mode}' is not auto, bar or lines")
        if mode == "lines":
            return False
        why_not = ("the chief's metrics file is on its own host (--launcher " + self.launcher + ")"
                   if self.launcher != "local" else "the job says --metrics-file none" if self.metrics_flag == "none"
                   else None)
        if mode == "auto":
            return why_not is None and sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
        if why_not:
            raise UsageError(f"--progress bar reads the chief's metrics file, but {why_not}; "
                             "use --progress lines (or auto)")
        return True

    def metrics_path(self):
        """The chief's metrics file as this host sees it (a relative --metrics-file is from the
        launcher's directory, which local processes share), or None for --metrics-file none."""
        if self.metrics_flag == "none":
            return None
        return os.path.abspath(self.metrics_flag) if self.metrics_flag else os.path.join(self.run_dir, "metrics.jsonl")

    def _devices(self, flags):
        """--devices: every host runs one worker per entry, so the number of workers follows."""
        if flags.devices is None:
            return []
        try:
            listed = devices.parse(flags.devices)
            devices.check_visible(listed, os.environ.get("CUDA_VISIBLE_DEVICES"))
            self.hosts = placement.one_worker_per_device(self.hosts, len(listed))
        except placement.PlacementError as e:
            raise UsageError(str(e)) from e
        if job_flag(self.extra, "device") is not None:
            raise UsageError("--devices gives every worker its --device; drop --device from the job flags")
        count = len(listed) * len(self.hosts)
        if flags.num_workers is not None and require_int("--num-workers", flags.num_workers, 1) != count:
            where = f" on each of {len(self.hosts)} hosts" if len(self.hosts) > 1 else ""
            raise UsageError(f"--num-workers {flags.num_workers}, but --devices starts one worker per device: "
                             f"{len(listed)} device(s){where} make {count} workers (drop --num-workers)")
        self.num_workers = count
        return listed

    def _worker_batch(self, flags):
        """The --worker-batch list every process gets (None: none): the command line's, or the
        hostfile's batch= in worker order; also on the procs, for the printed placement."""
        given, after = flags.worker_batch, job_flag(self.extra, "worker-batch")
        if given is not None and after is not None:
            raise UsageError("--worker-batch is given twice, before and after --")
        text = given if given is not None else after
        in_hostfile = any(h.batch for h in self.hosts)
        if text is not None and in_hostfile:
            raise UsageError("--worker-batch and batch= in the hostfile both set the workers' batches; give one")
        if text is None and not in_hostfile:
            return None
        global_batch = self.job_value("global_batch", "global-batch")
        if global_batch not in (None, "0", 0):
            raise UsageError(f"{'--worker-batch' if text is not None else 'batch= in the hostfile'} and "
                             "--global-batch both set the batch; give one")
        try:
            sizes = (placement.parse_batch_list(text, "--worker-batch") if text is not None
                     else placement.worker_batches(self.procs, self._default_share()))
        except placement.PlacementError as e:
            raise UsageError(str(e)) from e
        if sizes is None:
            return None  # no worker landed on a host with batch=
        if len(sizes) != self.num_workers:
            raise UsageError(f"--worker-batch gives {len(sizes)} batch size(s) for {self.num_workers} workers")
        if text is None:  # built here; a numeric --batch-size is in the list now
            if job_flag(self.extra, "batch-size") != "auto":
                self.extra = without_job_flag(self.extra, "batch-size")
            self.extra = self.extra + ["--worker-batch", ",".join(map(str, sizes))]
        elif given is not None:
            self.extra = self.extra + ["--worker-batch", given]
        self.procs = [replace(p, batch=sizes[p.index]) if p.role == "worker" else p for p in self.procs]
        return sizes

    def _default_share(self):
        """Samples per step of a worker on a host without batch=: batch-size x accum-steps (None:
        --batch-size auto)."""
        if self.job is not None and "batch_size" in self.job:
            return None if self.job["batch_auto"] else self.job["batch_size"] * self.job["accum_steps"]
        batch = job_flag(self.extra, "batch-size") or config_value("batch-size", self.config) or "64"
        if batch == "auto":
            return None
        accum = job_flag(self.extra, "accum-steps") or config_value("accum-steps", self.config) or "1"
        return require_int("--batch-size", batch, 1) * require_int("--accum-steps", accum, 1)

    def forwarded_env(self):
        """Names of our variables that processes on other hosts get: FORWARDED_ENV's that are
        set, and with --devices CUDA_VISIBLE_DEVICES (the devices are numbered by it)."""
        names = [k for k in FORWARDED_ENV if os.environ.get(k)]
        if self.devices and "CUDA_VISIBLE_DEVICES" in os.environ:
            names.append("CUDA_VISIBLE_DEVICES")
        return names

    def _hosts(self, flags):
        try:
            if self.launcher == "slurm":
                return steps.slurm_hosts()
            if flags.hostfile is not None and flags.hosts is not None:
                raise UsageError("give either --hostfile or -H, not both")
            if flags.hostfile is not None:
                path = flags.hostfile
                try:
                    with open(path, encoding="utf-8") as f:
                        return placement.parse_hostfile(f.read(), path)
                except OSError as e:
                    raise UsageError(f"--hostfile: cannot read {path}: {e.strerror}") from e
            if flags.hosts is not None:
                return placement.parse_host_list(flags.hosts)
        except placement.PlacementError as e:
            raise UsageError(str(e)) from e
        return [placement.Host("localhost", 1 if self.launcher == "local" else self.num_workers)]

    def _launcher(self, flags):
        launcher = flags.launcher
        if launcher not in ("auto", "local", "ssh", "slurm", "mpirun"):
            raise UsageError(f"--launcher: '{launcher}' is not one of auto, local, ssh, slurm, mpirun")
        given = flags.hostfile is not None or flags.hosts is not None
        if launcher == "auto":
            launcher = "ssh" if given else "slurm" if os.environ.get("SLURM_JOB_ID") else "local"
        if launcher == "slurm" and given:
            raise UsageError("--launcher slurm places the job on its allocation's nodes; drop --hostfile / -H")
        if launcher == "ssh" and not given:
            raise UsageError("--launcher ssh needs --hostfile FILE or -H host1,host2")
        if launcher == "local" and given:
            raise UsageError("--hostfile / -H name other hosts; use --launcher ssh (or auto)")
        return launcher

    def remote_path(self, path):
        """A path as seen on the other hosts (--remote-dir replaces this checkout's path)."""
        if self.remote_dir and (path == REPO or path.startswith(REPO + os.sep)):
            return os.path.join(self.remote_dir, os.path.relpath(path, REPO))
        return path


class Run:
    """One job: starts, supervises and stops its processes."""

    def __init__(self, settings, output):
        self.s = settings
        self.out = output
        self.sup = Supervisor(output, settings.run_dir, settings.stop_grace)
        self.stopping = False
        self.step = None  # slurm / mpirun: the steps.Step running every process
        self.commands = {}  # name -> (proc, command) of every process started
        self.restarts = 0
        self.final = None  # (signal name, exit code, deadline) while the final checkpoint is written
        self.stopped_since = {}  # name -> when it was first seen stopped while the final checkpoint is awaited
        self.secret = ""  # the job's CURVE secret key, for processes on other hosts
        self.received = None  # (name, exit code) of a signal to act on
        self.state = None  # RUNDIR/job.json (jobstate.JobState), once main() runs
        self.bar = None  # progress.ProgressBar in bar mode (--progress), once main() runs

    # -------------------------------------------------------------- commands

    def ipc_name(self, shard):
        """The Unix-domain socket of PS `shard`: abstract (no file), unique while we live."""
        return f"@pstrain-{os.getpid()}-ps{shard}"

    def ps_command(self, proc):
        s = self.s
        remote = s.launcher != "local"
        cmd = [s.remote_path(s.ps_bin) if remote else s.ps_bin, "--config", s.remote_path(s.config) if remote else s.config,
               *s.security_flags, "--index", str(proc.index), "--num-ps", str(s.num_ps),
               "--num-workers", str(s.num_workers), "--port", str(proc.port)]
        if not remote:
            cmd += ["--port-file", os.path.join(s.run_dir, f"{proc.name}.addr")]
        if s.bind:
            cmd += ["--bind", s.bind]
        if not remote and s.transport == "ipc":
            cmd += ["--ipc", self.ipc_name(proc.index)]
        if s.max_restarts:
            cmd.append("--allow-rejoin")
        # The shards on this host share its memory (--max-shard-mib's default, ps/shard_memory.h).
        if job_flag(s.extra, "shards-on-host") is None:
            cmd += ["--shards-on-host", str(sum(1 for p in s.procs if p.role == "ps" and p.host == proc.host))]
        return cmd + s.extra

    def worker_program(self):
        """The words that start a worker: the binary, or --worker-cmd's. On other hosts (ssh, srun,
        mpirun: none passes our PYTHONPATH) they start with env PYTHONPATH=<build>/python as
        there, and paths in this checkout are --remote-dir's."""
        s = self.s
        if s.launcher == "local":
            return s.worker_cmd or [s.worker_bin]
        if not s.worker_cmd:
            return [s.remote_path(s.worker_bin)]
        return ["env", f"PYTHONPATH={s.remote_path(s.python_path)}", *(s.remote_path(w) for w in s.worker_cmd)]

    def worker_command(self, proc, ps_hosts, coordinator=None):
        s = self.s
        remote = s.launcher != "local"
        cmd = [*self.worker_program(), "--config", s.remote_path(s.config) if remote else s.config, *s.security_flags]
        if s.mode == "allreduce":
            cmd += ["--num-workers", str(s.num_workers)]
            if s.bind:
                cmd += ["--bind", s.bind]
            cmd += ["--index", str(proc.index), "--coordinator", coordinator]
            if proc.index == 0 and not remote:
                cmd += ["--port-file", os.path.join(s.run_dir, "w0.addr")]
            if s.hybrid:  # the embedding tables' shards
                cmd += ["--num-ps", str(s.num_ps), "--ps-hosts", ps_hosts]
        else:
            cmd += ["--index", str(proc.index), "--num-ps", str(s.num_ps), "--num-workers", str(s.num_workers),
                    "--ps-hosts", ps_hosts]
        if s.launcher != "local":  # the placement's local rank picks the GPU (--device auto)
            cmd += ["--local-rank", str(proc.local_rank)]
        if proc.device:
            cmd += ["--device", proc.device]
        if s.worker_cpus:
            cmd += ["--bind-cpu", str(s.worker_cpus[proc.index])]
        return cmd + s.extra

    def remote_argv(self, proc, command):
        """ssh HOST 'exec bash REPO/launch/remote.sh GRACE env VARS... COMMAND'."""
        s = self.s
        # The key file is a path on this host: a remote process gets the key itself (start()).
        env = [f"{k}={os.environ[k]}" for k in s.forwarded_env() if k != "PSTRAIN_CURVE_KEY_FILE"]
        shim = ["exec", "bash", s.remote_path(os.path.join(REPO, "launch", "remote.sh")), str(s.stop_grace)]
        line = shlex.join(shim + (["env"] + env if env else []) + command)
        return s.ssh + ["-o", f"ConnectTimeout={s.start_timeout}", "-o", "ServerAliveInterval=5",
                        "-o", "ServerAliveCountMax=3", proc.host, line]

    def start(self, proc, command):
        self.commands[proc.name] = (proc, command)
        if self.s.launcher == "ssh":
            child = self.sup.spawn(proc.name, proc.label, self.remote_argv(proc, command), stdin_pipe=True)
            # The job key travels inside the encrypted ssh channel, never on a command line
            # (launch/remote.sh reads this first line).
            child.popen.stdin.write(f"KEY {self.secret}\n".encode() if self.secret else b"NOKEY\n")
            child.popen.stdin.flush()
        else:
            child = self.sup.spawn(proc.name, proc.label, command)
        self.state.started([proc], child.pid, self.s.launcher)
        return child

    def make_job_key(self):
        """CURVE (docs/security.md): the job's key pair, made in RUNDIR/job.key (0600) unless the
        job says --insecure or brings its own key; local processes find it through
        PSTRAIN_CURVE_KEY_FILE, remote ones get the secret over ssh's standard input."""
        s = self.s
        if s.insecure:
            return
        given = job_flag(s.extra, "curve-key-file") or os.environ.get("PSTRAIN_CURVE_KEY_FILE")
        if os.environ.get("PSTRAIN_CURVE_SECRET_KEY") and not given:
            self.secret = os.environ["PSTRAIN_CURVE_SECRET_KEY"]
            return
        path = given
        if not path:
            if not os.access(s.keygen_bin, os.X_OK):
                self.out.say(f"{s.keygen_bin} is missing: no job key made (traffic off loopback needs one)")
                return
            path = os.path.join(s.run_dir, "job.key")
            done = subprocess.run([s.keygen_bin, path, "--force"], capture_output=True, text=True)
            if done.returncode != 0:
                raise Stop(f"cannot make the job key: {done.stderr.strip()}", EXIT_SETUP)
            os.environ["PSTRAIN_CURVE_KEY_FILE"] = path
            self.out.say(f"job key (CURVE) in {path}")
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    key, _, value = line.partition("=")
                    if key.strip() == "secret":
                        self.secret = value.strip()
        except OSError as e:
            raise Stop(f"cannot read the job key {path}: {e.strerror}", EXIT_USAGE) from e

    # -------------------------------------------------------------- signals and failures

    def on_signal(self, number, _frame):
        name = signal.Signals(number).name
        code = 128 + number
        if self.stopping:  # a second signal while stopping: no more grace
            self.sup.kill_all()
            os._exit(code)
        self.received = (name, code)

    def check_signal(self):
        if self.final and time.monotonic() >= self.final_deadline():
            saving = " (and of its last line saying it was saving)" if self.final_deadline() > self.final[2] else ""
            raise Stop(f"no final checkpoint within {self.s.checkpoint_grace}s of {self.final[0]}{saving}",
                       self.final[1])
        if self.final:
            self.check_stopped()
        if not self.received:
            return
        name, code = self.received
        self.received = None
        chief = self.sup.children.get("w0")
        if self.final or not self.s.checkpointing or chief is None or chief.status is not None:
            raise Stop(f"received {name}", code)
        # A checkpointing job: the chief asks for a final checkpoint at the next step, after
        # which every process ends by itself (docs/checkpoints.md).
        self.final = (name, code, time.monotonic() + self.s.checkpoint_grace)
        self.out.say(f"received {name}; w0 writes a final checkpoint, then the job stops "
                     f"(up to {self.s.checkpoint_grace}s; a second signal stops everything now)")
        try:
            if chief.popen.stdin is not None:
                chief.popen.stdin.write(b"TERM\n")  # launch/remote.sh signals the remote process
                chief.popen.stdin.flush()
            else:
                os.killpg(chief.pid, signal.SIGTERM)
        except OSError as e:
            raise Stop(f"received {name}; could not reach w0 ({e})", code) from e

    def final_deadline(self):
        """The final checkpoint's grace, counted from the signal or from the last line of a process
        saying it is saving, whichever is later: a shard writing large tables says so every 5 s, and
        a save that makes progress is not cut short (its checkpoint would be lost)."""
        saving = max(self.sup.saving_at.values(), default=0.0)
        return max(self.final[2], saving + self.s.checkpoint_grace)

    def check_stopped(self):
        """While the final checkpoint is awaited: a process stopped for STOPPED_GIVE_UP_S (SIGSTOP,
        a debugger) holds every step back, so there will be no final checkpoint: stop now."""
        now = time.monotonic()
        stopped = self.sup.stopped_groups()
        self.stopped_since = {c.name: self.stopped_since.get(c.name, now) for c in stopped}
        held = [c for c in stopped if now - self.stopped_since[c.name] >= STOPPED_GIVE_UP_S]
        if held:
            who = ", ".join(f"{c.label} (pid {c.pid})" for c in held)
            raise Stop(f"{who} stopped (SIGSTOP or a debugger) for {STOPPED_GIVE_UP_S}s: no final checkpoint",
                       self.final[1])

    def reap(self, phase):
        """Handles every process that exited. Non-zero status: stop everything."""
        for child in self.sup.reap():
            self.state.exited([p.name for p in self.s.procs] if self.step is not None else [child.name], child.status)
            if child.status != 0 and self.final:
                # Stopping already, on a signal: no restart, and the exit status stays the signal's.
                raise Stop(f"{child.label} (pid {child.pid}) died: {describe_status(child.status)}; "
                           "no final checkpoint", self.final[1])
            if child.status == EXIT_USAGE:
                # The binaries exit 2 only when they refuse their command line (docs/errors.md): the
                # same flags would be refused again, so no restart, and the job's exit is a usage error.
                error = self.last_error(child)
                raise Stop(f"{child.label} (pid {child.pid}) refused its flags"
                           + (f": {error}" if error else " (exit status 2; see its log)"), EXIT_USAGE)
            if child.status != 0 and self.step is not None:
                raise Stop(self.step.describe_failure(child.status), EXIT_FAILED)
            if child.status != 0:
                why = describe_status(child.status)
                if self.s.launcher == "ssh" and child.status == 255:
                    why = "ssh failed with status 255 (host unreachable, connection lost or login refused; see its log)"
                error = self.last_error(child)
                if error:
                    why += f" ({error})"
                # A dead PS shard, or in hybrid mode any process (the ring takes no replacement in):
                # the whole job restarts from its last complete checkpoint.
                whole_job = child.name.startswith("ps") or self.s.hybrid
                if whole_job and self.restarts < self.s.max_restarts and self.s.checkpointing:
                    self.restarts += 1
                    where = self.last_checkpoint()
                    if where is None:
                        raise Stop(f"{child.label} (pid {child.pid}) died: {why}; no complete checkpoint to restart "
                                   "the job from yet", EXIT_FAILED)
                    raise RestartJob(f"{child.label} (pid {child.pid}) died: {why}; restarting the whole job from "
                                     f"its last complete checkpoint {where} (restart {self.restarts} of "
                                     f"{self.s.max_restarts})")
                if child.name.startswith("w") and self.restarts < self.s.max_restarts:
                    self.restarts += 1
                    self.out.say(f"{child.label} (pid {child.pid}) died: {why}; restarting it with the same index "
                                 f"(restart {self.restarts} of {self.s.max_restarts})")
                    proc, command = self.commands[child.name]
                    self.start(proc, self.replacement_command(command))
                    continue
                raise Stop(f"{child.label} (pid {child.pid}) died: {why}", EXIT_FAILED)
            if phase == "start" and child.name.startswith("ps") and self.s.launcher == "local":
                raise Stop(f"{child.label} (pid {child.pid}) exited with status 0 before reporting its address", EXIT_START)
            self.out.say(f"{child.label} exited 0")

    def replacement_command(self, command):
        """A restarted worker's command: the same, waiting for its PS shards up to 3 x --timeout
        (unless --start-timeout is given): a worker cut off from its PS dies after --timeout, and
        its replacement must outlast the cut as long as the others wait at the barrier for it (4 x
        --timeout in all, docs/operations.md "Partitions")."""
        if "--start-timeout" in command or any(a.startswith("--start-timeout=") for a in command) or \
                config_value("start-timeout", self.s.config) is not None:
            return command
        timeout = float(self.s.job_value("timeout_s", "timeout") or 60)
        return command + ["--start-timeout", f"{3 * timeout:g}"]

    def last_error(self, child):
        """The last error line (`HH:MM:SS.mmm E text`) in a process's log, as text, or ""."""
        child.reader.join(timeout=1)  # its last lines: the pipe ends when the process has
        try:
            with open(os.path.join(self.s.run_dir, f"{child.name}.log"), "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        for line in reversed(lines):
            match = re.match(r"^[0-9:.]+ E (.*)$", line)
            if match:
                return match.group(1).strip()
        return ""

    def tick(self, phase):
        self.check_signal()
        self.reap(phase)
        time.sleep(0.1)

    # -------------------------------------------------------------- phases

    def wait_for_addresses(self, procs):
        """Local launcher: waits until each process has written RUNDIR/<name>.addr."""
        addresses = {}
        for p in procs:
            self.out.say(f"waiting for {p.name}...")
        deadline = time.monotonic() + self.s.start_timeout
        pending = list(procs)
        while pending:
            for p in list(pending):
                path = os.path.join(self.s.run_dir, f"{p.name}.addr")
                if os.path.isfile(path) and os.path.getsize(path) > 0:
                    with open(path, encoding="utf-8") as f:
                        addr = f.read().split()[0]
                    host, _, port = addr.rpartition(":")
                    if host in ("0.0.0.0", "*", "", "[::]", "::"):
                        host = "127.0.0.1"  # a wildcard bind is reached through loopback
                    addresses[p.name] = f"{host}:{port}"
                    self.out.say(f"{p.name} ready at {addresses[p.name]}")
                    pending.remove(p)
            if not pending:
                break
            self.reap("start")
            if time.monotonic() >= deadline:
                raise Stop(f"{' '.join(p.name for p in pending)} did not report an address within "
                           f"{self.s.start_timeout}s", EXIT_START)
            self.check_signal()
            time.sleep(0.1)
        return addresses

    def check_hosts(self):
        """ssh: every host answers and has the binaries, checked in parallel before starting."""
        s = self.s
        hosts = sorted({p.host for p in s.procs}, key=[p.host for p in s.procs].index)
        need = [s.remote_path(s.ps_bin)] if s.num_ps else []
        need.append(s.remote_path(s.worker_bin))
        test = " && ".join(f"test -x {shlex.quote(b)}" for b in need)
        if s.worker_cmd:  # the package the workers import
            package = s.remote_path(os.path.join(s.python_path, "pstrain"))
            need.append(package)
            test += f" && test -d {shlex.quote(package)}"

        def probe(host):
            argv = s.ssh + ["-o", f"ConnectTimeout={s.start_timeout}", host, test]
            try:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=s.start_timeout + 5)
            except subprocess.TimeoutExpired:
                return host, f"no answer over ssh within {s.start_timeout}s"
            if done.returncode == 0:
                return host, None
            if done.returncode == 255:
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                return host, f"ssh failed: {last}"
            return host, (f"{' or '.join(need)} is missing or not executable there "
                          "(build pstrain on every host at the same path, or give --remote-dir)")

        self.out.say(f"checking {len(hosts)} host(s) over ssh: {' '.join(hosts)}")
        with ThreadPoolExecutor(max_workers=min(16, len(hosts))) as pool:
            problems = [(h, why) for h, why in pool.map(probe, hosts) if why]
        self.check_signal()
        if problems:
            for host, why in problems:
                self.out.say(f"host {host}: {why}")
            raise Stop(f"cannot start on {', '.join(h for h, _ in problems)}", EXIT_START)

    def start_ps(self):
        servers = [p for p in self.s.procs if p.role == "ps"]
        for p in servers:
            self.start(p, self.ps_command(p))
        addresses = self.wait_for_addresses(servers)
        if self.s.transport == "ipc":
            return ",".join(f"ipc://{self.ipc_name(p.index)}" for p in servers)
        return ",".join(addresses[p.name] for p in servers)

    def start_workers(self, ps_hosts):
        for p in self.s.procs:
            if p.role == "worker":
                self.start(p, self.worker_command(p, ps_hosts))

    def start_ring_workers(self, ps_hosts):
        """allreduce: worker 0 is the ring's rendezvous; the others join it there (hybrid mode:
        with the tables' PS shards at ps_hosts)."""
        s = self.s
        workers = [p for p in s.procs if p.role == "worker"]
        chief = workers[0]
        self.start(chief, self.worker_command(chief, ps_hosts, f"{s.bind or '127.0.0.1'}:{s.ring_port}"))
        if len(workers) > 1:
            coordinator = self.wait_for_addresses([chief])[chief.name]
        for p in workers[1:]:
            self.start(p, self.worker_command(p, ps_hosts, coordinator))

    def supervise(self):
        """Waits for every process; after the last worker, gives the PS ps_exit_timeout to exit,
        counted from its last line saying it is saving (the tables of a large job take longer
        than any fixed timeout: a PS that makes progress is not killed)."""
        deadline = None
        while self.sup.live():
            self.check_signal()
            self.reap("run")
            live = self.sup.live()
            if not live:
                break
            if deadline is None and self.step is None and not any(c.name.startswith("w") for c in live):
                self.out.say("all workers finished; waiting for the PS to exit")
                deadline = time.monotonic() + self.s.ps_exit_timeout
            if deadline is not None:
                saving = max((self.sup.saving_at.get(c.name, 0.0) for c in live), default=0.0)
                deadline = max(deadline, saving + self.s.ps_exit_timeout)
            if deadline is not None and time.monotonic() >= deadline:
                raise Stop(f"{' '.join(c.label for c in live)} still running {self.s.ps_exit_timeout}s "
                           "after the workers finished" + (" and its last line saying it was saving" if saving else ""),
                           EXIT_FAILED)
            if self.bar:
                self.bar.tick()
            time.sleep(0.1)
        left = self.sup.running_groups()
        if left:
            self.out.say(f"{' '.join(left)} left processes behind; stopping them")
            self.sup.stop_all()
        self.sup.drain()

    def print_plan(self):
        s = self.s
        how = {"ssh": "over ssh", "slurm": "one srun step", "mpirun": "one mpirun"}
        where = "this host" if s.launcher == "local" else f"{len({p.host for p in s.procs})} host(s), {how[s.launcher]}"
        if s.dry_run and s.config_note:
            self.out.say(s.config_note)  # a real run says it after the run directory
        self.out.say(f"placement ({where}):")
        for line in placement.describe(s.procs):
            self.out.say(f"  {line}")

    def planned_commands(self, unbound="<port of {}>"):
        """(proc, command) of every process in placement order, as far as known before starting
        (a local run's PS ports and worker 0's rendezvous are only known once they are bound:
        `unbound`, formatted with the process's name, stands for such a port)."""
        s = self.s
        local = s.launcher == "local"
        servers = [p for p in s.procs if p.role == "ps"]
        workers = [p for p in s.procs if p.role == "worker"]
        if not local:
            ps_hosts = ",".join(f"{p.host}:{p.port}" for p in servers)
        elif s.transport == "ipc":
            ps_hosts = ",".join(f"ipc://{self.ipc_name(p.index)}" for p in servers)
        else:
            ps_hosts = ",".join(f"127.0.0.1:{p.port or unbound.format(p.name)}" for p in servers)
        planned = []
        for p in s.procs:
            if p.role == "ps":
                cmd = self.ps_command(p)
            elif s.mode == "allreduce" and p.index == 0:
                cmd = self.worker_command(p, ps_hosts, f"{s.bind or '127.0.0.1'}:{s.ring_port}")
            elif s.mode == "allreduce":
                host = "127.0.0.1" if local else workers[0].host
                cmd = self.worker_command(p, ps_hosts, f"{host}:{s.ring_port or unbound.format('w0')}")
            else:
                cmd = self.worker_command(p, ps_hosts)
            planned.append((p, cmd))
        return planned

    def make_step(self):
        s = self.s
        return steps.Step(s.launcher, s.procs, [cmd for _, cmd in self.planned_commands()], s.run_dir,
                          s.forwarded_env())

    def start_step(self):
        """slurm / mpirun: one srun step or one mpirun runs every process."""
        self.step = self.make_step()
        for name, text in self.step.files().items():
            with open(os.path.join(self.s.run_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
        child = self.sup.spawn(self.s.launcher, self.s.launcher, self.step.argv(), env=self.step.env(),
                               demux=self.step.relay)
        self.state.started(self.s.procs, child.pid, self.s.launcher)

    def dry_run(self):
        """Prints every command, then has the binaries check them; returns the exit status."""
        s = self.s
        if s.launcher in ("slurm", "mpirun"):
            step = self.make_step()
            print(shlex.join(step.argv()))
            for name, text in step.files().items():
                print(f"--- RUNDIR/{name}:\n{text}", end="")
        else:
            for p, cmd in self.planned_commands():
                print(f"{p.label}: {shlex.join(self.remote_argv(p, cmd) if s.launcher == 'ssh' else cmd)}")
        sys.stdout.flush()
        return EXIT_OK if self.check_config() else EXIT_USAGE

    def check_commands(self):
        """(proc, command) that --dry-run's check runs here: one process of each kind, the first
        PS, worker 0 and one other worker (within a kind only the index and values the launcher
        made differ), with this host's binary and config, and --check-config."""
        s = self.s
        chosen = {}
        for p, cmd in self.planned_commands(unbound=STAND_IN_PORT):
            kind = "ps" if p.role == "ps" else "chief" if p.index == 0 else "worker"
            if kind not in chosen:
                program = 1 if p.role == "ps" else len(self.worker_program())  # --worker-cmd's words
                cmd = [s.ps_bin if p.role == "ps" else s.worker_bin] + cmd[program:]
                cmd[cmd.index("--config") + 1] = s.config
                chosen[kind] = (p, cmd + ["--check-config"])
        return list(chosen.values())

    def check_config(self):
        """--dry-run: the binaries check the planned commands (check.py). False if one refused."""
        env = check.environment(self.s.launcher)
        results = [check.run(p.label, cmd, env) for p, cmd in self.check_commands()]
        accepted = [r for r in results if r.said]
        if accepted:
            self.out.say(f"checked {', '.join(r.label for r in accepted)} with --check-config: "
                         f"{'; '.join(sorted({r.said for r in accepted}))}")
        for why in dict.fromkeys(r.unchecked for r in results if r.unchecked):
            who = ", ".join(r.label for r in results if r.unchecked == why)
            self.out.say(f"could not check {who} with the binaries (--check-config): {why}")
        for binary, why in dict.fromkeys((r.binary, r.refused) for r in results if r.refused):
            who = ", ".join(r.label for r in results if (r.binary, r.refused) == (binary, why))
            print(f"launch: {binary} refuses the command of {who} (config {self.s.config}): {why}", file=sys.stderr)
        return not any(r.refused for r in results)

    def checkpoint_dir(self):
        return self.s.job_value("checkpoint_dir", "checkpoint-dir")

    def last_checkpoint(self):
        """The newest complete checkpoint directory of the job (with its MANIFEST), or None."""
        found = status.last_checkpoint(self.checkpoint_dir())
        return found[0] if found else None

    def start_job(self):
        s = self.s
        for name in os.listdir(s.run_dir):  # addresses of an earlier start of this job
            if name.endswith(".addr"):
                os.remove(os.path.join(s.run_dir, name))
        if s.launcher in ("slurm", "mpirun"):
            self.start_step()
        elif s.launcher == "ssh":
            for p, cmd in self.planned_commands():
                self.start(p, cmd)
        elif s.mode == "allreduce":
            self.start_ring_workers(self.start_ps() if s.hybrid else "")
        else:
            self.start_workers(self.start_ps())

    def main(self):
        s = self.s
        self.state = jobstate.JobState(s.run_dir, s.launcher, s.mode, s.num_ps, s.num_workers, s.config,
                                       self.checkpoint_dir())
        self.state.save()
        if s.progress:
            self.bar = progress.ProgressBar(self.out, s.metrics_path(), s.run_dir,
                                            lambda: progress.terminal_columns(sys.stdout))
        code, why = self.run()
        self.state.ended(code, why)
        return code

    def run(self):
        """Runs the job: (exit status, what ended it)."""
        s = self.s
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self.on_signal)
        try:
            self.out.say(f"config {s.config}; mode {s.mode}; {s.num_ps} PS, {s.num_workers} workers"
                         + (f"; job flags: {' '.join(s.extra)}" if s.extra else ""))
            self.check_binaries()
            self.print_plan()
            if s.launcher == "ssh":
                self.check_hosts()
            self.make_job_key()
            while True:
                try:
                    self.start_job()
                    self.supervise()
                    break
                except RestartJob as restart:
                    # Every process goes; all start again and resume from the checkpoint (the
                    # other shards and every worker roll back to it: nothing is lost).
                    self.out.say(str(restart))
                    self.sup.stop_all()
                    # From its checkpoint: --resume=auto becomes --resume (none is an error now).
                    s.extra = [a for a in s.extra if a != "--resume" and not a.startswith("--resume=")] + ["--resume"]
            self.end_progress()
            if self.final:
                self.out.say(f"stopped after the final checkpoint ({self.final[0]}); resume with --resume; "
                             f"logs in {s.run_dir}")
                return self.final[1], f"stopped by {self.final[0]} after the final checkpoint"
        except Stop as stop:
            self.stopping = True
            self.end_progress()
            self.out.say(f"{self.out.refusals.replace_in(str(stop))}; stopping all")
            self.sup.stop_all()  # the processes' last lines read: every one that gave a refusal
            self.out.say_refusals()
            self.out.say(f"stopped; logs in {s.run_dir}")
            return stop.code, str(stop)
        self.out.say_refusals()
        self.write_plots()
        self.out.say(f"training completed; logs in {s.run_dir}")
        return EXIT_OK, "training completed"

    def end_progress(self):
        if self.bar:
            self.bar.finish()
            self.bar = None

    def write_plots(self):
        """After a completed run shown with the progress bar (someone at a terminal), when
        matplotlib can be imported: `launch.sh plot`'s PNGs, in a process of their own with a
        deadline. Plots are a convenience: nothing here fails the run. Runs without the bar
        (scripts, CI, Slurm) get none unasked: `launch.sh plot RUNDIR` draws them."""
        metrics = self.s.metrics_path()
        if not self.s.progress or metrics is None or not os.path.isfile(metrics):
            return
        python = plot.python_with_matplotlib()  # this one, or Debian's /usr/bin/python3
        if python is None:
            return
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (os.path.join(REPO, "launch"), os.environ.get("PYTHONPATH")) if p))
        argv = [python, "-m", "pstrain_launch", "plot", self.s.run_dir, "--metrics-file", metrics]
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                                  timeout=PLOT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.out.say(f"no plots ({e})")
            return
        if done.returncode == 0:
            self.out.say(f"plots: {' '.join(plot.outputs(self.s.run_dir))} (redraw: launch/launch.sh plot "
                         f"{self.s.run_dir})", result=True)
        else:
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            self.out.say(f"no plots: {said.removeprefix('launch: plot: ')}")

    def check_binaries(self):
        if self.s.launcher == "ssh":
            return  # checked on every host by check_hosts()
        for binary in ([self.s.ps_bin] if self.s.num_ps else []) + [self.s.worker_bin]:
            if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
                print(f"launch: {binary} is missing or not executable; build it (run without --no-setup) "
                      "or set PSTRAIN_BUILD_DIR / PSTRAIN_PS_BIN / PSTRAIN_WORKER_BIN", file=sys.stderr)
                raise SystemExit(EXIT_SETUP)


# The run directory's lock, held for the launcher's whole life (see lock_run_dir).
_RUN_DIR_LOCK = None


def lock_run_dir(path):
    """One job per run directory: an exclusive flock(2) on RUNDIR/.pstrain-run.lock, which the
    kernel drops when the launcher exits however it dies (shared/util/dir_lock.h does the same for the
    checkpoint directory). A second launcher on the same directory is refused at once, naming the
    holder, before it touches a file there."""
    global _RUN_DIR_LOCK
    lock_path = os.path.join(path, ".pstrain-run.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise UsageError(f"cannot create {lock_path}: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a process that has not said who it is yet"
        os.close(fd)
        raise UsageError(f"run directory {path} is in use by another job: {holder} "
                         f"({lock_path} is locked; give this job a --run-dir of its own)") from e
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    text = f"pid {os.getpid()} on host {socket.gethostname()}: launch.sh, since {since}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, text, 0)
    _RUN_DIR_LOCK = fd


def make_run_dir(path):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create run directory {path}: {e.strerror}") from e
    path = os.path.realpath(path)
    lock_run_dir(path)
    for name in os.listdir(path):
        if re.fullmatch(r"(ps[0-9]+\.addr|w0\.addr|(ps|w)[0-9]+\.log|cmd\.txt|launch\.log)", name):
            os.remove(os.path.join(path, name))
    return path


def main(argv):
    if argv and argv[0] in ("status", "stop"):
        return status.main(argv, REPO)
    if argv and argv[0] == "plot":
        return plot.main(argv[1:], REPO)
    try:
        flags, extra = parse_args(argv)
        if flags.help:
            print(usage(), end="")
            return EXIT_OK
        settings = Settings(flags, extra)
        if settings.dry_run:
            run = Run(settings, Output())
            run.print_plan()
            return run.dry_run()
        settings.run_dir = make_run_dir(settings.run_dir)
    except UsageError as e:
        print(f"launch: {e} (see launch/launch.sh --help)", file=sys.stderr)
        return EXIT_USAGE
    os.environ["PSTRAIN_RUN_DIR"] = settings.run_dir
    if settings.worker_cmd:  # the workers import pstrain from the build
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [settings.python_path, os.environ.get("PYTHONPATH")]))
    output = Output(settings.run_dir, progress.shown if settings.progress else None)
    output.say(f"run directory {settings.run_dir}")
    if settings.config_note:
        output.say(settings.config_note)
    return Run(settings, output).main()
