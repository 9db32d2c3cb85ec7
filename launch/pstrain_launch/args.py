"""launch.sh's command line: its flags (argparse) with their help, and the job flags after `--`.

parse() returns an argparse.Namespace (None for a flag not given, so the config file's value can
be used instead) and the job flags; values are checked where they are used (cli.Settings).
"""

import argparse
import re

DEFAULT_BASE_PORT = 29500


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        """argparse would print its usage and exit; the launcher words and reports its own errors."""
        match = re.fullmatch(r"argument (?:\S+/)?(\S+): (.*)", message, re.S)
        if match and match.group(2) == "expected one argument":
            raise UsageError(f"{match.group(1)} needs a value")
        raise UsageError(f"{match.group(1)}: {match.group(2)}" if match else message)


def _formatter(prog):
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=28, width=100)


def parser(repo, forwarded_env):
    p = _Parser(prog="launch/launch.sh", usage="%(prog)s [options] [-- job flags for every process]\n"
                                               "       %(prog)s status [RUNDIR]     (a running job: processes, step, ETA)\n"
                                               "       %(prog)s stop [RUNDIR]       (stop it as SIGTERM does)\n"
                                               "       %(prog)s plot [RUNDIR]       (RUNDIR/curves.png and breakdown.png)",
                add_help=False, allow_abbrev=False, formatter_class=_formatter,
                description="Runs S parameter servers and N workers of pstrain on this machine or across hosts, "
                            "prefixes and\nlogs their output, stops all of them as soon as one fails, and exits "
                            "with one status.",
                epilog=_epilog(forwarded_env))
    job = p.add_argument_group("job", "  -- FLAGS...             passed unchanged to every process, e.g. "
                                      "-- --lr 0.05 --steps 200")
    job.add_argument("--num-ps", metavar="S", help="parameter-server shards (default: num-ps in the config file, else 1)")
    job.add_argument("--num-workers", metavar="N", help="workers (default: num-workers in the config file, else 1; "
                     "with --devices, one per device)")
    job.add_argument("--devices", metavar="LIST", help=(
        "one worker per listed device, like MirroredStrategy(devices=[...]): --devices cuda:0,cuda:2,cpu starts 3 "
        "workers, worker i with --device <i-th entry> (entries: cpu, cuda, cuda:K; a --num-workers must agree). "
        "cuda:K counts the GPUs CUDA_VISIBLE_DEVICES leaves visible (CUDA renumbers them; the variable is passed on "
        "unchanged, with --devices to other hosts too) and must be among them. Across hosts the list is per host: "
        "every host runs one worker per entry, local rank r on entry r"))
    job.add_argument("--worker-batch", metavar="B0,B1,...", help=(
        "samples per step of each worker, in worker order (one per worker); passed to every process, PS and "
        "workers. Per host: batch= in a hostfile"))
    job.add_argument("--worker-cmd", metavar="CMD", help=(
        "run CMD as each worker instead of pstrain-worker, with the same flags after it: a Python script on the "
        "pstrain package, e.g. --worker-cmd 'python3 train.py' (docs/python.md); the launcher puts "
        "<build>/python on its PYTHONPATH (on other hosts: env PYTHONPATH=<build>/python there, paths in this "
        "checkout as --remote-dir maps them). With every starter: local, ssh, slurm, mpirun. Give the script "
        "by a path that exists on every host"))
    job.add_argument("--config", metavar="FILE", help=(
        "job config, passed to every process as --config FILE (default: configs/fashion_mlp.cfg, the Fashion-MNIST "
        "MLP job; configs/ctr.cfg when the job flags give click-through-rate data: --schema, --data-format criteo "
        "or a --train-data .tsv/.txt file; with --worker-cmd configs/worker_cmd.cfg, the cluster's counts only: "
        "the optimizer and schedule are the binaries' defaults unless the job flags give them)"))
    job.add_argument("--cpu-bind", metavar="MODE", default="auto", help=(
        "auto (default) | none. auto: when the job runs on this host alone with 2 or more workers and each can "
        "have a CPU of its own (of those this launcher may use), worker i's training thread and data reader run on "
        "the i-th of them (--bind-cpu); ZeroMQ's threads and the PS stay free, and two workers never share a core "
        "while one is idle (bench/README.md, \"CPU binding\"). none: the kernel places everything, e.g. when other "
        "jobs share the CPUs. Across hosts nothing is bound (srun --cpu-bind and mpirun --bind-to do that for "
        "their steps)"))
    job.add_argument("--run-dir", metavar="DIR", help=(
        "where logs, cmd.txt and launch.log go (default: runs/<date>-<time>-<pid>); one job at a time: a run "
        "directory in use by another launcher is refused (exit 2)"))
    job.add_argument("--dry-run", action="store_true", help=(
        "print the placement and every process's exact command, and check them: each distinct process (the first "
        "PS, worker 0, one other worker) runs here with --check-config, so the binaries parse its flags and the "
        "config file as a start would; exit 2 naming the process and the binary's message if one refuses. Starts "
        "nothing; without built binaries it says it could not check"))
    job.add_argument("--resume", nargs="?", const="on", metavar="auto", help=(
        "start from the newest usable checkpoint in the job's --checkpoint-dir (passes --resume to every process; "
        "docs/checkpoints.md). --resume auto: the same where the directory holds a complete checkpoint, else start "
        "fresh: one command for the first start and every requeue (Slurm --requeue, Kubernetes)"))
    job.add_argument("--max-restarts", metavar="R", default="0", help=(
        "restart a worker that dies, with the same index, up to R times in all (default 0: any death stops the "
        "job). The replacement gets the current parameters and redoes the step its predecessor left, so nothing "
        "is lost or counted twice. A PS shard that dies restarts the whole job from its last complete checkpoint "
        "(needs the job's --checkpoint-dir). Sync mode; in hybrid mode (--mode allreduce with --embedding-dim, "
        "with --checkpoint-dir) any death restarts the whole job so. Local or ssh launcher."))
    job.add_argument("--progress", metavar="MODE", default="auto", help=(
        "auto (default) | bar | lines. bar: one live status line at the bottom of the terminal (bar, "
        "percentage, step/total, samples/s, loss, the slowest worker if there is a straggler, ETA), from the "
        "chief's metrics file; above it the results (summary, evaluations, saved files, plots) on stdout and "
        "the launcher's lines and the processes' warnings and errors on stderr; the processes' other lines go "
        "to RUNDIR/<name>.log only. lines: every line on stdout, each process's prefixed with [name]. auto: "
        "bar when stdout is a terminal (not TERM=dumb), the launcher is local and the metrics file is not "
        "'none'; else lines (pipes, CI, Slurm)"))
    job.add_argument("--no-setup", action="store_true", help="do not install packages or build (same as PSTRAIN_NO_SETUP=1)")
    job.add_argument("-h", "--help", action="store_true", help="this help")

    where = p.add_argument_group("where processes run (docs/cluster.md)")
    where.add_argument("--launcher", metavar="L", default="auto", help=(
        "local | ssh | slurm | mpirun | auto (default auto: ssh when --hostfile or -H is given, slurm inside a "
        "Slurm allocation, else local). slurm: one srun step on the allocation's nodes; mpirun: one mpirun over "
        "--hostfile/-H (or this host)"))
    where.add_argument("--hostfile", metavar="FILE", help=(
        "hosts in Open MPI's format: 'host [slots=N] [batch=B0,B1,...]' per line, '#' comments; slots count "
        "workers (default 1 per host). batch=: samples per step of the host's workers in local-rank order (one "
        "value: all of them; a list: one per slot). The launcher passes the job's --worker-batch list to every "
        "process; workers on hosts without batch= get batch-size x accum-steps (job flags or config; 64 x 1 by "
        "default)"))
    where.add_argument("-H", dest="hosts", metavar="LIST", help="hosts on the command line: host1:2,host2:2 (slots after the colon)")
    where.add_argument("--ps-hosts-list", metavar="H1,H2", help=(
        "put PS shard s on the (s mod count)-th of these hosts (default: round-robin over all hosts); workers "
        "fill slots in host order"))
    where.add_argument("--oversubscribe", action="store_true", help="allow more workers than slots (they go round the hosts again)")
    where.add_argument("--remote-dir", metavar="DIR", help=(
        f"the pstrain checkout on the other hosts, when not at this one's path ({repo}); binaries and a config "
        "under it are found there"))
    where.add_argument("--ssh-option", metavar="OPT", action="append", default=[], help=(
        "one more option for ssh, e.g. --ssh-option IdentityFile=~/.ssh/job (given to ssh as -o OPT; "
        "repeatable). ssh always runs with BatchMode=yes."))

    net = p.add_argument_group("network")
    net.add_argument("--base-port", metavar="P", help=(
        "PS s listens on port P+s (in allreduce mode worker 0's rendezvous is on P). Default: local, each PS picks "
        f"a free port and reports it through RUNDIR/ps<s>.addr; ssh, {DEFAULT_BASE_PORT}."))
    net.add_argument("--bind", metavar="ADDR", help=(
        "address the PS processes bind (default: 127.0.0.1 local, 0.0.0.0 ssh); off loopback every process gets "
        "--curve unless the job says --insecure (docs/security.md)"))
    net.add_argument("--transport", metavar="T", default="ipc", help=(
        "local only; how workers reach the PS: ipc (Unix-domain sockets in Linux's abstract namespace; the "
        "default) or tcp. The PS listens on TCP either way. Across hosts workers use TCP."))
    return p


def _epilog(forwarded_env):
    return f"""environment:
  PSTRAIN_BUILD_DIR       build directory (default: <repo>/build)
  PSTRAIN_PS_BIN          PS binary (default: $PSTRAIN_BUILD_DIR/pstrain-ps)
  PSTRAIN_WORKER_BIN      worker binary (default: $PSTRAIN_BUILD_DIR/pstrain-worker)
  PSTRAIN_NO_SETUP=1      same as --no-setup
  PSTRAIN_NO_INSTALL=1    build but do not check or install packages
  PSTRAIN_START_TIMEOUT   seconds to wait for every PS to report its address, and for ssh to
                          reach every host (default 60)
  PSTRAIN_PS_EXIT_TIMEOUT seconds the PS may take to exit after the last worker, or after its
                          last line saying it is saving its tables (default 30)
  PSTRAIN_STOP_GRACE      seconds between SIGTERM and SIGKILL when stopping (default 5)
  PSTRAIN_CHECKPOINT_GRACE  a job with --checkpoint-dir stopped by SIGTERM/SIGINT (Ctrl-C, Slurm
                          preemption) first writes a final checkpoint: seconds allowed for it,
                          from the signal or from a process's last line saying it is saving,
                          before everything is stopped anyway (default 60)
  PSTRAIN_SSH             the ssh command (default: ssh), e.g. "ssh -i /path/key -p 2222"
  {', '.join(forwarded_env)}
                          passed on to processes on other hosts (CUDA_VISIBLE_DEVICES too,
                          with --devices)

exit status: 0 all processes exited 0; 1 a process failed (it is named) or a PS did not exit;
2 usage error (--dry-run: also a job flag or config key a binary refuses); 3 setup or build
failed; 4 a PS did not start in time, or a host cannot be reached; 129/130/143 stopped by
SIGHUP/SIGINT/SIGTERM.
"""


def parse(argv, repo, forwarded_env):
    """(flags: argparse.Namespace, job flags after `--`). Raises UsageError."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    flags, unknown = parser(repo, forwarded_env).parse_known_args(argv[:end])
    if flags.help:
        return flags, argv[end + 1:]
    if unknown:
        if unknown[0].startswith("-"):
            raise UsageError(f"unknown flag '{unknown[0].split('=', 1)[0]}' (job flags go after --, e.g. -- --lr 0.01)")
        raise UsageError(f"unexpected argument '{unknown[0]}' (job flags go after --)")
    if flags.resume not in (None, "on", "auto"):
        raise UsageError(f"--resume={flags.resume}: the value is auto (or none)")
    return flags, argv[end + 1:]
