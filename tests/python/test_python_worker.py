"""The Python package's workers in real jobs (ctest python_worker): real pstrain-ps shards and
Python worker processes (tests/python/numpy_worker.py, a numpy model) on loopback.

- The mirrored contract: 3 Python workers of 32 samples on 2 PS shards train the parameters of
  one worker of 96 on one shard (sync), within 1e-5 of the largest; the same job twice gives the
  same bits.
- A Python worker killed (-9) mid-run is replaced by a new one, and the job ends with the bits of
  the uninterrupted run.
- A job in --mode allreduce stopped by launch.sh stop (a final checkpoint) and resumed with
  --resume ends with the uninterrupted run's bits.
- launch.sh --worker-cmd runs Python workers, on 2 PS shards and in --mode allreduce (the ring):
  the same bits as the job started by hand.
- Bad use of the API is a clear error.

Needs the package (<build>/python, built where pybind11-dev is installed) and numpy; skipped
(exit 77) without them.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

try:
    import numpy as np
except ImportError:
    print("python_worker: skipped: numpy is not installed (Debian: python3-numpy)")
    sys.exit(77)
import pyjob

pyjob.skip_without_package("python_worker")
WORKER = os.path.join(pyjob.HERE, "numpy_worker.py")
LAUNCH = os.path.join(pyjob.HERE, "..", "..", "launch", "launch.sh")
STEPS = 40


class PythonWorkerTest(unittest.TestCase):
    def job(self, num_ps, num_workers, batch, flags=()):
        job = pyjob.Job(WORKER, num_ps, num_workers, batch, STEPS, ["--optimizer", "adam", "--lr", "0.01", *flags])
        self.addCleanup(shutil.rmtree, job.dir, True)
        return job

    def run_job(self, *args, **kwargs):
        job = self.job(*args, **kwargs)
        codes = job.run()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{job.logs()}")
        return job

    def test_three_workers_on_two_shards_equal_one_worker_on_the_concatenated_batch(self):
        one = self.run_job(1, 1, 96).params()
        three = self.run_job(2, 3, 32).params()
        again = self.run_job(2, 3, 32).params()
        difference = pyjob.relative_difference(one, three)
        print(f"3 Python workers x 32 on 2 shards vs 1 x 96: relative difference {difference:.3g}, "
              f"{one.size} parameters, {STEPS} steps of adam")
        self.assertLessEqual(difference, 1e-5)
        self.assertGreater(pyjob.relative_difference(one, np.zeros_like(one) + one.mean()), 0.1)  # it trained
        self.assertTrue(np.array_equal(three.view(np.uint32), again.view(np.uint32)), "the same job twice differs")

    def test_a_killed_worker_is_replaced_and_nothing_is_lost(self):
        reference = self.run_job(2, 2, 48).params()
        job = self.job(2, 2, 48, flags=["--allow-rejoin"])
        job.start_servers()
        job.start_worker(0)
        victim = job.start_worker(1, env={"NUMPY_WORKER_HANG_AT": "20"})
        job.wait_for_file(job.out + ".hang", victim)  # it pushed step 19 and stopped before step 20
        victim.kill()
        victim.wait(timeout=30)
        del job.workers["w1"]
        job.start_worker(1, name="w1-replacement")
        codes = job.finish()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{job.logs()}")
        self.assertIn("worker 1 registered again", job.logs())
        self.assertTrue(np.array_equal(reference.view(np.uint32), job.params().view(np.uint32)),
                        f"replaced run differs by {pyjob.relative_difference(reference, job.params()):.3g}")

    def test_a_job_stopped_by_sigterm_and_resumed_equals_the_uninterrupted_one(self):
        # The chief takes SIGTERM as pstrain-worker's does: a final checkpoint through the PS
        # shards (its manifest and the job's fingerprint written by the C++ chief's code), the
        # job stops, and --resume carries on to the uninterrupted run's bits.
        reference = self.run_job(2, 2, 48).params()
        job = self.job(2, 2, 48)
        checkpoints = os.path.join(job.dir, "checkpoints")
        job.flags += ["--checkpoint-dir", checkpoints, "--checkpoint-every", "10"]
        job.start_servers()
        chief = job.start_worker(0, env={"NUMPY_WORKER_PAUSE_AT": "25"})
        job.start_worker(1)
        job.wait_for_file(job.out + ".pause", chief)
        chief.send_signal(signal.SIGTERM)
        while "SIGTERM: a final checkpoint at the next step" not in pyjob.read(os.path.join(job.dir, "w0.log")):
            self.assertIsNone(chief.poll(), job.logs())
            time.sleep(0.01)  # polling the chief's log: the handler has run
        open(job.out + ".go", "w").close()
        codes = job.finish()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{job.logs()}")
        self.assertFalse(os.path.exists(job.out), "a stopped job wrote its parameters as a result")
        self.assertEqual(sorted(n for n in os.listdir(checkpoints) if n.startswith("v")),
                         ["v0000000010", "v0000000020", "v0000000026"], job.logs())
        self.assertTrue(os.path.exists(os.path.join(checkpoints, "v0000000026", "MANIFEST")))
        self.assertIn("checkpoint of step 26 complete", job.logs())
        resumed = self.job(2, 2, 48)
        resumed.dir, resumed.out = job.dir, job.out
        resumed.flags = job.flags + ["--resume"]
        for s in range(2):  # the stopped job's addresses
            os.remove(os.path.join(job.dir, f"ps{s}.addr"))
        resumed.start_servers()
        for i in range(2):
            resumed.start_worker(i, name=f"resumed-w{i}")
        codes = resumed.finish()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{resumed.logs()}")
        self.assertIn("w0: resumed from checkpoint", pyjob.read(os.path.join(job.dir, "resumed-w0.log")))
        self.assertTrue(np.array_equal(reference.view(np.uint32), resumed.params().view(np.uint32)),
                        f"resumed run differs by {pyjob.relative_difference(reference, resumed.params()):.3g}")

    def test_an_allreduce_job_stopped_and_resumed_equals_the_uninterrupted_one(self):
        # As the PS job above, in --mode allreduce (the chief writes the whole vector), through
        # launch.sh: `launch.sh stop` writes a final checkpoint, --resume gives the same bits.
        # (Hybrid mode, whose tables advance with the rows the workers push: test_torch_worker.py.)
        reference, resumed = pyjob.stop_and_resume(self, lambda: self.job(1, 2, 48), [], ["--mode", "allreduce"],
                                                   "NUMPY_WORKER_PAUSE_AT")
        reference, resumed = np.load(reference), np.load(resumed)
        self.assertTrue(np.array_equal(reference.view(np.uint32), resumed.view(np.uint32)),
                        f"resumed run differs by {pyjob.relative_difference(reference, resumed):.3g}")

    def test_the_launcher_runs_python_workers_in_ps_and_allreduce_modes(self):
        direct = self.run_job(2, 3, 32).params()
        for mode, counts in (("sync", ["--num-ps", "2"]), ("allreduce", [])):
            job = self.job(2, 3, 32)
            config = os.path.join(job.dir, "empty.cfg")  # not the launcher's default, configs/fashion_mlp.cfg
            open(config, "w").close()
            out = subprocess.run(
                [LAUNCH, "--no-setup", "--progress", "lines", "--run-dir", os.path.join(job.dir, "run"), "--config",
                 config, *counts, "--num-workers", "3", "--worker-cmd", f"{sys.executable} {WORKER} {job.out} --",
                 "--", "--mode", mode, *job.flags[4:]],  # the job's flags but the counts (the launcher's)
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, env=job.env)
            self.assertEqual(out.returncode, 0, out.stdout)
            self.assertIn("training completed", out.stdout)
            self.assertTrue(np.array_equal(direct.view(np.uint32), job.params().view(np.uint32)),
                            f"{mode}: launched run differs by {pyjob.relative_difference(direct, job.params()):.3g}")

    def test_the_launched_jobs_metrics_file_and_tensorboard_hold_the_scripts_losses(self):
        # The chief's progress records (launch.sh's RUNDIR/metrics.jsonl and RUNDIR/tensorboard by
        # default) are pstrain-worker's, made from the loss sums the scripts push with each step.
        job = self.job(2, 3, 32)
        run_dir = os.path.join(job.dir, "run")
        out = subprocess.run(
            [LAUNCH, "--no-setup", "--progress", "lines", "--run-dir", run_dir, "--num-ps", "2", "--num-workers", "3",
             "--worker-cmd", f"{sys.executable} {WORKER} {job.out} --", "--", "--log-every", "10", "--epochs", "1",
             *job.flags[4:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, env=job.env)
        self.assertEqual(out.returncode, 0, out.stdout)
        losses = np.load(job.out + ".losses.npy")
        self.assertEqual(len(losses), STEPS)
        with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
        progress = [r for r in records if r["kind"] == "progress"]
        self.assertEqual([r["step"] for r in progress], [10, 20, 30, 40], records)
        for r in progress:  # the interval's mean: every step has the same samples
            self.assertAlmostEqual(r["loss"], float(np.mean(losses[r["step"] - 10:r["step"]])), delta=1e-9)
            self.assertIn("accuracy", r)
        self.assertLess(progress[-1]["loss"], progress[0]["loss"])  # it trained
        try:
            from tensorboard.backend.event_processing import event_accumulator
        except ImportError:
            print("tensorboard cannot be imported: its reader is not run (tests/python.sh's venv has it)")
            return
        accumulator = event_accumulator.EventAccumulator(os.path.join(run_dir, "tensorboard", "chief"),
                                                         size_guidance={event_accumulator.SCALARS: 0})
        accumulator.Reload()
        read = {e.step: e.value for e in accumulator.Scalars("train/loss")}
        self.assertEqual(read, {r["step"]: float(np.float32(r["loss"])) for r in progress})

    def test_bad_use_is_a_clear_error(self):
        sys.path.insert(0, pyjob.PACKAGE)
        import pstrain
        with self.assertRaisesRegex(pstrain.Error, "--ps-hosts names 0 servers but --num-ps is 1"):
            pstrain.init(["--num-workers", "1"])
        with self.assertRaisesRegex(pstrain.UsageError, "unrecognised option|unknown option|--no-such-flag"):
            pstrain.init(["--no-such-flag", "1"])
        worker = pstrain.init(["--num-ps", "1", "--ps-hosts", "127.0.0.1:1", "--timeout", "1"])
        with self.assertRaisesRegex(pstrain.UsageError, "step\\(\\) before start\\(\\)"):
            worker.step(0, np.zeros(3, np.float32), np.zeros(3, np.float32), 1)
        with self.assertRaisesRegex(pstrain.UsageError, "float32"):
            worker.start(np.zeros(3, np.float64), 1)


if __name__ == "__main__":
    unittest.main()
