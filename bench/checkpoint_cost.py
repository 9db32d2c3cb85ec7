#!/usr/bin/env python3
"""bench/checkpoint_cost.py: what checkpointing costs the default job, as a ratio from one run.

Runs the default job (launch/launch.sh: configs/fashion_mlp.cfg, 1 PS + 2 workers) with and
without `--checkpoint-dir DIR --checkpoint-every K` (default 500), alternately --repeat times
(default 3), and prints the median samples/s of each and

    ratio = checkpointing samples/s / plain samples/s      (1.0 = free; the target is >= 0.95)

plus how many checkpoints the checkpointing runs wrote. Alternating runs keep a slow spell of a
noisy machine from landing on one side only. Needs a built pstrain (launch.sh --no-setup is used).

    python3 bench/checkpoint_cost.py                     # 10 epochs, as the default job
    python3 bench/checkpoint_cost.py --epochs 3 --every 500 --repeat 3 --json
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_job(job_flags, work, name):
    """samples/s from the chief's summary line of one launch.sh run."""
    argv = ["bash", os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--run-dir", os.path.join(work, name),
            "--"] + job_flags
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    match = re.search(r"summary: .*samples_per_s=([0-9.]+)", done.stdout)
    if done.returncode != 0 or not match:
        sys.exit(f"checkpoint_cost: {' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return float(match.group(1)), len(re.findall(r"checkpoint of step [0-9]+ complete", done.stdout))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10, help="epochs of each run (default 10, the default job's)")
    parser.add_argument("--every", type=int, default=500, help="--checkpoint-every of the checkpointing runs (default 500)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind, alternating (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="pstrain-ckpt-bench-")
    plain, checkpointing, written = [], [], []
    try:
        for r in range(args.repeat):
            plain.append(run_job(["--epochs", str(args.epochs)], work, f"plain{r}")[0])
            ckpt = os.path.join(work, f"ckpt{r}")
            rate, count = run_job(["--epochs", str(args.epochs), "--checkpoint-dir", ckpt,
                                   "--checkpoint-every", str(args.every)], work, f"checkpointing{r}")
            checkpointing.append(rate)
            written.append(count)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = statistics.median(checkpointing) / statistics.median(plain)
    result = {"epochs": args.epochs, "every": args.every, "repeat": args.repeat,
              "plain_samples_per_s": statistics.median(plain),
              "checkpointing_samples_per_s": statistics.median(checkpointing),
              "checkpoints_per_run": statistics.median(written), "ratio": round(ratio, 3),
              "plain_runs": plain, "checkpointing_runs": checkpointing}
    if args.json:
        print(json.dumps(result))
        return
    print(f"# default job, {args.epochs} epochs, medians of {args.repeat} alternating runs; ratio = checkpointing / plain")
    print(f"plain          samples_per_s={result['plain_samples_per_s']:.0f}  runs={[round(x) for x in plain]}")
    print(f"checkpointing  samples_per_s={result['checkpointing_samples_per_s']:.0f}  runs={[round(x) for x in checkpointing]}"
          f"  checkpoints_per_run={result['checkpoints_per_run']:.0f} (every {args.every} steps)")
    print(f"ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
