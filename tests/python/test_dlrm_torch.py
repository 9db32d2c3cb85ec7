"""tools/dlrm_torch.py, the PyTorch DLRM on pstrain's PS (ctest python_dlrm_torch): run by
launch/launch.sh as 2 workers x 64 on 2 PS shards (sync, FTRL tables, Adam) on a small
tools/ctr_gen.py file, its first 5 steps give the parameters of one plain PyTorch process of the
same DLRM on batches of 128 (`dlrm_torch.py --torch`: torch.optim.Adam and the PS's FTRL formula)
within 1e-5 of the largest: the MLPs' parameters and the rows of the first 64 records' IDs.

Skipped (exit 77) without torch, numpy or the package.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
    import torch  # noqa: F401  (the tool's)
except ImportError as e:
    print(f"python_dlrm_torch: skipped: {e.name} is not installed (tests/run.sh installs it into the tests' Python)")
    sys.exit(77)
import pyjob

pyjob.skip_without_package("python_dlrm_torch")
REPO = os.path.abspath(os.path.join(pyjob.HERE, "..", ".."))
TOOL = os.path.join(REPO, "tools", "dlrm_torch.py")
JOB = ["--steps", "5", "--seed", "5", "--optimizer", "adam", "--lr", "0.001", "--embedding-lr", "2"]


class DlrmTorchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pstrain-dlrm-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        subprocess.run([sys.executable, os.path.join(REPO, "tools", "ctr_gen.py"), "--out-dir", self.dir,
                        "--train-lines", "2000", "--test-lines", "500", "--seed", "3"],
                       check=True, capture_output=True)
        self.data = ["--train-tsv", os.path.join(self.dir, "train.tsv"), "--test-tsv", os.path.join(self.dir, "test.tsv")]

    def run_command(self, cmd, **kwargs):
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300, **kwargs)
        self.assertEqual(proc.returncode, 0, f"{cmd}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
        self.assertRegex(proc.stdout, r"dlrm_torch: 5 steps of 128: test_auc=0\.\d+")  # the chief's AUC
        return proc

    def test_two_workers_under_launch_sh_equal_one_pytorch_process(self):
        one = os.path.join(self.dir, "one.npz")
        self.run_command([sys.executable, TOOL, *self.data, "--torch", "--threads", "1", "--save", one, "--", *JOB,
                          "--batch-size", "128"])
        job = os.path.join(self.dir, "job.npz")
        worker_cmd = subprocess.list2cmdline([sys.executable, TOOL, *self.data, "--threads", "1", "--save", job])
        self.run_command([os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--progress", "lines", "--run-dir",
                          os.path.join(self.dir, "run"), "--num-ps", "2", "--num-workers", "2", "--worker-cmd",
                          worker_cmd, "--", *JOB, "--batch-size", "64", "--embedding-dim", "8",
                          "--embedding-optimizer", "ftrl"],
                         cwd=REPO, env=dict(os.environ, PSTRAIN_BUILD_DIR=pyjob.BUILD))
        one, job = np.load(one), np.load(job)
        dense = pyjob.relative_difference(one["dense"], job["dense"])
        rows = pyjob.relative_difference(one["rows"], job["rows"])
        print(f"dlrm_torch.py: 2 workers x 64 on 2 PS shards (launch.sh) vs one PyTorch process on 128, 5 steps: "
              f"dense {dense:.3g} ({one['dense'].size} parameters), rows {rows:.3g} ({one['rows'].size} pooled floats)")
        self.assertLessEqual(dense, 1e-5)
        self.assertLessEqual(rows, 1e-5)
        self.assertGreater(np.abs(one["rows"]).max(), 0)  # the rows trained and were pulled


if __name__ == "__main__":
    unittest.main()
