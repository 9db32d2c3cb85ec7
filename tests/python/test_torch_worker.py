"""PyTorch models on pstrain's parameter servers (ctest python_torch_worker): the MLP of
tests/python/torch_worker.py on Fashion-MNIST, its parameters on the PS shards through
pstrain.torch.DistributedOptimizer, against one plain PyTorch process.

- 3 PyTorch workers x 32 on 2 PS shards, sync, 100 steps: the parameters of one PyTorch process
  on batches of 96 with torch.optim's SGD, and with its Adam, within 1e-5 of the largest.
- The same job twice gives the same bits.
- pstrain-export of the job's checkpoint (--format safetensors) holds the module's state_dict at
  that step, by name, bit for bit; --format npy (which needs a layer list) is refused.
- pstrain.torch.EmbeddingBag (rows on the PS shards) under a DLRM-like model: 3 workers x 32 on
  2 shards train the dense parameters and the rows of 1 worker x 96 on 1 shard, within 1e-5;
  with EmbeddingBag.prefetch (the next step's rows asked for after this step's push) the same job
  gives the same bits; in hybrid mode (launch.sh), stopped by `launch.sh stop` and resumed, it
  ends with the uninterrupted run's bits.

Skipped (exit 77) without torch, numpy or the package.
"""

import json
import os
import shutil
import subprocess
import sys
import unittest

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"python_torch_worker: skipped: {e.name} is not installed (tests/run.sh installs it into the tests' Python)")
    sys.exit(77)
import pyjob

pyjob.skip_without_package("python_torch_worker")
sys.path.insert(0, pyjob.HERE)
import torch_worker  # noqa: E402  (the model and the data, shared with the workers)

WORKER = os.path.join(pyjob.HERE, "torch_worker.py")
CTR_WORKER = os.path.join(pyjob.HERE, "torch_ctr_worker.py")
STEPS, GLOBAL_BATCH, SEED = 100, 96, 5  # SEED: pyjob.Job's --seed
OPTIMIZERS = {"sgd": (["--optimizer", "sgd", "--lr", "0.1"], lambda p: torch.optim.SGD(p, lr=0.1)),
              "adam": (["--optimizer", "adam", "--lr", "0.001"], lambda p: torch.optim.Adam(p, lr=0.001))}


def one_process(make_optimizer):
    """Plain PyTorch: the same model and data, batches of GLOBAL_BATCH, the mean loss."""
    torch.set_num_threads(1)
    x, y = torch_worker.fashion(STEPS * GLOBAL_BATCH)
    net = torch_worker.model(SEED)
    opt = make_optimizer(net.parameters())
    for step in range(STEPS):
        first = step * GLOBAL_BATCH
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x[first:first + GLOBAL_BATCH]), y[first:first + GLOBAL_BATCH]).backward()
        opt.step()
    return torch_worker.flat(net)


class TorchWorkerTest(unittest.TestCase):
    def run_job(self, flags):
        job = pyjob.Job(WORKER, 2, 3, GLOBAL_BATCH // 3, STEPS, flags)
        self.addCleanup(shutil.rmtree, job.dir, True)
        codes = job.run()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{job.logs()}")
        return job.params()

    def test_three_pytorch_workers_on_two_shards_equal_one_pytorch_process(self):
        for name, (flags, make_optimizer) in OPTIMIZERS.items():
            with self.subTest(optimizer=name):
                reference = one_process(make_optimizer)
                pstrain_params = self.run_job(flags)
                difference = pyjob.relative_difference(reference, pstrain_params)
                print(f"{name}: 3 PyTorch workers x 32 on 2 PS shards vs one PyTorch process on 96, {STEPS} steps: "
                      f"relative difference {difference:.3g} ({reference.size} parameters)")
                self.assertLessEqual(difference, 1e-5)
                self.assertGreater(pyjob.relative_difference(reference, torch_worker.flat(torch_worker.model(SEED))),
                                   1e-3)  # it trained

    def test_the_same_job_twice_gives_the_same_bits(self):
        flags = OPTIMIZERS["adam"][0]
        first, second = self.run_job(flags), self.run_job(flags)
        self.assertTrue(np.array_equal(first.view(np.uint32), second.view(np.uint32)))


class TorchExportTest(unittest.TestCase):
    """A PyTorch job's checkpoint (DistributedOptimizer over the module: its variables named by the
    state_dict) exported by pstrain-export to safetensors holds the module's parameters, by name,
    bit for bit; the --save-params formats, which need a layer list, are refused."""

    def test_pstrain_export_of_a_pytorch_jobs_checkpoint_gives_the_modules_state_dict(self):
        from safetensors import safe_open
        job = pyjob.Job(WORKER, 2, 2, 48, 20, OPTIMIZERS["adam"][0])
        self.addCleanup(shutil.rmtree, job.dir, True)
        checkpoints = os.path.join(job.dir, "checkpoints")
        job.flags += ["--checkpoint-dir", checkpoints, "--checkpoint-every", "10"]
        codes = job.run()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{job.logs()}")
        net = torch_worker.model(SEED)
        torch.nn.utils.vector_to_parameters(torch.from_numpy(job.params()), net.parameters())  # the last step's
        out = os.path.join(job.dir, "model.safetensors")
        export = subprocess.run([os.path.join(pyjob.BUILD, "pstrain-export"), checkpoints, out, "--format",
                                 "safetensors"], capture_output=True, text=True)
        self.assertEqual(export.returncode, 0, export.stdout + export.stderr)
        self.assertIn("step 20", export.stdout)
        with safe_open(out, "pt") as f:
            exported = {name: f.get_tensor(name) for name in f.keys()}
            model_json = json.loads(f.metadata()["pstrain_model"])
        state = net.state_dict()
        self.assertEqual(sorted(exported), sorted(state))  # ['0.bias', '0.weight', '2.bias', '2.weight']
        for name, value in state.items():
            self.assertEqual(exported[name].shape, value.shape, name)
            self.assertTrue(torch.equal(exported[name].view(torch.int32), value.view(torch.int32)), name)
        self.assertEqual(model_json["kind"], "script")
        self.assertEqual(model_json["training"]["steps"], 20)
        refused = subprocess.run([os.path.join(pyjob.BUILD, "pstrain-export"), checkpoints,
                                  os.path.join(job.dir, "npy")], capture_output=True, text=True)
        self.assertEqual(refused.returncode, 2, refused.stdout + refused.stderr)
        self.assertIn("is of a script's model", refused.stderr)
        self.assertIn("--format safetensors or npz-arrays", refused.stderr)


class TorchEmbeddingTest(unittest.TestCase):
    """pstrain.torch.EmbeddingBag: 26 fields of 8-float rows on the PS shards (Adagrad tables)
    under a small DLRM-like PyTorch model."""

    def run_job(self, num_ps, num_workers, batch, prefetch=False):
        job = pyjob.Job(CTR_WORKER, num_ps, num_workers, batch, 60,
                        ["--optimizer", "adam", "--lr", "0.005", "--embedding-dim", "8", "--embedding-optimizer",
                         "adagrad", "--embedding-lr", "0.05"])
        self.addCleanup(shutil.rmtree, job.dir, True)
        job.start_servers()
        for i in range(num_workers):
            job.start_worker(i, env={"PSTRAIN_TEST_PREFETCH": "1" if prefetch else "0"})
        codes = job.finish()
        self.assertTrue(all(c == 0 for c in codes.values()), f"{codes}\n{job.logs()}")
        self.assertIn("1 embedding table(s) of dim 8", job.logs())
        return np.load(job.out)

    def test_three_workers_on_two_shards_equal_one_worker_on_the_concatenated_batch(self):
        one, three = self.run_job(1, 1, 96), self.run_job(2, 3, 32)
        dense = pyjob.relative_difference(one["dense"], three["dense"])
        rows = pyjob.relative_difference(one["rows"], three["rows"])
        print(f"EmbeddingBag: 3 PyTorch workers x 32 on 2 shards vs 1 x 96 on 1, 60 steps: dense {dense:.3g}, "
              f"rows {rows:.3g} ({one['rows'].size} pooled floats of the first 64 records)")
        self.assertLessEqual(dense, 1e-5)
        self.assertLessEqual(rows, 1e-5)
        self.assertGreater(np.abs(one["rows"]).max(), 0)  # the rows trained and were pulled

    def test_a_hybrid_job_stopped_and_resumed_equals_the_uninterrupted_one(self):
        # Hybrid mode (--mode allreduce with tables: the dense parameters all-reduced, the rows on a
        # PS shard) through launch.sh, 40 steps: `launch.sh stop` at step 25 writes a final
        # checkpoint of step 26 (the chief's dense vector and the shard's tables), and --resume
        # ends with the uninterrupted run's dense parameters and rows, bit for bit.
        def make_job():
            job = pyjob.Job(CTR_WORKER, 1, 2, 32, 40,
                            ["--optimizer", "adam", "--lr", "0.005", "--embedding-dim", "8", "--embedding-optimizer",
                             "adagrad", "--embedding-lr", "0.05"])
            self.addCleanup(shutil.rmtree, job.dir, True)
            return job
        reference, resumed = pyjob.stop_and_resume(self, make_job, ["--num-ps", "1"], ["--mode", "allreduce"],
                                                   "TORCH_WORKER_PAUSE_AT")
        reference, resumed = np.load(reference), np.load(resumed)
        for name in ("dense", "rows"):
            self.assertTrue(np.array_equal(reference[name].view(np.uint32), resumed[name].view(np.uint32)),
                            f"{name}: resumed run differs by {pyjob.relative_difference(reference[name], resumed[name]):.3g}")

    def test_prefetching_the_next_steps_rows_gives_the_same_bits(self):
        plain, prefetched = self.run_job(2, 3, 32), self.run_job(2, 3, 32, prefetch=True)
        self.assertEqual(int(plain["prefetched"]), 0)
        self.assertEqual(int(prefetched["prefetched"]), 59)  # every step's pull but the first
        for name in ("dense", "rows"):
            self.assertTrue(np.array_equal(plain[name].view(np.uint32), prefetched[name].view(np.uint32)), name)


if __name__ == "__main__":
    unittest.main()
