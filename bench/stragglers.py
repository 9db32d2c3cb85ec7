#!/usr/bin/env python3
"""bench/stragglers.py: sync, backup workers, ssp and async with one worker slowed down, in one run.

Trains the default job (configs/fashion_mlp.cfg: MLP 784-256-128-10 on Fashion-MNIST, Adam, batch
64 per worker) with 1 PS and --workers workers (default 3), the last of which gets
`--slowdown F` (default 3: its compute takes F times as long, the worker sleeping F-1 times its
compute after each step's, so it leaves its core to the others; the others run normally), in each
of these configurations:

    sync-noslow  sync without a straggler (a reference row: what the straggler costs sync)
    sync         sync, the baseline every ratio is against
    backup1      sync --backup-workers 1 (a step is applied once N-1 workers pushed it)
    ssp2, ssp4   --mode ssp --staleness 2 / 4
    async        --mode async

It starts the PS and the workers itself (launch.sh passes the same flags to every process, and only
one worker may be slowed down), each configuration --repeat times (default 1), alternating (the
order rotates every round), and reads the logs:

* to_target_s: seconds from the chief's first step to the end of the first epoch whose test
  accuracy (the chief evaluates the test set at each epoch's end) is >= --target (default 0.86,
  which sync reaches at the second of 5 epochs); `epoch` says which one. Only epoch ends are
  evaluated, so this is only as fine as one epoch.
* speedup = sync's to_target_s / this row's (> 1: reaches the target sooner than sync).
* final_acc: the summary's test accuracy; acc_diff = final_acc - sync's final_acc.
* samples_per_s: the chief's summary (samples the PS applied: backup workers' dropped pushes and
  a skipped step do not count); train_s: the chief's first step to its summary line; job_s: to
  the PS's last line (async: the straggler finishes its steps after the chief).
* counters from the PS's last line (backup workers' late pushes dropped; ssp's largest lead of a
  worker over the slowest; async's staleness mean and max, in versions), ssp's staleness from the
  chief's summary, and the steps the slowed-down worker skipped to catch up (backup workers).

With --repeat R > 1 every figure is the median of the R runs and ratios are those of the medians.
Every process is killed when the script stops (Ctrl-C, SIGTERM, a failed process, --timeout), and
a process whose exit status is not 0 stops the experiment with its log's end.

    python3 bench/stragglers.py                               # 5 epochs, --slowdown 3, one round
    python3 bench/stragglers.py --repeat 3 --slowdown 6 --target 0.87 --json
    python3 bench/stragglers.py --configs sync,async --steps 40 --target 0.3   # a smoke run
    python3 bench/stragglers.py -- --data-dir /data/fashion   # flags after -- go to every process

Needs a built pstrain (--build-dir, default $PSTRAIN_BUILD_DIR or build/) and the data where the
binaries find it by default (or --data-dir after --).
"""
import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (job flags, slowed-down worker or not)
CONFIGS = {
    "sync-noslow": ([], False),
    "sync": ([], True),
    "backup1": (["--backup-workers", "1"], True),
    "ssp2": (["--mode", "ssp", "--staleness", "2"], True),
    "ssp4": (["--mode", "ssp", "--staleness", "4"], True),
    "async": (["--mode", "async"], True),
}
DEFAULT_CONFIGS = "sync-noslow,sync,backup1,ssp2,ssp4,async"


class Failed(Exception):
    pass


def die(message, code=2):
    print(f"stragglers: {message}", file=sys.stderr)
    sys.exit(code)


# ------------------------------------------------------------------------------------- processes

try:
    _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
except OSError:
    _LIBC = None


def _child_setup():
    """In the child before exec: die with SIGKILL when this script dies, however it dies."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Job:
    """One configuration's processes: started, watched, and all killed on the way out."""

    def __init__(self, directory):
        self.dir = directory
        self.procs = []  # (name, Popen)

    def spawn(self, name, argv):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        try:
            # A session of its own: Ctrl-C reaches this script only, which then stops everything.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_child_setup, cwd=REPO)
        except OSError as e:
            raise Failed(f"cannot start {name}: {e}") from None
        finally:
            log.close()
        self.procs.append((name, proc))
        with open(os.path.join(self.dir, "cmd.txt"), "a") as f:
            f.write(name + ": " + " ".join(argv) + "\n")
        return proc

    def log(self, name):
        try:
            with open(os.path.join(self.dir, name + ".log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def tails(self, lines=15):
        out = []
        for name, _ in self.procs:
            text = self.log(name).splitlines()[-lines:]
            out.append(f"--- {name}.log (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(out)

    def check(self):
        """Raises Failed when a process exited with a status other than 0; True once all exited."""
        done = True
        for name, proc in self.procs:
            rc = proc.poll()
            if rc is None:
                done = False
            elif rc != 0:
                how = f"signal {-rc}" if rc < 0 else f"status {rc}"
                raise Failed(f"{name} exited with {how}")
        return done

    def kill_all(self, grace=3.0):
        alive = [p for _, p in self.procs if p.poll() is None]
        for p in alive:
            try:
                p.terminate()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in alive:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_once(args, name, round_index, work):
    """Runs one configuration to its end; returns the chief's and the PS's logs."""
    flags, slowed = CONFIGS[name]
    directory = os.path.join(work, f"{round_index}-{name}")
    os.makedirs(directory)
    common = ["--config", args.config, "--num-ps", "1", "--num-workers", str(args.workers),
              "--epochs", str(args.epochs)] + (["--steps", str(args.steps)] if args.steps else []) + flags
    addr_file = os.path.join(directory, "ps0.addr")
    ipc = f"@pstrain-stragglers-{os.getpid()}-{round_index}-{name}-ps0"
    job = Job(directory)
    deadline = time.monotonic() + args.timeout
    try:
        ps = job.spawn("ps0", [args.ps_bin] + common + ["--index", "0", "--port", "0", "--port-file", addr_file] +
                       (["--ipc", ipc] if args.transport == "ipc" else []) + args.extra)
        address = ""
        while not address:
            if ps.poll() is not None or time.monotonic() > deadline:
                raise Failed("ps0 did not report its address" + (f" (exited with {ps.returncode})" if ps.poll() is not None else ""))
            try:
                with open(addr_file) as f:
                    address = f.read().strip()
            except OSError:
                pass
            time.sleep(0.02)
        hosts = f"ipc://{ipc}" if args.transport == "ipc" else address
        for i in range(args.workers):
            slow = ["--slowdown", str(args.slowdown)] if slowed and i == args.workers - 1 else []
            job.spawn(f"w{i}", [args.worker_bin] + common + ["--index", str(i), "--ps-hosts", hosts] + slow + args.extra)
        while not job.check():
            if time.monotonic() > deadline:
                raise Failed(f"did not finish within --timeout {args.timeout:g} s")
            time.sleep(0.05)
        return job.log("w0"), job.log("ps0"), job.log(f"w{args.workers - 1}")
    except Failed as e:
        raise Failed(f"{name} (round {round_index + 1}): {e}; commands and logs in {directory}\n{job.tails()}") from None
    finally:
        job.kill_all()


# ---------------------------------------------------------------------------------------- logs

TIMESTAMP = re.compile(r"^(\d\d):(\d\d):(\d\d(?:\.\d+)?) ")


def stamp(line):
    m = TIMESTAMP.match(line)
    return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3)) if m else None


def since(t0, t):
    return (t - t0) % 86400.0  # across midnight too


def number(pattern, text, kind=float):
    m = re.search(pattern, text)
    return kind(m.group(1)) if m else None


def parse(chief, ps, straggler, target):
    """The figures of one run from the chief's, the PS's and the slowed-down worker's logs."""
    t0 = None
    epochs = []  # (epoch, seconds since t0, test accuracy)
    summary = None
    summary_t = None
    for line in chief.splitlines():
        t = stamp(line)
        if t0 is None and re.search(r" w0: training \d+ steps", line):
            t0 = t
        m = re.search(r"epoch (\d+) done: .*; test loss \S+ acc ([0-9.]+)", line)
        if m and t0 is not None:
            epochs.append((int(m.group(1)), since(t0, t), float(m.group(2))))
        if " summary: mode=" in line:
            summary, summary_t = line, t
    if t0 is None or summary is None or not epochs:
        raise Failed("the chief's log has no 'training' line, epoch result or summary:\n" + chief[-2000:])
    last = [line for line in ps.splitlines() if re.search(r"all \d+ workers done at version \d+", line)]
    if not last:
        raise Failed("the PS's log has no 'all workers done' line:\n" + ps[-2000:])
    last = last[-1]
    reached = next(((e, s) for e, s, acc in epochs if acc >= target), None)
    run = {
        "to_target_s": round(reached[1], 3) if reached else None,
        "target_epoch": reached[0] if reached else None,
        "final_acc": number(r" test_accuracy=([0-9.]+)", summary),
        "samples_per_s": number(r" samples_per_s=([0-9.]+)", summary),
        "train_s": round(since(t0, summary_t), 3),
        "job_s": round(since(t0, stamp(last)), 3),
        "epoch_acc": [acc for _, _, acc in epochs],
        "updates": number(r"done at version (\d+)", last, int),
    }
    counters = {
        "dropped": number(r"late pushes dropped: (\d+)", last, int),
        "lead_max": number(r"largest lead of a worker over the slowest was (\d+)", last, int),
        "stale_mean": number(r"async: staleness mean ([0-9.e+-]+)", last),
        "stale_max": number(r"async: staleness mean \S+ max (\d+)", last, int),
        "skipped": number(r"skipped_steps=(\d+)", straggler, int),
    }
    if counters["stale_mean"] is None:  # ssp: the PS reports its lead; the chief the staleness it saw
        counters["stale_mean"] = number(r"staleness mean ([0-9.]+) max", summary)
        counters["stale_max"] = number(r"staleness mean \S+ max (\d+)", summary, int)
    run.update({k: v for k, v in counters.items() if v is not None})
    return run


# ------------------------------------------------------------------------------------- figures

def median(values):
    """Median, a run that never reached the target counting as infinitely late."""
    values = [math.inf if v is None else v for v in values]
    m = statistics.median(values) if values else None
    return None if m is None or m == math.inf else m


COUNTERS = ("dropped", "skipped", "lead_max", "stale_mean", "stale_max")


def summarise(name, runs, args):
    row = {"config": name, "flags": CONFIGS[name][0], "slowed_worker": args.workers - 1 if CONFIGS[name][1] else None}
    for key in ("to_target_s", "target_epoch", "final_acc", "samples_per_s", "train_s", "job_s", "updates"):
        row[key] = median([r.get(key) for r in runs])
    for key in COUNTERS:
        if any(key in r for r in runs):
            row[key] = median([r.get(key, 0) for r in runs])
    row["runs"] = runs
    return row


def fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def counters_text(row):
    parts = []
    if "dropped" in row:
        parts.append(f"dropped={row['dropped']:.0f}")
    if "skipped" in row:
        parts.append(f"skipped_steps={row['skipped']:.0f}")
    if "lead_max" in row:
        parts.append(f"lead_max={row['lead_max']:.0f}")
    if "stale_mean" in row:
        parts.append(f"staleness_mean={row['stale_mean']:.2f} max={row['stale_max']:.0f}")
    return " ".join(parts) or "-"


def print_table(rows, args):
    slow = f"w{args.workers - 1} with --slowdown {args.slowdown:g}"
    length = f"--steps {args.steps}" if args.steps else f"{args.epochs} epochs"
    print(f"# bench/stragglers: {os.path.relpath(args.config, REPO)}, {args.workers} workers + 1 PS ({args.transport}), "
          f"{slow} (sync-noslow: none), {length}, target test accuracy {args.target:g}")
    print(f"# {'medians of %d alternating runs' % args.repeat if args.repeat > 1 else 'one run each'}; "
          "to_target_s: chief's first step -> first epoch end with test acc >= target (epoch: which)")
    print("# speedup = sync's to_target_s / the row's (>1: sooner); acc_diff = final_acc - sync's; "
          "samples_per_s: applied, chief's summary")
    header = (f"{'config':<12} {'to_target_s':>11} {'epoch':>5} {'speedup':>7} {'final_acc':>9} {'acc_diff':>8} "
              f"{'samples_per_s':>13} {'train_s':>7} {'job_s':>6}  counters")
    print(header)
    for row in rows:
        print(f"{row['config']:<12} {fmt(row['to_target_s'], '.2f', 'never'):>11} {fmt(row['target_epoch'], '.0f'):>5} "
              f"{fmt(row['speedup'], '.2f'):>7} {row['final_acc']:>9.4f} {row['acc_diff']:>+8.4f} "
              f"{row['samples_per_s']:>13.0f} {row['train_s']:>7.2f} {row['job_s']:>6.2f}  {counters_text(row)}")
    if args.repeat > 1:
        for row in rows:
            runs = row["runs"]
            reached = ", ".join("never" if r["to_target_s"] is None else f"{r['to_target_s']:.2f} (epoch {r['target_epoch']})"
                                for r in runs)
            print(f"# runs of {row['config']}: to_target_s=[{reached}] final_acc={[r['final_acc'] for r in runs]} "
                  f"job_s={[round(r['job_s'], 2) for r in runs]}")


# ---------------------------------------------------------------------------------------- main

def parse_args():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     epilog="Flags after -- go unchanged to every process (e.g. -- --data-dir DIR).")
    parser.add_argument("--epochs", type=int, default=5, help="epochs of every run (default 5)")
    parser.add_argument("--steps", type=int, default=0, help="stop every run after this many steps (default 0: all epochs)")
    parser.add_argument("--slowdown", type=float, default=3.0, help="the slowed-down worker's --slowdown (default 3)")
    parser.add_argument("--target", type=float, default=0.86, help="test accuracy to reach (default 0.86)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of every configuration, alternating (default 1)")
    parser.add_argument("--workers", type=int, default=3, help="workers; the last one is slowed down (default 3)")
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help=f"comma-separated, from {', '.join(CONFIGS)} (default all; sync is always run)")
    parser.add_argument("--build-dir", default=os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(REPO, "build"),
                        help="where pstrain-ps and pstrain-worker are (default $PSTRAIN_BUILD_DIR, else build/)")
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "fashion_mlp.cfg"),
                        help="job config (default configs/fashion_mlp.cfg)")
    parser.add_argument("--transport", choices=("ipc", "tcp"), default="ipc",
                        help="how workers reach the PS (default ipc, as launch.sh)")
    parser.add_argument("--timeout", type=float, default=0,
                        help="seconds one run may take before all its processes are killed "
                             "(default 60 + 15 x epochs x slowdown)")
    parser.add_argument("--logs", help="keep every run's logs under this directory (default: a temporary one, "
                                       "removed unless a run failed)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args(argv)
    args.extra = extra
    names = [c for c in args.configs.split(",") if c]
    unknown = [c for c in names if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {', '.join(unknown)} (known: {', '.join(CONFIGS)})")
    if "sync" not in names:
        names.insert(0, "sync")
    args.names = list(dict.fromkeys(names))
    if args.workers < 2 or args.repeat < 1 or args.epochs < 1 or args.steps < 0 or args.slowdown < 1:
        parser.error("need --workers >= 2, --repeat >= 1, --epochs >= 1, --steps >= 0, --slowdown >= 1")
    if "backup1" in args.names and args.workers < 2:
        parser.error("backup1 needs at least 2 workers")
    if not args.timeout:
        args.timeout = 60 + 15 * args.epochs * args.slowdown
    args.config = os.path.abspath(args.config)
    args.ps_bin = os.path.join(args.build_dir, "pstrain-ps")
    args.worker_bin = os.path.join(args.build_dir, "pstrain-worker")
    for path in (args.ps_bin, args.worker_bin, args.config):
        if not os.path.isfile(path):
            die(f"{path} not found (build first, or --build-dir / --config)")
    return args


def main():
    args = parse_args()

    def stop(signum, _frame):
        raise SystemExit(128 + signum)  # unwinds through every finally: the processes are killed

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    if args.logs:
        os.makedirs(args.logs, exist_ok=True)
        work = tempfile.mkdtemp(prefix="stragglers-", dir=args.logs)
    else:
        work = tempfile.mkdtemp(prefix="pstrain-stragglers-")
    runs = {name: [] for name in args.names}
    failed = True
    try:
        for r in range(args.repeat):
            shift = r % len(args.names)
            for name in args.names[shift:] + args.names[:shift]:
                chief, ps, straggler = run_once(args, name, r, work)
                runs[name].append(parse(chief, ps, straggler, args.target))
                if not args.json:
                    print(f"# round {r + 1}/{args.repeat} {name}: done", file=sys.stderr, flush=True)
        failed = False
    except Failed as e:
        print(f"stragglers: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("stragglers: interrupted; every process was stopped", file=sys.stderr)
        sys.exit(130)
    finally:
        if failed:
            print(f"stragglers: logs kept in {work}", file=sys.stderr)
        elif not args.logs:
            shutil.rmtree(work, ignore_errors=True)

    rows = [summarise(name, runs[name], args) for name in args.names]
    base = next(row for row in rows if row["config"] == "sync")
    for row in rows:
        row["speedup"] = (base["to_target_s"] / row["to_target_s"]
                          if base["to_target_s"] is not None and row["to_target_s"] is not None else None)
        row["acc_diff"] = row["final_acc"] - base["final_acc"]
    if args.json:
        settings = {k: getattr(args, k) for k in ("epochs", "steps", "slowdown", "target", "repeat", "workers", "transport",
                                                  "timeout")}
        settings["config"] = os.path.relpath(args.config, REPO)
        settings["extra"] = args.extra
        print(json.dumps({"settings": settings, "rows": rows}))
    else:
        print_table(rows, args)


if __name__ == "__main__":
    main()
