#!/usr/bin/env python3
"""bench/soak.py: a long run of a job, with every process's memory, file descriptors and threads
sampled, to find leaks that a short test never shows.

Starts launch/launch.sh (the default job, configs/fashion_mlp.cfg, unless flags after -- say
otherwise) with --num-ps and --num-workers, for --minutes minutes (the job itself is given epochs
enough to outlast it, then stopped with SIGTERM), and every --interval seconds (default 60)
samples, for each process named in RUNDIR/cmd.txt, from /proc/PID:

    rss_kib   VmRSS of /proc/PID/status
    fds       entries of /proc/PID/fd
    threads   Threads of /proc/PID/status

It prints a line per sample and, at the end, a row per process: its values at the first sample
taken after --warmup seconds (default: one interval; start-up allocations come before it), the
largest after that, and the growth in percent. A process whose value grows by more than
--limit percent (default 5) is named in a FAIL line, and the exit status is 1 (0 when none grew,
2 when the job could not be run). A process that exits before the end stops the run (exit 2).

    python3 bench/soak.py --minutes 30                             # the default job, 1 PS + 2 workers
    python3 bench/soak.py --minutes 10 --num-ps 4 --num-workers 16
    python3 bench/soak.py --minutes 1 --interval 5 -- --batch-size 32   # a short look
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_status(pid):
    """{'rss_kib': ..., 'fds': ..., 'threads': ...} of a live process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return {"rss_kib": int(fields["VmRSS"].split()[0]), "fds": fds, "threads": int(fields["Threads"])}


def processes(run_dir):
    """{name: pid} from RUNDIR/cmd.txt ("name<TAB>pid<TAB>command" lines)."""
    found = {}
    try:
        with open(os.path.join(run_dir, "cmd.txt"), encoding="utf-8") as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) >= 2 and parts[1].isdigit():
                    found[parts[0]] = int(parts[1])
    except FileNotFoundError:
        pass
    return found


def growth(first, largest):
    return 100.0 * (largest - first) / first if first > 0 else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30, help="how long the job runs (default 30)")
    parser.add_argument("--interval", type=float, default=60, help="seconds between samples (default 60)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds before the reference sample (default: one interval)")
    parser.add_argument("--limit", type=float, default=5, help="growth in percent that fails (default 5)")
    parser.add_argument("--num-ps", type=int, default=1)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("job", nargs="*", help="flags after -- go to every process (launch.sh's job flags)")
    args = parser.parse_args()
    warmup = args.interval if args.warmup is None else args.warmup
    run_dir = tempfile.mkdtemp(prefix="pstrain-soak-")
    command = ["bash", os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--run-dir", run_dir,
               "--num-ps", str(args.num_ps), "--num-workers", str(args.num_workers),
               "--", "--epochs", "100000", "--log-every", "100000"] + args.job
    print(f"soak: {' '.join(command)}", flush=True)
    launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.monotonic()
    end = start + 60 * args.minutes
    samples = {}  # name -> [(seconds, status)]
    expected = args.num_ps + args.num_workers
    status = 0
    try:
        next_sample = start + min(5.0, args.interval)
        while time.monotonic() < end:
            time.sleep(max(0.0, min(next_sample, end) - time.monotonic()))
            if launcher.poll() is not None:
                print(f"soak: the job ended early (launch.sh exit {launcher.returncode}); logs in {run_dir}")
                return 2
            now = time.monotonic() - start
            procs = processes(run_dir)
            if len(procs) < expected:
                next_sample = time.monotonic() + 1
                continue
            line = []
            for name, pid in sorted(procs.items()):
                st = read_status(pid)
                if st is None:
                    print(f"soak: {name} (pid {pid}) is gone; logs in {run_dir}")
                    return 2
                samples.setdefault(name, []).append((now, st))
                line.append(f"{name} {st['rss_kib'] // 1024}M/{st['fds']}fd/{st['threads']}t")
            print(f"soak: {now / 60:6.1f} min  " + "  ".join(line), flush=True)
            next_sample += args.interval
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGTERM)
            try:
                launcher.wait(timeout=60)
            except subprocess.TimeoutExpired:
                launcher.kill()
    print(f"soak: {args.minutes:g} min, {args.num_ps} PS + {args.num_workers} workers; reference after "
          f"{warmup:g} s; growth of the largest later value over it (limit {args.limit:g}%)")
    print(f"{'process':8} {'rss_kib':>9} {'max':>9} {'%':>6} {'fds':>4} {'max':>4} {'%':>6} "
          f"{'threads':>7} {'max':>4} {'%':>6}")
    for name in sorted(samples):
        series = [st for t, st in samples[name] if t >= warmup]
        if len(series) < 2:
            print(f"{name:8} too few samples after the warm-up")
            status = max(status, 2)
            continue
        first, cells = series[0], []
        for key in ("rss_kib", "fds", "threads"):
            largest = max(st[key] for st in series[1:])
            pct = growth(first[key], largest)
            cells.append((first[key], largest, pct))
            if pct > args.limit:
                print(f"FAIL {name}: {key} grew {pct:.1f}% ({first[key]} -> {largest})")
                status = max(status, 1)
        (r0, r1, rp), (f0, f1, fp), (t0, t1, tp) = cells
        print(f"{name:8} {r0:9d} {r1:9d} {rp:6.1f} {f0:4d} {f1:4d} {fp:6.1f} {t0:7d} {t1:4d} {tp:6.1f}")
    print(f"soak: {'no process grew past the limit' if status == 0 else 'see above'}; logs in {run_dir}")
    return status


if __name__ == "__main__":
    sys.exit(main())
