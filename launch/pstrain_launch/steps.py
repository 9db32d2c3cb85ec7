"""Slurm and Open MPI starters: the whole job as ONE srun step or ONE mpirun, rank r = process r.

Ranks are in placement order: PS shards 0..S-1, then workers 0..N-1. Each rank's exact command
is written to a file that the starter reads (srun --multi-prog, mpirun --app), and each rank's
host is fixed by the launcher's placement (srun --distribution=arbitrary with SLURM_HOSTFILE,
mpirun --host per line), so what runs where is what was printed.

Both starters tag every output line with its rank; relay() maps the tag to the process's name
(the prefix and RUNDIR/<name>.log), and failures() reads the starter's own report of which
rank failed so the launcher can name it.
"""

import os
import re
import shlex
import subprocess

from .placement import Host, PlacementError

_SRUN_LABEL = re.compile(rb"^\s*([0-9]+): ?(.*)$", re.S)
_MPI_TAG = re.compile(rb"^\[[0-9]+,([0-9]+)\]<std(?:out|err)>: ?(.*)$", re.S)
_SRUN_FAILED = re.compile(r"^srun: error: (\S+): tasks? ([0-9,\-]+): (.*)$")
_MPI_FAILED = re.compile(r"Process name: \[\[[0-9]+,[0-9]+\],([0-9]+)\]")


def expand_ranks(spec):
    """'0,2-4' -> [0, 2, 3, 4] (srun's task lists)."""
    ranks = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        ranks.extend(range(int(low), int(high or low) + 1))
    return ranks


def decode_tasks_per_node(text):
    """SLURM_TASKS_PER_NODE: '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"([0-9]+)(?:\(x([0-9]+)\))?", part.strip())
        if not match:
            raise PlacementError(f"SLURM_TASKS_PER_NODE: cannot read '{text}'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_hosts(env=os.environ):
    """The allocation's hosts with their task counts as slots (inside salloc/sbatch)."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise PlacementError("--launcher slurm runs inside a Slurm allocation (salloc or sbatch): "
                             "SLURM_JOB_NODELIST is not set")
    try:
        done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise PlacementError(f"scontrol show hostnames {nodelist} failed: {e}") from e
    names = done.stdout.split()
    counts = decode_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", ",".join("1" for _ in names)))
    if len(counts) != len(names):
        raise PlacementError(f"SLURM_TASKS_PER_NODE lists {len(counts)} nodes but the allocation has {len(names)}")
    return [Host(name, count) for name, count in zip(names, counts)]


class Step:
    """One srun or mpirun that runs every process of the job."""

    def __init__(self, kind, procs, commands, run_dir, forwarded_env=()):
        self.kind = kind
        self.procs = procs  # in rank order
        self.commands = commands
        self.run_dir = run_dir
        self.forwarded_env = forwarded_env
        self.failed = []  # (labels, what) reported by the starter

    def files(self):
        """{file name in RUNDIR: text} the step reads."""
        if self.kind == "slurm":
            lines = [f"{rank} {shlex.join(cmd)}" for rank, cmd in enumerate(self.commands)]
            return {"slurm.hosts": "".join(f"{p.host}\n" for p in self.procs),
                    "slurm.multiprog": "\n".join(lines) + "\n"}
        lines = [f"-np 1 --host {p.host} {shlex.join(cmd)}" for p, cmd in zip(self.procs, self.commands)]
        return {"mpirun.app": "\n".join(lines) + "\n"}

    def argv(self):
        path = os.path.join
        if self.kind == "slurm":
            return ["srun", "--label", "--kill-on-bad-exit=1", "--distribution=arbitrary", "--overcommit",
                    f"--ntasks={len(self.procs)}", "--multi-prog", path(self.run_dir, "slurm.multiprog")]
        argv = ["mpirun", "--tag-output", "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        for name in self.forwarded_env:
            argv += ["-x", name]
        return argv + ["--app", path(self.run_dir, "mpirun.app")]

    def env(self):
        env = dict(os.environ)
        if self.kind == "slurm":
            env["SLURM_HOSTFILE"] = os.path.join(self.run_dir, "slurm.hosts")
        return env

    def relay(self, line):
        """(name, label, text) of one output line of the step; name None for the starter's own."""
        match = (_SRUN_LABEL if self.kind == "slurm" else _MPI_TAG).match(line)
        if match and int(match.group(1)) < len(self.procs):
            p = self.procs[int(match.group(1))]
            return p.name, p.label, match.group(2)
        self._note_failure(line.decode(errors="replace").strip())
        return None, self.kind, line

    def _note_failure(self, text):
        if self.kind == "slurm":
            match = _SRUN_FAILED.match(text)
            if match:
                ranks = [r for r in expand_ranks(match.group(2)) if r < len(self.procs)]
                self.failed.append(([self.procs[r].label for r in ranks], match.group(3)))
        else:
            match = _MPI_FAILED.search(text)
            if match and int(match.group(1)) < len(self.procs):
                self.failed.append(([self.procs[int(match.group(1))].label], "exited with a non-zero status"))

    def describe_failure(self, status):
        if self.failed:
            labels, what = self.failed[0]
            return f"{' '.join(labels)} died: {what}"
        return f"the {'srun step' if self.kind == 'slurm' else 'mpirun job'} failed: exit status {status}"
