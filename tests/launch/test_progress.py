"""Unit tests of the launcher's progress bar (launch/pstrain_launch/progress.py) and of bar mode's
routing of lines (supervisor.Output); tests/launch/pty_progress.py runs the launcher under a
pseudo-terminal on a real job."""

import io
import json
import os
import shutil
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))

from pstrain_launch import progress  # noqa: E402
from pstrain_launch.supervisor import Output  # noqa: E402


class ShownTest(unittest.TestCase):
    def test_results_warnings_and_the_rest(self):
        self.assertEqual(progress.shown(b"16:10:00.123 I summary: mode=sync workers=2 test_accuracy=0.89\n"), "result")
        self.assertEqual(progress.shown(b"16:10:00.123 I epoch 3 done: train loss 0.4 acc 0.8; test loss\n"), "result")
        self.assertEqual(progress.shown(b"16:10:00.123 I saved 4 variables to /tmp/p\n"), "result")
        self.assertEqual(progress.shown(b"16:10:00.123 W w1: cannot read the test set\n"), "log")
        self.assertIsNone(progress.shown(b"16:10:00.123 W straggler: w1 is the slowest in 85% of steps\n"))
        self.assertEqual(progress.shown(b"16:10:00.123 E cannot reach ps0\n"), "log")
        self.assertEqual(progress.shown(b"pstrain-worker: unrecognised option 'x' (see --help)\n"), "log")
        self.assertIsNone(progress.shown(b"16:10:00.123 I epoch 1/10 step 100/468 (global 100) loss 0.5\n"))
        self.assertIsNone(progress.shown(b"16:10:00.123 D anything\n"))


class MetricsTailTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pstrain-progress-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "metrics.jsonl")

    def append(self, text):
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text)

    def test_only_new_whole_lines(self):
        self.append(json.dumps({"kind": "progress", "step": 1}) + "\n")  # an earlier job's
        tail = progress.MetricsTail(self.path)
        self.assertEqual(tail.records(), [])
        self.append(json.dumps({"kind": "progress", "step": 2}) + '\n{"kind": "progress", "st')
        self.assertEqual([r["step"] for r in tail.records()], [2])
        self.append('ep": 3}\nnot json\n')
        self.assertEqual([r["step"] for r in tail.records()], [3])
        self.assertEqual(tail.records(), [])

    def test_missing_then_replaced_by_a_shorter_file(self):
        tail = progress.MetricsTail(self.path)
        self.assertEqual(tail.records(), [])
        self.append(json.dumps({"kind": "progress", "step": 10, "pad": "x" * 100}) + "\n")
        self.assertEqual(len(tail.records()), 1)
        os.remove(self.path)
        self.append(json.dumps({"kind": "progress", "step": 1}) + "\n")
        self.assertEqual([r["step"] for r in tail.records()], [1])


RECORD = {"kind": "progress", "step": 600, "epoch": 2, "loss": 0.37712, "samples_per_s": 29067.4, "ms_per_step": 4.0}


class RenderTest(unittest.TestCase):
    def test_line(self):
        line = progress.render(RECORD, 1200, 0.4, 120)
        self.assertEqual(line, "[###############---------------]  50.0%  step 600/1200  29,067 samples/s  "
                               "loss 0.3771  ETA 2 s")

    def test_straggler_unknown_total_narrow_terminal_and_summary(self):
        slow = dict(RECORD, straggler="straggler: w1 is the slowest in 85% of steps (busy 3.1 vs 2.2 ms mean)")
        self.assertIn("slowest w1 (85% of steps)  ETA", progress.render(slow, 1200, 0, 200))
        self.assertEqual(progress.render(RECORD, None, 0, 200), "step 600  29,067 samples/s  loss 0.3771")
        narrow = progress.render(RECORD, 1200, 0, 40)
        self.assertEqual(len(narrow), 39)
        self.assertTrue(narrow.startswith(" 50.0%  step 600/1200"), narrow)  # no room for the bar
        done = progress.render(dict(RECORD, step=1200), 1200, 0, 120, summary={"steps": 1200, "seconds": 61})
        self.assertTrue(done.startswith(f"[{'#' * 30}] 100.0%  step 1200/1200"), done)
        self.assertTrue(done.endswith("done in 1 min 1 s"), done)

    def test_the_last_evaluation(self):
        epoch = {"kind": "epoch", "epoch": 1, "test_loss": 0.4813, "test_auc": 0.7012}
        self.assertEqual(progress.render(RECORD, None, 0, 200, epoch=epoch),
                         "step 600  29,067 samples/s  loss 0.3771  test AUC 0.7012, log loss 0.4813")
        done = progress.render(RECORD, None, 0, 200, summary={"steps": 600, "seconds": 5, "test_loss": 0.3,
                                                              "test_accuracy": 0.9}, epoch=epoch)
        self.assertIn("loss 0.3771  test accuracy 0.9000  done in 5 s", done)  # the summary's, not the epoch's


class FakeOutput:
    def __init__(self):
        self.shown, self.ended = [], 0

    def show(self, line):
        self.shown.append(line)

    def end_live(self):
        self.ended += 1


class ProgressBarTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pstrain-progress-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        with open(os.path.join(self.dir, "w0.log"), "w", encoding="utf-8") as f:
            f.write("16:10:00.000 I w0: training 1200 steps\n")
        self.now = 100.0
        self.out = FakeOutput()
        self.bar = progress.ProgressBar(self.out, os.path.join(self.dir, "metrics.jsonl"), self.dir, lambda: 120,
                                        clock=lambda: self.now)

    def put(self, record):
        with open(os.path.join(self.dir, "metrics.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def test_redraws_at_most_every_poll_and_the_eta_counts_down(self):
        self.bar.tick()
        self.assertEqual(self.out.shown, [])  # no record yet: nothing drawn
        self.put(RECORD)
        self.now += 0.1
        self.bar.tick()
        self.assertEqual(self.out.shown, [])  # within POLL_S of the last read
        self.now += progress.POLL_S
        self.bar.tick()
        self.assertEqual(len(self.out.shown), 1)
        self.assertTrue(self.out.shown[0].endswith("ETA 2 s"), self.out.shown[0])
        self.now += progress.POLL_S
        self.bar.tick()
        self.assertEqual(len(self.out.shown), 1)  # nothing new, drawn less than REDRAW_S ago
        self.now += progress.REDRAW_S
        self.bar.tick()
        self.assertTrue(self.out.shown[-1].endswith("ETA 1 s"), self.out.shown[-1])
        self.put(dict(RECORD, step=1200, loss=0.2))
        self.put({"kind": "summary", "steps": 1200, "seconds": 5})
        self.bar.finish()
        self.assertIn("100.0%  step 1200/1200", self.out.shown[-1])
        self.assertTrue(self.out.shown[-1].endswith("done in 5 s"))
        self.assertEqual(self.out.ended, 1)


class BarModeOutputTest(unittest.TestCase):
    """Bar mode: results on stdout, logs on stderr, the status line redrawn below them."""

    def test_routing(self):
        stdout, stderr = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())
        with mock.patch.object(sys, "stdout", stdout), mock.patch.object(sys, "stderr", stderr):
            out = Output(None, progress.shown)
            out.say("started w0 (pid 1)")
            out.show("[--] step 1")
            out.relay("w0", b"16:10:00.000 I epoch 1/10 step 100/468 loss 0.5\n")
            out.relay("w0", b"16:10:00.000 I summary: test_accuracy=0.9\n")
            out.relay("w1", b"16:10:00.000 W slow\n")
            out.end_live()
            out.say("plots: a.png b.png", result=True)
        self.assertEqual(stdout.buffer.getvalue(),
                         b"\r\x1b[K[--] step 1"
                         b"\r\x1b[K[w0] 16:10:00.000 I summary: test_accuracy=0.9\n[--] step 1"
                         b"\r\x1b[K[--] step 1"
                         b"\nlaunch: plots: a.png b.png\n")
        self.assertEqual(stderr.buffer.getvalue(), b"launch: started w0 (pid 1)\n[w1] 16:10:00.000 W slow\n")

    def test_lines_mode_is_unchanged(self):
        stdout = io.TextIOWrapper(io.BytesIO())
        with mock.patch.object(sys, "stdout", stdout):
            out = Output(None)
            out.say("started w0 (pid 1)")
            out.relay("w0", b"16:10:00.000 I epoch 1/10 step 100/468 loss 0.5\n")
        self.assertEqual(stdout.buffer.getvalue(),
                         b"launch: started w0 (pid 1)\n[w0] 16:10:00.000 I epoch 1/10 step 100/468 loss 0.5\n")


if __name__ == "__main__":
    unittest.main()
