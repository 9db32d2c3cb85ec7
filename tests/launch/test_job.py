"""The launcher plans with the job as the binaries resolve it (pstrain-ps --check-config --json,
check.resolved_job), not with its own reading of the config file: needs the built binaries
(PSTRAIN_BUILD_DIR, else REPO/build); skipped without them."""

import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))
from pstrain_launch import check, cli  # noqa: E402 (after the path to launch/)

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

    def test_counts_batches_and_addresses_come_from_the_binaries_answer(self):
        # The binaries' answer is what the launcher plans with: a job whose resolved counts, batch,
        # metrics file, bind address and CPU binding differ from the config file's words (as a
        # binary's rules would make them) is planned by the answer, not by a reading of the keys.
        cfg = self.config("num-workers = 3\nnum-ps = 1\nbatch-size = 8\nmetrics-file = from_config.jsonl\n")
        real = check.resolved_job(PS_BIN, cfg, [], dict(os.environ))
        answer = {**real, "num_workers": 2, "num_ps": 2, "batch_size": 16, "accum_steps": 2,
                  "metrics_file": "answer.jsonl", "bind_cpu": 0, "insecure": True, "bind": "0.0.0.0"}
        with mock.patch.object(check, "resolved_job", return_value=answer):
            s = self.settings("--config", cfg, "--dry-run")
        self.assertEqual((s.num_workers, s.num_ps), (2, 2))
        self.assertEqual([p.name for p in s.procs], ["ps0", "ps1", "w0", "w1"])
        self.assertEqual(s._default_share(), 32)
        self.assertEqual(s.metrics_flag, "answer.jsonl")
        self.assertEqual(s.worker_cpus, [])  # the job binds its own CPU: the launcher binds none
        self.assertFalse(s.curve)  # --insecure in the answer


if __name__ == "__main__":
    unittest.main()
