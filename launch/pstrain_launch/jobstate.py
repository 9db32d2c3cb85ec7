"""RUNDIR/job.json: what the launcher has started, for `launch.sh status` and `launch.sh stop`.

The launcher rewrites the file (atomically: a temporary file renamed over it) whenever a process
starts or ends and when it exits itself, so a reader always sees one whole state:

    {"launcher": {"pid": 4242, "host": "node1", "kind": "local", "started": 1764170000.1},
     "job": {"mode": "sync", "num_ps": 1, "num_workers": 2, "config": "...", "checkpoint_dir": null},
     "processes": [{"name": "ps0", "label": "ps0", "host": "localhost", "pid": 4243, "via": "local",
                    "started": 1764170000.2, "status": null, "restarts": 0}, ...],
     "ended": null}

`pid` is the process the launcher started on its own host: the binary itself (local), its ssh
client (ssh), or the one srun / mpirun that runs every process (slurm, mpirun). `status` is null
while it runs, else its exit status (negative: killed by that signal). `ended`, once the launcher
is done: {"time": ..., "exit_code": ..., "why": "..."}.
"""

import json
import os
import socket
import time

FILE_NAME = "job.json"


class JobState:
    def __init__(self, run_dir, kind, mode, num_ps, num_workers, config, checkpoint_dir):
        self.path = os.path.join(run_dir, FILE_NAME)
        self.state = {
            "launcher": {"pid": os.getpid(), "host": socket.gethostname(), "kind": kind, "started": time.time()},
            "job": {"mode": mode, "num_ps": num_ps, "num_workers": num_workers, "config": config,
                    "checkpoint_dir": os.path.abspath(checkpoint_dir) if checkpoint_dir else None},
            "processes": [],
            "ended": None,
        }

    def started(self, procs, pid, via):
        """procs (placement.Proc) now run as local process `pid` (one each, or one srun/mpirun for all)."""
        by_name = {p["name"]: p for p in self.state["processes"]}
        for proc in procs:
            entry = by_name.get(proc.name)
            if entry is None:
                entry = {"name": proc.name, "label": proc.label, "host": proc.host, "restarts": -1}
                self.state["processes"].append(entry)
            entry.update(pid=pid, via=via, started=time.time(), status=None, restarts=entry["restarts"] + 1)
        self.save()

    def exited(self, names, status):
        for entry in self.state["processes"]:
            if entry["name"] in names and entry["status"] is None:
                entry["status"] = status
        self.save()

    def ended(self, exit_code, why):
        self.state["ended"] = {"time": time.time(), "exit_code": exit_code, "why": why}
        self.save()

    def save(self):
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as f:
                json.dump(self.state, f, indent=1)
                f.write("\n")
            os.replace(temporary, self.path)
        except OSError:
            pass  # the run goes on without it; `status` then says what it cannot know


def load(run_dir):
    """The state in RUNDIR/job.json, or None when there is none (or it cannot be read)."""
    try:
        with open(os.path.join(run_dir, FILE_NAME), encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and "launcher" in state else None
