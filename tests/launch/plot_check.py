"""`launch.sh plot RUNDIR` (launch/pstrain_launch/plot.py) on finished run directories of the
default job's shape (configs/fashion_mlp.cfg: 2 workers x 64, 10 epochs of 468 steps, a progress
record every 100 steps and at each epoch's end) and of the CNN's (configs/fashion_cnn.cfg: 8
epochs), their metrics files written here as the chief writes them: both PNG files exist, are PNG
files and are not trivially small. Exits 77 (ctest's skip) when matplotlib cannot be imported.

    python3 tests/launch/plot_check.py [-v]
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.join(HERE, "..", "..", "launch", "launch.sh")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIN_PNG_BYTES = 8 * 1024  # an empty 900 x 700 figure with axes and text is well above this


def write_metrics(path, epochs, steps_per_epoch, compute_ms, log_every=100, ctr=False):
    """A metrics file as the chief writes it: progress records every `log_every` steps and at each
    epoch's end, an epoch record after each epoch, a summary; losses falling, accuracies rising.
    ctr: a click-through-rate job's (no accuracies; each epoch's test AUC), stopped within its
    last epoch (that epoch's record partial)."""
    with open(path, "w", encoding="utf-8") as f:
        def put(record):
            f.write(json.dumps(record) + "\n")
        step, t = 0, 0.0
        for epoch in range(1, epochs + 1):
            last_step = steps_per_epoch // 3 if ctr and epoch == epochs else steps_per_epoch
            for epoch_step in range(1, last_step + 1):
                step += 1
                if epoch_step % log_every and epoch_step != last_step:
                    continue
                loss = 0.3 + 2.0 * math.exp(-step / 400.0)
                wait = 1.2 + 0.2 * math.sin(step / 50.0)
                parts = {"data_ms": 0.07, "compute_ms": compute_ms, "push_ms": 0.15, "wait_ms": wait,
                         "pull_ms": 0.06, "eval_ms": 3.0 if epoch_step <= log_every and epoch > 1 else 0.0,
                         "ckpt_ms": 0.0}
                step_ms = sum(parts.values())
                t += step_ms * log_every / 1000.0
                record = {"time_s": t, "kind": "progress", "step": step, "epoch": epoch, "epoch_step": epoch_step,
                          "loss": loss, "accuracy": 1.0 - loss / 3.0, "samples_per_s": 128000.0 / step_ms,
                          "ms_per_step": step_ms, "lr": 0.001, "breakdown": dict(step_ms=step_ms, **parts)}
                if ctr:
                    del record["accuracy"]
                put(record)
            test_loss = 0.35 + 2.0 * math.exp(-step / 500.0)
            record = {"time_s": t, "kind": "epoch", "epoch": epoch, "step": step, "train_loss": test_loss - 0.05,
                      "train_accuracy": 0.95 - test_loss / 3.0, "test_loss": test_loss,
                      "test_accuracy": 0.9 - test_loss / 3.0, "test_samples": 10000}
            if ctr:
                del record["train_accuracy"], record["test_accuracy"]
                record["test_auc"] = 0.8 - test_loss / 10.0
                if last_step < steps_per_epoch:
                    record.update(partial=True, epoch_steps=last_step)
            put(record)
        put({"time_s": t, "kind": "summary", "mode": "sync", "workers": 2, "ps": 1, "steps": step, "seconds": t,
             "samples_per_s": 50000.0, "train_loss": 0.3, "train_accuracy": 0.9, "test_loss": 0.35,
             "test_accuracy": 0.89, "stopped": False, "breakdown": {}})


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pstrain-plot-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def plot(self, run_dir, *flags):
        # launch.sh runs the python3 first on PATH: this one; plot itself moves to Debian's
        # /usr/bin/python3 where only that one can import matplotlib.
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        return subprocess.run(["bash", LAUNCH, "plot", run_dir, *flags], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=120, env=env)

    def check_pngs(self, run_dir):
        for name in ("curves.png", "breakdown.png"):
            path = os.path.join(run_dir, name)
            self.assertTrue(os.path.isfile(path), f"{path} is missing")
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(data[:8], PNG_SIGNATURE, f"{path} is not a PNG file")
            self.assertGreater(len(data), MIN_PNG_BYTES, f"{path} is only {len(data)} bytes")

    def run_dir(self, name):
        path = os.path.join(self.dir, name)
        os.mkdir(path)
        return path

    def test_default_job(self):
        run_dir = self.run_dir("default")
        write_metrics(os.path.join(run_dir, "metrics.jsonl"), epochs=10, steps_per_epoch=468, compute_ms=0.82)
        done = self.plot(run_dir)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn(f"wrote {run_dir}/curves.png and {run_dir}/breakdown.png", done.stdout)
        self.check_pngs(run_dir)

    def test_cnn(self):
        run_dir = self.run_dir("cnn")
        write_metrics(os.path.join(run_dir, "metrics.jsonl"), epochs=8, steps_per_epoch=468, compute_ms=14.0)
        done = self.plot(run_dir)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.check_pngs(run_dir)

    def test_ctr_job_stopped_within_an_epoch(self):
        run_dir = self.run_dir("ctr")
        metrics = os.path.join(run_dir, "metrics.jsonl")
        write_metrics(metrics, epochs=3, steps_per_epoch=300, compute_ms=2.0, log_every=50, ctr=True)
        sys.path.insert(0, os.path.join(HERE, "..", "..", "launch"))
        from pstrain_launch import plot  # noqa: E402
        progress, epochs = plot.read_records(metrics)
        self.assertEqual(plot.lower_panel(epochs), "auc")
        self.assertEqual([e.get("partial", False) for e in epochs], [False, False, True])
        self.assertEqual(plot.lower_panel([{"step": 1, "test_accuracy": 0.5}]), "accuracy")
        done = self.plot(run_dir)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.check_pngs(run_dir)

    def test_metrics_file_elsewhere_and_a_line_being_written(self):
        run_dir = self.run_dir("elsewhere")
        metrics = os.path.join(self.dir, "m.jsonl")
        write_metrics(metrics, epochs=1, steps_per_epoch=300, compute_ms=1.0)
        with open(metrics, "a", encoding="utf-8") as f:
            f.write('{"kind": "progr')
        done = self.plot(run_dir, "--metrics-file", metrics)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.check_pngs(run_dir)

    def test_nothing_to_plot(self):
        run_dir = self.run_dir("empty")
        done = self.plot(run_dir)
        self.assertEqual(done.returncode, 1)
        self.assertIn(f"cannot read {run_dir}/metrics.jsonl", done.stderr)
        with open(os.path.join(run_dir, "metrics.jsonl"), "w", encoding="utf-8") as f:
            f.write("")
        done = self.plot(run_dir)
        self.assertEqual(done.returncode, 1)
        self.assertIn("no progress record", done.stderr)
        self.assertFalse(os.path.exists(os.path.join(run_dir, "curves.png")))

    def test_usage(self):
        done = self.plot(os.path.join(self.dir, "missing"))
        self.assertEqual(done.returncode, 2)
        self.assertIn("is not a directory", done.stderr)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(HERE, "..", "..", "launch"))
    from pstrain_launch.plot import python_with_matplotlib  # noqa: E402
    if python_with_matplotlib() is None:  # neither this python nor Debian's /usr/bin/python3
        print("skipped: no python3 here can import matplotlib (Debian: python3-matplotlib)")
        sys.exit(77)
    unittest.main()
