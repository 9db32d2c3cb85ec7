"""Unit tests of launch.sh status / stop (launch/pstrain_launch/status.py) on made-up run
directories; tests/launch_test.cc (LaunchTest.StatusAndStopARunningJob) runs them on a real job."""

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import shutil
import time
import unittest
import unittest.mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))

from pstrain_launch import jobstate, status  # noqa: E402


def run(function, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = function(*args)
    return code, out.getvalue()


class StatusTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pstrain-status-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write_state(self, launcher_pid, host=None, ended=None, processes=()):
        state = {"launcher": {"pid": launcher_pid, "host": host or socket.gethostname(), "kind": "local",
                              "started": time.time() - 100},
                 "job": {"mode": "sync", "num_ps": 1, "num_workers": 2, "config": "c.cfg", "checkpoint_dir": None},
                 "processes": list(processes), "ended": ended}
        with open(os.path.join(self.dir, jobstate.FILE_NAME), "w", encoding="utf-8") as f:
            json.dump(state, f)

    def test_duration(self):
        self.assertEqual(status.duration(0.4), "0 s")
        self.assertEqual(status.duration(59), "59 s")
        self.assertEqual(status.duration(61), "1 min 1 s")
        self.assertEqual(status.duration(3 * 3600 + 120), "3 h 2 min")

    def test_default_run_dir_is_the_newest_of_this_users_runs(self):
        runs = os.path.join(self.dir, "runs")
        for name, age in (("older", 200), ("newer", 100), ("colleagues", 0)):
            os.makedirs(os.path.join(runs, name))
            path = os.path.join(runs, name, jobstate.FILE_NAME)
            with open(path, "w", encoding="utf-8") as f:
                f.write("{}")
            os.utime(path, (time.time() - age, time.time() - age))
        me = os.getuid()
        owner = {os.path.join(runs, "colleagues", jobstate.FILE_NAME): me + 1}
        real_stat = os.stat

        def stat(path, *args, **kwargs):  # the colleague's file, as another uid owns it
            st = real_stat(path, *args, **kwargs)
            if path in owner:
                fields = list(st)
                fields[4] = owner[path]
                return os.stat_result(fields)
            return st

        with unittest.mock.patch("os.stat", stat):
            self.assertEqual(status.find_run_dir(None, self.dir), os.path.join(runs, "newer"))
            owner.update({os.path.join(runs, d, jobstate.FILE_NAME): me + 1 for d in ("older", "newer")})
            with self.assertRaisesRegex(status.UsageError, "none of the 3 runs under .* is yours"):
                status.find_run_dir(None, self.dir)
        with self.assertRaisesRegex(status.UsageError, "no run under"):
            status.find_run_dir(None, os.path.join(self.dir, "empty"))

    def test_no_job_here(self):
        code, out = run(status.show, self.dir)
        self.assertEqual(code, 1)
        self.assertIn("no job started by launch.sh here", out)
        code, out = run(status.stop, self.dir, 5)
        self.assertEqual(code, 1)

    def test_progress_total_and_eta(self):
        with open(os.path.join(self.dir, "w0.log"), "w", encoding="utf-8") as f:
            f.write("w0: training 500 steps\nw0: restarted\nw0: training 1000 steps\n")
        with open(os.path.join(self.dir, "metrics.jsonl"), "w", encoding="utf-8") as f:
            f.write(json.dumps({"kind": "progress", "step": 250, "epoch": 2, "loss": 0.5, "samples_per_s": 12345.6,
                                "ms_per_step": 40.0}) + "\n")
            f.write('{"kind": "progr')  # a line being written is skipped
        line = status.progress_line(self.dir)
        self.assertRegex(line, r"^step 250/1000 \(25\.0%\), epoch 2, 12,346 samples/s, loss 0\.5000, ETA (29|30) s")

    def test_test_figures_of_the_last_epoch_and_the_summary(self):
        path = os.path.join(self.dir, "metrics.jsonl")
        ctr_epoch = {"kind": "epoch", "epoch": 2, "step": 400, "test_loss": 0.48131, "test_auc": 0.70119}
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"kind": "progress", "step": 450, "epoch": 3, "loss": 0.5, "samples_per_s": 100.0,
                                "ms_per_step": 40.0}) + "\n")
            f.write(json.dumps(ctr_epoch) + "\n")
        self.assertRegex(status.progress_line(self.dir), r"; epoch 2: test AUC 0\.7012, log loss 0\.4813 \(as of ")
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(ctr_epoch, epoch=3, partial=True, test_auc=0.71)) + "\n")
        self.assertIn("; epoch 3 (partial): test AUC 0.7100", status.progress_line(self.dir))
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"kind": "summary", "steps": 480, "stopped": True, "samples_per_s": 99.6,
                                "test_loss": 0.47, "test_auc": 0.7123}) + "\n")
        self.assertEqual(status.progress_line(self.dir),
                         "stopped: 480 steps, test AUC 0.7123, log loss 0.4700, 100 samples/s")
        self.assertEqual(status.evaluation_text({"test_loss": 0.3, "test_accuracy": 0.8812}), "test accuracy 0.8812")
        self.assertEqual(status.evaluation_text({"test_loss": 0.3, "test_rmse": 0.25}), "test RMSE 0.2500")
        self.assertEqual(status.evaluation_text({"kind": "summary", "steps": 3}), "")

    def test_ended_job_is_not_running(self):
        self.write_state(os.getpid(), ended={"time": time.time(), "exit_code": 0, "why": "training completed"},
                         processes=[{"name": "w0", "label": "w0", "host": "localhost", "pid": 1, "via": "local",
                                     "status": 0, "restarts": 0}])
        code, out = run(status.show, self.dir)
        self.assertEqual(code, 1)
        self.assertIn("with exit status 0 (training completed)", out)
        self.assertRegex(out, r"w0  on localhost  pid 1  exited with status 0")

    def test_launcher_gone_without_an_end(self):
        child = subprocess.Popen(["true"])
        child.wait()  # a pid that no longer runs
        self.write_state(child.pid)
        code, out = run(status.show, self.dir)
        self.assertEqual(code, 1)
        self.assertIn(f"its launcher (pid {child.pid}) is gone without recording an end", out)
        code, out = run(status.stop, self.dir, 5)
        self.assertEqual(code, 1)
        self.assertIn("holds no running job", out)

    def test_launcher_on_another_host(self):
        self.write_state(1, host="elsewhere.example")
        code, out = run(status.show, self.dir)
        self.assertEqual(code, 1)
        self.assertIn("its launcher runs on host elsewhere.example (pid 1): run this there", out)

    def test_stop_signals_a_running_launcher(self):
        # A stand-in launcher: its command line names pstrain_launch; it exits on SIGTERM.
        child = subprocess.Popen([sys.executable, "-c", "import time\nprint('ready', flush=True)\nwhile True: time.sleep(1)",
                                  "pstrain_launch"], stdout=subprocess.PIPE)
        try:
            self.assertEqual(child.stdout.readline(), b"ready\n")  # exec'd: its command line is its own
            self.write_state(child.pid)
            code, out = run(status.show, self.dir)
            self.assertEqual(code, 0, out)
            self.assertRegex(out, r"state: running for 1 min 4[01] s")
            # stop polls /proc until the launcher is gone: our unreaped child's zombie counts as gone.
            code, out = run(status.stop, self.dir, 30)
            self.assertEqual(code, 0, out)
            child.wait(timeout=10)
            self.assertIn(f"sent SIGTERM to the launcher (pid {child.pid})", out)
            self.assertIn("stopped (its launcher recorded no end)", out)
            self.assertEqual(child.returncode, -15)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()


if __name__ == "__main__":
    unittest.main()
