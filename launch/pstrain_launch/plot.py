"""`launch.sh plot [RUNDIR]`: a run's curves and step-time breakdown as PNG files.

Reads the chief's metrics file (RUNDIR/metrics.jsonl; docs/operations.md, "Metrics file") and
writes RUNDIR/curves.png (loss and accuracy against the global step: training from the progress
records, test from the epoch records) and RUNDIR/breakdown.png (the step time split into its
parts against the step: the means over all workers that the progress records carry, stacked).
Needs matplotlib (Debian: python3-matplotlib); draws with its Agg backend, so no display is needed.

Exit status: 0 written; 1 nothing to plot (no metrics file, or no progress record in it) or a
file could not be written; 2 usage; 3 matplotlib is missing.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys

from .args import UsageError
from .status import find_run_dir

EXIT_OK, EXIT_NOTHING, EXIT_USAGE, EXIT_NO_MATPLOTLIB = 0, 1, 2, 3
# Debian's python3-matplotlib serves this interpreter, not a pyenv's or a virtual environment's.
SYSTEM_PYTHON = "/usr/bin/python3"


def python_with_matplotlib():
    """This interpreter when it can import matplotlib; else Debian's /usr/bin/python3 when that can
    (the python3 first on PATH may be a pyenv's or a virtual environment's); else None."""
    if importlib.util.find_spec("matplotlib") is not None:
        return sys.executable
    if os.path.realpath(sys.executable) == os.path.realpath(SYSTEM_PYTHON) or not os.access(SYSTEM_PYTHON, os.X_OK):
        return None
    try:
        probe = subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return SYSTEM_PYTHON if probe.returncode == 0 else None


def run_with(python, argv):
    """`launch.sh plot argv` under another interpreter (this package on its path); its exit status."""
    launch_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (launch_dir, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([python, "-m", "pstrain_launch", "plot", *argv], stdin=subprocess.DEVNULL, env=env).returncode
# The parts of a step (the progress records' breakdown), in the order they happen.
PARTS = ("data", "compute", "push", "wait", "pull", "eval", "ckpt")


def outputs(run_dir):
    return [os.path.join(run_dir, "curves.png"), os.path.join(run_dir, "breakdown.png")]


def parser():
    p = argparse.ArgumentParser(prog="launch/launch.sh plot", allow_abbrev=False, description=(
        "Writes RUNDIR/curves.png (training and test loss and accuracy against the step) and RUNDIR/breakdown.png "
        "(the mean step time over all workers split into data, compute, push, wait, pull, eval and ckpt, "
        "against the step) from the chief's metrics file. Works while the job runs, too. Needs matplotlib "
        "(Debian: python3-matplotlib). Exit status 0 written, 1 nothing to plot, 2 usage, 3 no matplotlib."))
    p.add_argument("run_dir", nargs="?", metavar="RUNDIR",
                   help="the job's run directory (default: the newest of your runs under <repo>/runs)")
    p.add_argument("--metrics-file", metavar="FILE",
                   help="the chief's metrics file, where the job gave --metrics-file (default: RUNDIR/metrics.jsonl)")
    return p


def read_records(path):
    """(progress records, epoch records) of a JSON Lines metrics file; a line being written is skipped."""
    progress, epochs = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or not isinstance(record.get("step"), (int, float)):
                continue
            if record.get("kind") == "progress":
                progress.append(record)
            elif record.get("kind") == "epoch":
                epochs.append(record)
    return progress, epochs


def series(records, key):
    """(steps, values) of the records that have `key`."""
    points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def lower_panel(epochs):
    """The lower chart's figure: "auc" for a click-through-rate job (its epochs have test_auc),
    whose steps count no right answers, else "accuracy"."""
    return "auc" if any(isinstance(e.get("test_auc"), (int, float)) for e in epochs) else "accuracy"


def curves(pyplot, progress, epochs, title, path):
    figure, (loss, lower) = pyplot.subplots(2, 1, sharex=True, figsize=(9, 7), dpi=100)
    lower_key = lower_panel(epochs)
    whole = [e for e in epochs if not e.get("partial")]
    partial = [e for e in epochs if e.get("partial")]  # the epoch a stop or --steps cut short
    for axes, key, name in ((loss, "loss", "loss (log loss)" if lower_key == "auc" else "loss"),
                            (lower, lower_key, "test AUC" if lower_key == "auc" else "accuracy")):
        if lower_key != "auc" or key == "loss":
            axes.plot(*series(progress, key), label="train (each progress line, all workers)", color="tab:blue")
        steps, values = series(whole, f"test_{key}")
        if steps:
            axes.plot(steps, values, "o-", label="test (each epoch's evaluation)", color="tab:orange")
        steps, values = series(partial, f"test_{key}")
        if steps:
            axes.plot(steps, values, "o", fillstyle="none", markersize=9, color="tab:orange",
                      label="test (the last, partial epoch)")
        steps, values = series(whole, f"train_{key}")
        if steps:
            axes.plot(steps, values, "s--", label="train (over each epoch)", color="tab:green", alpha=0.7)
        axes.set_ylabel(name)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="best", fontsize="small")
    lower.set_xlabel("global step")
    figure.suptitle(f"{title}: loss and {'test AUC' if lower_key == 'auc' else 'accuracy'}")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def breakdown(pyplot, progress, title, path):
    timed = [r for r in progress if isinstance(r.get("breakdown"), dict) and r["breakdown"]]
    steps = [r["step"] for r in timed]
    figure, axes = pyplot.subplots(figsize=(9, 5), dpi=100)
    if timed:
        parts = [[float(r["breakdown"].get(f"{part}_ms", 0.0)) for r in timed] for part in PARTS]
        axes.stackplot(steps, parts, labels=PARTS, alpha=0.85)
        axes.plot(steps, [float(r["breakdown"].get("step_ms", 0.0)) for r in timed], color="black",
                  linewidth=1, label="measured step")
        axes.legend(loc="upper left", fontsize="small", ncol=4)
    else:
        axes.text(0.5, 0.5, "no timed step in the metrics file", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlabel("global step")
    axes.set_ylabel("ms per step")
    axes.grid(True, alpha=0.3)
    axes.set_title(f"{title}: step time by part, the mean over all workers\n"
                   "(each worker's own: TensorBoard's w<i> runs, with --tensorboard-dir)", fontsize="medium")
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def main(argv, repo):
    try:
        flags = parser().parse_args(argv)
        run_dir = find_run_dir(flags.run_dir, repo)
    except UsageError as e:
        print(f"launch: plot: {e} (see launch/launch.sh plot --help)", file=sys.stderr)
        return EXIT_USAGE
    metrics = flags.metrics_file or os.path.join(run_dir, "metrics.jsonl")
    try:
        progress, epochs = read_records(metrics)
    except OSError as e:
        print(f"launch: plot: cannot read {metrics}: {e.strerror} (the chief writes it where it runs on the "
              "launcher's host; see docs/operations.md, \"Metrics file\")", file=sys.stderr)
        return EXIT_NOTHING
    if not progress:
        print(f"launch: plot: no progress record in {metrics} yet", file=sys.stderr)
        return EXIT_NOTHING
    python = python_with_matplotlib()
    if python is not None and python != sys.executable:
        return run_with(python, argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as e:
        how = ("install Debian's python3-matplotlib (apt-get install python3-matplotlib; launch/launch.sh's setup "
               "does)")
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
            how += f", which is for /usr/bin/python3: for this python, pip install matplotlib"
        print(f"launch: plot: needs matplotlib, which {sys.executable} cannot import ({e}); {how}", file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    title = os.path.basename(run_dir.rstrip(os.sep))
    curves_png, breakdown_png = outputs(run_dir)
    try:
        curves(pyplot, progress, epochs, title, curves_png)
        breakdown(pyplot, progress, title, breakdown_png)
    except OSError as e:
        print(f"launch: plot: cannot write {e.filename or run_dir}: {e.strerror}", file=sys.stderr)
        return EXIT_NOTHING
    print(f"launch: plot: wrote {curves_png} and {breakdown_png}")
    return EXIT_OK
