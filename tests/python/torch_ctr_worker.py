"""A PyTorch click-through-rate model as a pstrain worker: 13 dense features and 26 categorical
fields whose rows live in the PS shards' tables (pstrain.torch.EmbeddingBag), a small DLRM-like
MLP over them, synthetic records from the seed, each step's global batch split among the workers
by index. The chief (worker 0) writes OUT (.npz): the dense parameters, and the rows of the first
PROBE records' IDs pulled after the last step. With PSTRAIN_TEST_PREFETCH=1 each step's forward
prefetches the next step's IDs (EmbeddingBag.prefetch), and the chief writes how many pulls a
prefetch served. With TORCH_WORKER_PAUSE_AT=K a worker writes OUT.pause before step K and waits
for OUT.go (a signal to take at a known step); a job stopped after a final checkpoint writes no OUT.

    python3 torch_ctr_worker.py OUT -- <pstrain-worker flags, --embedding-dim D among them>
"""

import os
import sys
import time

import numpy as np
import torch
from torch import nn

DENSE, FIELDS, RECORDS, PROBE = 13, 26, 8192, 64


def records(seed):
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((RECORDS, DENSE)).astype(np.float32)
    ids = rng.zipf(1.3, (RECORDS, FIELDS)).astype(np.int64) % 5000 + (np.arange(FIELDS) << 40)
    weight = rng.standard_normal(DENSE)
    click = (dense @ weight + (ids[:, 0] % 7 == 0) * 2.0 + rng.standard_normal(RECORDS)) > 1.0
    return torch.from_numpy(dense), torch.from_numpy(ids), torch.from_numpy(click.astype(np.float32))


class Model(nn.Module):
    def __init__(self, worker, dim):
        super().__init__()
        import pstrain.torch
        self.embedding = pstrain.torch.EmbeddingBag(worker, FIELDS)
        self.bottom = nn.Sequential(nn.Linear(DENSE, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim + FIELDS * dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, dense, ids):
        return self.top(torch.cat([self.bottom(dense), self.embedding(ids)], dim=1)).squeeze(1)


def main():
    import pstrain
    import pstrain.torch

    split = sys.argv.index("--")
    out = sys.argv[1]
    worker = pstrain.init(sys.argv[split + 1:])
    torch.set_num_threads(1)
    torch.manual_seed(worker.seed)
    dense, ids, click = records(worker.seed)
    model = Model(worker, worker.embedding_dim)
    dense_params = [p for name, p in model.named_parameters()]
    opt = pstrain.torch.DistributedOptimizer(dense_params, worker, worker.steps)
    batch = worker.batch_size
    global_batch = batch * worker.num_workers
    prefetch = os.environ.get("PSTRAIN_TEST_PREFETCH") == "1"
    pause_at = int(os.environ.get("TORCH_WORKER_PAUSE_AT", "-1"))

    def rows_of(step):
        first = (step * global_batch) % (RECORDS - global_batch) + worker.index * batch
        return slice(first, first + batch)

    while not opt.finished:
        if opt.step_index == pause_at:  # until the test says go
            with open(out + ".pause", "w") as f:
                f.write(f"{opt.step_index}\n")
            while not os.path.exists(out + ".go"):
                time.sleep(0.01)  # polling the test's file
        rows = rows_of(opt.step_index)
        if prefetch and opt.step_index + 1 < worker.steps:
            model.embedding.prefetch(ids[rows_of(opt.step_index + 1)])
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(dense[rows], ids[rows]), click[rows],
                                                              reduction="sum")
        loss.backward()
        opt.step(samples=batch, loss_sum=loss.item())
    if worker.index == 0 and not worker.stopped:  # a stopped job's parameters are its checkpoint's
        with torch.no_grad():
            probe = model.embedding(ids[:PROBE]).numpy()
        with open(out, "wb") as f:  # its name as given (np.savez would add .npz)
            np.savez(f, dense=np.concatenate([p.detach().reshape(-1).numpy() for p in dense_params]), rows=probe,
                     prefetched=model.embedding.rows.prefetched)
    worker.done()


if __name__ == "__main__":
    main()
