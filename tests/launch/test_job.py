"""The launcher plans with the job as the binaries resolve it (pstrain-ps --check-config --json,
check.resolved_job), not with its own reading of the config file: needs the built binaries
(PSTRAIN_BUILD_DIR, else REPO/build); skipped without them."""

import os
import tempfile
import unittest
from unittest import mock

from pstrain_launch import check, cli

BUILD = os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(cli.REPO, "build")
PS_BIN = os.path.join(BUILD, "pstrain-ps")


@unittest.skipUnless(os.access(PS_BIN, os.X_OK), f"{PS_BIN} is not built")
class ResolvedJobTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def config(self, text):
        path = os.path.join(self.dir.name, "job.cfg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def settings(self, *argv):
        env = {k: v for k, v in os.environ.items() if k not in ("PSTRAIN_PS_BIN", "CUDA_VISIBLE_DEVICES")}
        with mock.patch.dict(os.environ, {**env, "PSTRAIN_BUILD_DIR": BUILD}, clear=True):
            return cli.Settings(*cli.parse_args(list(argv)))

    def test_the_binary_answers_with_the_resolved_job(self):
        job = check.resolved_job(PS_BIN, self.config("mode = allreduce\nembedding-dim = 4\nnum-ps = 3\n"),
                                 ["--num-workers", "2"], dict(os.environ))
        self.assertEqual((job["mode"], job["ps_mode"], job["hybrid"]), ("allreduce", "sync", True))
        self.assertEqual((job["num_ps"], job["num_workers"], job["table_shards"]), (3, 2, 3))
        self.assertIsNone(check.resolved_job(PS_BIN, self.config("embedding-pool = max\n"), [], dict(os.environ)))
        self.assertIsNone(check.resolved_job(os.path.join(self.dir.name, "missing"), self.config(""), [], {}))

    def test_hybrid_mode_from_the_models_embedding_entry(self):
        # The tables come from --model's "embedding 8" entry, not an embedding-dim key: the binaries
        # know the job is hybrid (its PS shards hold the tables), a reading of the keys did not.
        cfg = self.config("mode = allreduce\nnum-ps = 2\nloss = bce\nmodel = embedding 8, dense 1\n")
        s = self.settings("--config", cfg, "--num-workers", "2", "--dry-run")
        self.assertTrue(s.hybrid)
        self.assertEqual(s.num_ps, 2)
        self.assertEqual([p.name for p in s.procs], ["ps0", "ps1", "w0", "w1"])
        plain = self.settings("--config", self.config("mode = allreduce\nnum-ps = 2\n"), "--num-workers", "2")
        self.assertEqual((plain.hybrid, plain.num_ps), (False, 0))

    def test_the_job_flags_win_over_the_config(self):
        s = self.settings("--config", self.config("mode = async\ncheckpoint-dir = /nonexistent/ck\n"), "--",
                          "--mode", "sync")
        self.assertEqual(s.mode, "sync")
        self.assertTrue(s.checkpointing)
        self.assertEqual(s.job["checkpoint_dir"], "/nonexistent/ck")


if __name__ == "__main__":
    unittest.main()
