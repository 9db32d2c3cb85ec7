"""`launch.sh status [RUNDIR]` and `launch.sh stop [RUNDIR]`: a job started by the launcher, seen
and stopped from another terminal.

Both read RUNDIR/job.json (jobstate.py), which the job's launcher keeps, and work on the host the
launcher runs on, whatever started the processes (local, ssh, Slurm, mpirun). status adds the
progress from RUNDIR/metrics.jsonl (the chief's metrics file, its default under the launcher) and
the total step count from w0.log, and the last complete checkpoint of --checkpoint-dir. stop sends
the launcher SIGTERM, which stops the job as a SIGTERM to it would (with --checkpoint-dir, after a
final checkpoint), and waits until it has exited. Without RUNDIR: the newest of this user's runs
under <repo>/runs.

Exit status: status 0 when the job runs, 1 when RUNDIR holds no running job; stop 0 once the job
has stopped, 1 when there was no running job or it did not stop within --timeout; 2 usage.
"""

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import sys
import time

from . import jobstate
from .args import UsageError
from .supervisor import describe_status

EXIT_OK, EXIT_NOT_RUNNING, EXIT_USAGE = 0, 1, 2
STOP_TIMEOUT_S = 120  # the final checkpoint's grace (60 s by default) and the stop's, with room


def parser(command):
    what = {"status": "Prints a job's state: its processes with hosts and pids, alive or not, the step out of the "
                      "total, samples/s, loss and ETA (from RUNDIR/metrics.jsonl), the last complete checkpoint. "
                      "Exit status 0 while the job runs, 1 when RUNDIR holds no running job.",
            "stop": "Stops a running job as SIGTERM to its launcher does (with --checkpoint-dir: after a final "
                    "checkpoint) and waits until it has. Exit status 0 once stopped, 1 when RUNDIR holds no "
                    "running job or it did not stop within --timeout."}[command]
    p = argparse.ArgumentParser(prog=f"launch/launch.sh {command}", add_help=True, allow_abbrev=False,
                                description=what + " Run it on the host of the job's launcher.")
    p.add_argument("run_dir", nargs="?", metavar="RUNDIR",
                   help="the job's run directory (default: the newest of your runs under <repo>/runs)")
    if command == "stop":
        p.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S, metavar="S",
                       help=f"seconds to wait for the job to stop (default {STOP_TIMEOUT_S}: a final checkpoint "
                            "may take PSTRAIN_CHECKPOINT_GRACE, 60 s by default)")
    return p


def find_run_dir(given, repo):
    if given:
        if not os.path.isdir(given):
            raise UsageError(f"{given} is not a directory")
        return os.path.realpath(given)
    runs = os.path.join(repo, "runs")
    states = {}  # run directory: its state file's stat
    try:
        for d in os.listdir(runs):
            with contextlib.suppress(OSError):
                states[os.path.join(runs, d)] = os.stat(os.path.join(runs, d, jobstate.FILE_NAME))
    except OSError:
        pass
    if not states:
        raise UsageError(f"no RUNDIR given, and no run under {runs} (give the job's --run-dir)")
    # Only this user's runs: on a shared checkout the newest run may be a colleague's job, and
    # `stop` must never pick that one by default.
    mine = {d: st for d, st in states.items() if st.st_uid == os.getuid()}
    if not mine:
        raise UsageError(f"no RUNDIR given, and none of the {len(states)} runs under {runs} is yours "
                         "(give the job's --run-dir)")
    return max(mine, key=lambda d: mine[d].st_mtime)


def pid_alive(pid):
    """pid runs (not a zombie) on this host."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def launcher_running(state):
    """(running, why not): the launcher of `state` still runs (it is on this host)."""
    launcher = state["launcher"]
    if state.get("ended"):
        return False, "it has ended"
    if launcher["host"] != socket.gethostname():
        return None, f"its launcher runs on host {launcher['host']} (pid {launcher['pid']}): run this there"
    try:
        with open(f"/proc/{launcher['pid']}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        cmdline = b""
    if b"pstrain_launch" in cmdline and pid_alive(launcher["pid"]):
        return True, ""
    return False, f"its launcher (pid {launcher['pid']}) is gone without recording an end (killed?)"


def duration(seconds):
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def last_records(run_dir):
    """The last progress, epoch and summary records of RUNDIR/metrics.jsonl (None where there is
    none), and the file's age in s."""
    path = os.path.join(run_dir, "metrics.jsonl")
    last = {"progress": None, "epoch": None, "summary": None}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if isinstance(record, dict) and record.get("kind") in last:
                    last[record["kind"]] = record
        age = time.time() - os.path.getmtime(path)
    except OSError:
        return None, None, None, None
    return last["progress"], last["epoch"], last["summary"], age


def evaluation_text(record):
    """The test figures of an epoch or summary record, as a user reads them: a click-through-rate
    model's AUC and log loss, a classifier's accuracy, a regression's RMSE; "" without them."""
    if not record or record.get("test_loss") is None:
        return ""
    if record.get("test_auc") is not None:
        return f"test AUC {record['test_auc']:.4f}, log loss {record['test_loss']:.4f}"
    if record.get("test_accuracy") is not None:
        return f"test accuracy {record['test_accuracy']:.4f}"
    if record.get("test_rmse") is not None:
        return f"test RMSE {record['test_rmse']:.4f}"
    return f"test loss {record['test_loss']:.4f}"


def epoch_text(record):
    """"epoch 2: test AUC 0.7012, log loss 0.4813" for the last epoch record ("epoch 3 (partial)"
    for one a stop cut short), or ""."""
    figures = evaluation_text(record)
    if not figures:
        return ""
    return f"epoch {record.get('epoch')}{' (partial)' if record.get('partial') else ''}: {figures}"


# The chief's line giving the job's length (worker/train/trainer.cc).
TOTAL_STEPS = re.compile(r"\btraining ([0-9]+) steps")


def total_steps(run_dir):
    """The chief's "training N steps" (its last, after a restart), or None."""
    total = None
    try:
        with open(os.path.join(run_dir, "w0.log"), encoding="utf-8", errors="replace") as f:
            for line in f:
                match = TOTAL_STEPS.search(line)
                if match:
                    total = int(match.group(1))
    except OSError:
        pass
    return total


def last_checkpoint(checkpoint_dir):
    """(path, step) of the newest complete checkpoint (with its MANIFEST), or None."""
    if not checkpoint_dir:
        return None
    try:
        versions = sorted(d for d in os.listdir(checkpoint_dir) if re.fullmatch(r"v[0-9]{10}", d))
    except OSError:
        return None
    for name in reversed(versions):
        if os.path.isfile(os.path.join(checkpoint_dir, name, "MANIFEST")):
            return os.path.join(checkpoint_dir, name), int(name[1:])
    return None


def eta_s(progress, total, age):
    """Seconds left: the steps left at the progress record's ms per step, less the `age` (s) of
    the record; None without a total or a step time."""
    ms = progress.get("ms_per_step")
    if not total or not ms:
        return None
    return max(total - progress.get("step", 0), 0) * ms / 1000.0 - age


def progress_line(run_dir):
    progress, epoch, summary, age = last_records(run_dir)
    if summary is not None:
        figures = evaluation_text(summary)
        return (f"{'stopped' if summary.get('stopped') else 'finished'}: {summary.get('steps')} steps, "
                + (f"{figures}, " if figures else "") + f"{summary.get('samples_per_s', 0):,.0f} samples/s")
    if progress is None:
        return "no progress yet (no progress record in RUNDIR/metrics.jsonl)"
    step, total = progress.get("step", 0), total_steps(run_dir)
    text = f"step {step}" + (f"/{total} ({100.0 * step / total:.1f}%)" if total else "")
    text += f", epoch {progress.get('epoch')}, {progress.get('samples_per_s', 0):,.0f} samples/s"
    if progress.get("loss") is not None:
        text += f", loss {progress['loss']:.4f}"
    eta = eta_s(progress, total, age)
    if eta is not None:
        text += f", ETA {duration(eta)}"
    if progress.get("straggler"):
        text += f"; {progress['straggler']}"
    if epoch_text(epoch):
        text += f"; {epoch_text(epoch)}"
    return text + f" (as of {duration(age)} ago)"


def process_lines(state, running):
    lines = []
    width = max((len(p["label"]) for p in state["processes"]), default=0)
    for p in state["processes"]:
        if p.get("status") is not None:
            what = describe_status(p["status"])
        elif running:
            what = "alive" if pid_alive(p["pid"]) else "gone"
        else:
            what = "not running"
        via = "" if p.get("via") == "local" else f" (its {p.get('via')} pid)"
        restarts = f", restarted {p['restarts']} time(s)" if p.get("restarts") else ""
        lines.append(f"  {p['label']:<{width}}  on {p['host']}  pid {p['pid']}{via}  {what}{restarts}")
    return lines


def show(run_dir):
    state = jobstate.load(run_dir)
    if state is None:
        print(f"{run_dir}: no job started by launch.sh here (no readable {jobstate.FILE_NAME})")
        return EXIT_NOT_RUNNING
    running, why = launcher_running(state)
    launcher, job = state["launcher"], state["job"]
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(launcher["started"]))
    print(f"run directory {run_dir}")
    ps = f"{job['num_ps']} PS + " if job.get("num_ps") else ""
    print(f"job: {job['mode']}, {ps}{job['num_workers']} worker(s), launcher pid {launcher['pid']} on "
          f"{launcher['host']} ({launcher['kind']}), started {started}")
    if running:
        print(f"state: running for {duration(time.time() - launcher['started'])}")
    elif state.get("ended"):
        ended = state["ended"]
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ended["time"]))
        print(f"state: not running: ended {at} with exit status {ended['exit_code']} ({ended['why']})")
    else:
        print(f"state: {'unknown' if running is None else 'not running'}: {why}")
    print(f"progress: {progress_line(run_dir)}")
    checkpoint = last_checkpoint(job.get("checkpoint_dir"))
    if job.get("checkpoint_dir"):
        print(f"last checkpoint: {checkpoint[0]} (step {checkpoint[1]})" if checkpoint else
              f"last checkpoint: none complete yet in {job['checkpoint_dir']}")
    print("processes:")
    for line in process_lines(state, running):
        print(line)
    return EXIT_OK if running else EXIT_NOT_RUNNING


def stop(run_dir, timeout):
    state = jobstate.load(run_dir)
    if state is None:
        print(f"launch: {run_dir}: no job started by launch.sh here (no readable {jobstate.FILE_NAME})")
        return EXIT_NOT_RUNNING
    running, why = launcher_running(state)
    if not running:
        print(f"launch: {run_dir} holds no running job: {why}")
        return EXIT_NOT_RUNNING
    pid = state["launcher"]["pid"]
    checkpointing = bool(state["job"].get("checkpoint_dir"))
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        print(f"launch: the launcher (pid {pid}) exited before it could be stopped")
        return EXIT_NOT_RUNNING
    print(f"launch: sent SIGTERM to the launcher (pid {pid}) of {run_dir}; "
          + ("it writes a final checkpoint, then stops the job" if checkpointing else "it stops the job"), flush=True)
    deadline = time.monotonic() + timeout
    said = time.monotonic()
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            print(f"launch: the job has not stopped within {duration(timeout)}; it is still running "
                  f"(launch.sh status {run_dir})")
            return EXIT_NOT_RUNNING
        if time.monotonic() - said >= 10:
            print("launch: still stopping...", flush=True)
            said = time.monotonic()
        time.sleep(0.1)  # polling a process that is not our child: nothing to wait on
    ended = (jobstate.load(run_dir) or {}).get("ended")
    if ended:
        print(f"launch: stopped: exit status {ended['exit_code']} ({ended['why']})")
    else:
        print("launch: stopped (its launcher recorded no end)")
    return EXIT_OK


def main(argv, repo):
    command = argv[0]
    try:
        flags = parser(command).parse_args(argv[1:])
        run_dir = find_run_dir(flags.run_dir, repo)
        if command == "stop" and flags.timeout <= 0:
            raise UsageError("--timeout must be > 0")
    except UsageError as e:
        print(f"launch: {command}: {e} (see launch/launch.sh {command} --help)", file=sys.stderr)
        return EXIT_USAGE
    return show(run_dir) if command == "status" else stop(run_dir, flags.timeout)
