"""tools/dlrm_torch.py, the PyTorch DLRM on pstrain's PS (ctest python_dlrm_torch): run by
launch/launch.sh as 2 workers x 64 on 2 PS shards (sync, FTRL tables, Adam) on a small
tools/ctr_gen.py file, its first 5 steps give the parameters of one plain PyTorch process of the
same DLRM on batches of 128 (`dlrm_torch.py --torch`: torch.optim.Adam and the PS's FTRL formula)
within 1e-5 of the largest: the MLPs' parameters and the rows of the first 64 records' IDs. The
job's checkpoint of its last step, exported by pstrain-export as safetensors, holds the chief's
MLP parameters under their state_dict names and the rows it pulled under their keys, bit for bit.
With `--torch --ps-adam` (Adam rounded as the PS rounds it) the one process is within 1e-6.

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
    """One plain PyTorch process and one launched job (with --checkpoint-dir), run once for both tests."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pstrain-dlrm-test-")
        subprocess.run([sys.executable, os.path.join(REPO, "tools", "ctr_gen.py"), "--out-dir", cls.dir,
                        "--train-lines", "2000", "--test-lines", "500", "--seed", "3"],
                       check=True, capture_output=True)
        data = ["--train-tsv", os.path.join(cls.dir, "train.tsv"), "--test-tsv", os.path.join(cls.dir, "test.tsv")]
        cls.one, cls.job = os.path.join(cls.dir, "one.npz"), os.path.join(cls.dir, "job.npz")
        cls.checkpoints = os.path.join(cls.dir, "checkpoints")
        cls.runs = [run_command([sys.executable, TOOL, *data, "--torch", "--threads", "1", "--save", cls.one, "--",
                                 *JOB, "--batch-size", "128"])]
        cls.one_ps = os.path.join(cls.dir, "one_ps.npz")
        cls.runs.append(run_command([sys.executable, TOOL, *data, "--torch", "--ps-adam", "--threads", "1", "--save",
                                     cls.one_ps, "--", *JOB, "--batch-size", "128"]))
        worker_cmd = subprocess.list2cmdline([sys.executable, TOOL, *data, "--threads", "1", "--save", cls.job])
        cls.runs.append(run_command(
            [os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--progress", "lines", "--run-dir",
             os.path.join(cls.dir, "run"), "--num-ps", "2", "--num-workers", "2", "--worker-cmd", worker_cmd, "--",
             *JOB, "--batch-size", "64", "--embedding-dim", "8", "--embedding-optimizer", "ftrl",
             "--checkpoint-dir", cls.checkpoints, "--checkpoint-every", "5"],
            cwd=REPO, env=dict(os.environ, PSTRAIN_BUILD_DIR=pyjob.BUILD)))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def check_runs(self):
        for proc in self.runs:
            self.assertEqual(proc.returncode, 0, f"{proc.args}\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
            self.assertRegex(proc.stdout, r"dlrm_torch: 5 steps of 128: test_auc=0\.\d+")  # the chief's AUC

    def test_two_workers_under_launch_sh_equal_one_pytorch_process(self):
        self.check_runs()
        one, job = np.load(self.one), np.load(self.job)
        dense = pyjob.relative_difference(one["dense"], job["dense"])
        rows = pyjob.relative_difference(one["rows"], job["rows"])
        print(f"dlrm_torch.py: 2 workers x 64 on 2 PS shards (launch.sh) vs one PyTorch process on 128, 5 steps: "
              f"dense {dense:.3g} ({one['dense'].size} parameters), rows {rows:.3g} ({one['rows'].size} pooled floats)")
        self.assertLessEqual(dense, 1e-5)
        self.assertLessEqual(rows, 1e-5)
        self.assertGreater(np.abs(one["rows"]).max(), 0)  # the rows trained and were pulled

    def test_with_adam_rounded_as_the_ps_rounds_it_the_one_process_is_closer_still(self):
        # What is left between the job and one PyTorch process is rounding: torch.optim.Adam's
        # float32 operation order against the PS's. With PsAdam (--ps-adam: the same formula,
        # rounded as the PS rounds it) only the gradient sums' order differs.
        self.check_runs()
        one, one_ps, job = np.load(self.one), np.load(self.one_ps), np.load(self.job)
        for name in ("dense", "rows"):
            plain = pyjob.relative_difference(one[name], job[name])
            ps_rounding = pyjob.relative_difference(one_ps[name], job[name])
            print(f"dlrm_torch.py --torch vs the job, {name}: torch.optim.Adam {plain:.3g}, --ps-adam {ps_rounding:.3g}")
            self.assertLessEqual(ps_rounding, 1e-6)
            self.assertLess(ps_rounding, plain)

    def test_pstrain_export_of_the_jobs_checkpoint_gives_the_modules_parameters_and_the_rows(self):
        # The checkpoint of step 5 (the last) exported as safetensors: every MLP variable under its
        # state_dict name with the chief's values after step 5, and the table's rows: those the
        # chief pulled after step 5 for the first 64 records (one ID per field: the pooled row is
        # the row), under their keys, bit for bit.
        self.check_runs()
        from safetensors.numpy import load_file
        sys.path.insert(0, os.path.join(REPO, "tools"))
        import dlrm_torch
        out = os.path.join(self.dir, "dlrm.safetensors")
        export = subprocess.run([os.path.join(pyjob.BUILD, "pstrain-export"), self.checkpoints, out, "--format",
                                 "safetensors"], capture_output=True, text=True)
        self.assertEqual(export.returncode, 0, export.stdout + export.stderr)
        self.assertIn("step 5 ", export.stdout)
        self.assertIn("2 embedding table file(s)", export.stdout)
        arrays = load_file(out)
        saved = np.load(self.job)
        skeleton = dlrm_torch.DLRM(torch.nn.Identity(), 8)  # the names and shapes, in the flat order
        at = 0
        for name, p in skeleton.named_parameters():
            self.assertIn(name, arrays)
            self.assertEqual(arrays[name].shape, tuple(p.shape), name)
            expected = saved["dense"][at:at + p.numel()].reshape(p.shape)
            self.assertTrue(np.array_equal(arrays[name].view(np.uint32), expected.view(np.uint32)), name)
            at += p.numel()
        self.assertEqual(at, saved["dense"].size)
        ids, rows = arrays["embedding.ids.ids"].view(np.uint64), arrays["embedding.ids.rows"]
        self.assertTrue(np.all(ids[1:] > ids[:-1]))
        _, _, raw = dlrm_torch.read_tsv(os.path.join(self.dir, "train.tsv"))
        keys = dlrm_torch.table_keys(raw[:64]).reshape(-1)
        pulled = saved["rows"].reshape(-1, 8)
        where = np.minimum(np.searchsorted(ids, keys), len(ids) - 1)
        present = ids[where] == keys  # the others no step pulled: FTRL's rows start at zero
        self.assertGreater(present.mean(), 0.5)
        self.assertTrue(np.array_equal(rows[where[present]].view(np.uint32), pulled[present].view(np.uint32)))
        self.assertFalse(np.any(pulled[~present]))
        self.assertGreater(np.abs(pulled[present]).max(), 0)


def run_command(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300, **kwargs)


if __name__ == "__main__":
    unittest.main()
