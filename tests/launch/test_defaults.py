"""The launcher's default job config (launch/pstrain_launch/cli.py default_config): the CTR job
for click-through-rate data, the Fashion-MNIST MLP otherwise; and a dry run saying which."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(REPO, "launch"))

from pstrain_launch import cli  # noqa: E402


class DefaultConfigTest(unittest.TestCase):
    def config_of(self, *extra):
        return os.path.basename(cli.default_config(list(extra))[0])

    def test_click_data_gets_the_ctr_job(self):
        self.assertEqual(self.config_of("--train-data", "/d/train.tsv", "--test-data", "/d/test.tsv"), "ctr.cfg")
        self.assertEqual(self.config_of("--train-data=/d/day_0.TXT.gz"), "ctr.cfg")
        self.assertEqual(self.config_of("--schema", "s.json", "--train-data", "clicks.csv"), "ctr.cfg")
        self.assertEqual(self.config_of("--data-format", "criteo", "--train-data", "clicks"), "ctr.cfg")
        note = cli.default_config(["--train-data", "/d/train.tsv"])[1]
        self.assertEqual(note, "click-through-rate data (--train-data /d/train.tsv): the job of configs/ctr.cfg "
                               "(embedding tables on the PS; --config FILE chooses another)")

    def test_other_data_gets_the_mlp_job(self):
        self.assertEqual(self.config_of(), "fashion_mlp.cfg")
        self.assertEqual(self.config_of("--train-data", "x.npy,y.npy"), "fashion_mlp.cfg")
        self.assertEqual(self.config_of("--train-data", "images.txt,labels.txt"), "fashion_mlp.cfg")  # an IDX pair
        self.assertEqual(self.config_of("--train-data", "table.csv"), "fashion_mlp.cfg")
        self.assertEqual(cli.default_config([])[1], "")

    def test_a_worker_cmd_job_gets_the_cluster_part_only(self):
        # A Python script's model must not take the Fashion-MNIST MLP's settings (its cosine
        # schedule silently decayed a DLRM's learning rate), whatever data the flags name.
        config, note = cli.default_config(["--train-data", "/d/train.tsv"], worker_cmd=True)
        self.assertEqual(os.path.basename(config), "worker_cmd.cfg")
        self.assertIn("--worker-cmd without --config", note)
        keys = {line.split("=")[0].strip() for line in open(config, encoding="utf-8") if "=" in line.split("#")[0]}
        self.assertEqual(keys, {"num-ps", "num-workers"})
        env = dict(os.environ, PSTRAIN_PS_BIN=os.path.join(HERE, "fake_ps.sh"),
                   PSTRAIN_WORKER_BIN=os.path.join(HERE, "fake_worker.sh"))
        done = subprocess.run(["bash", os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--dry-run",
                               "--worker-cmd", "python3 train.py", "--", "--lr", "0.1"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, env=env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        said = done.stdout + done.stderr
        self.assertIn("--worker-cmd without --config: configs/worker_cmd.cfg", said)
        self.assertRegex(said, r"w1: python3 train\.py --config \S*configs/worker_cmd\.cfg .*--num-workers 2")
        self.assertNotIn("fashion_mlp.cfg", said)

    def test_a_dry_run_says_which_and_passes_it(self):
        env = dict(os.environ, PSTRAIN_PS_BIN=os.path.join(HERE, "fake_ps.sh"),
                   PSTRAIN_WORKER_BIN=os.path.join(HERE, "fake_worker.sh"))
        done = subprocess.run(["bash", os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--dry-run", "--",
                               "--train-data", "/d/train.tsv", "--test-data", "/d/test.tsv"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, env=env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("launch: click-through-rate data (--train-data /d/train.tsv): the job of configs/ctr.cfg",
                      done.stdout + done.stderr)
        self.assertRegex(done.stdout + done.stderr, r"--config \S*configs/ctr\.cfg")


if __name__ == "__main__":
    unittest.main()
