#!/usr/bin/env python3
"""A PyTorch DLRM on Criteo-format data (tools/ctr_gen.py's, or Criteo's own TSV files), its
embedding tables and its optimizer on pstrain's parameter servers. Run it as the workers of a job:

    python3 tools/ctr_gen.py --out-dir /tmp/ctr
    launch/launch.sh --num-ps 1 --num-workers 2 --worker-cmd \\
        "python3 tools/dlrm_torch.py --train-tsv /tmp/ctr/train.tsv --test-tsv /tmp/ctr/test.tsv" -- \\
        --embedding-dim 8 --embedding-optimizer ftrl --embedding-lr 2 --optimizer adam --lr 0.001 \\
        --batch-size 1024 --epochs 2

The flags before `--` in --worker-cmd are this script's (below); the launcher appends pstrain-worker's
(the job's), which `pstrain.init` reads. The chief (worker 0) prints the test AUC at the end.

The model (Naumov et al. 2019, "Deep Learning Recommendation Model", as TorchRec's DLRM):
  * a bottom MLP 13-64-D (ReLU) on the 13 dense features (log1p(max(x, 0)), 0 when empty);
  * the 26 categorical fields' rows of D floats (--embedding-dim D), one table keyed by
    (field, ID), kept on the PS shards (pstrain.torch.EmbeddingBag): forward pulls the batch's rows,
    backward pushes their gradients, the PS applies --embedding-optimizer to them;
  * the pairwise dot products of the 27 vectors (the bottom output and the 26 rows): the upper
    triangle, 351 numbers, concatenated with the bottom output;
  * a top MLP (D + 351)-256-128-1 to the click logit; binary cross-entropy with logits.
The dense parameters (both MLPs) live on the PS too (pstrain.torch.DistributedOptimizer, the job's
--optimizer). In sync mode N workers equal one process on the concatenated batch: `--torch` runs
that one process in plain PyTorch (torch.optim.Adam, and an FTRL on the rows with the PS's
formula), the baseline to compare with.

Each step's global batch (workers x --batch-size) is the next slice of a permutation of the
training records drawn per epoch from --seed; worker i takes its i-th share. --steps 0 (the
default): --epochs passes.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
from torch import nn

DENSE, FIELDS = 13, 26
BOTTOM, TOP = (64,), (256, 128)
MASK64 = (1 << 64) - 1  # an empty categorical field's ID, as pstrain's reader gives it


# ------------------------------------------------------------------------------------ the data

def read_tsv(path):
    """Criteo's TSV: label, 13 integer features, 26 hex IDs. Returns labels (float32), the dense
    features (float32, log1p(max(x, 0)), 0 when empty: as pstrain reads them) and the raw IDs
    (uint64 [n, 26], an empty field 2^64 - 1)."""
    labels, dense, ids = [], [], []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                parts = line.rstrip("\n").split("\t")
                if len(parts) != 1 + DENSE + FIELDS or parts[0] not in ("0", "1"):
                    raise ValueError(f"line {number}: not a Criteo record (a 0/1 label, {DENSE} integers, "
                                     f"{FIELDS} hex IDs, tab-separated)")
                labels.append(parts[0])
                dense.append([float(v) if v else 0.0 for v in parts[1:1 + DENSE]])
                ids.append([int(v, 16) if v else MASK64 for v in parts[1 + DENSE:]])
    except (OSError, ValueError) as e:
        sys.exit(f"dlrm_torch: {path}: {e}")
    if not labels:
        sys.exit(f"dlrm_torch: {path}: no records")
    dense = np.log1p(np.maximum(np.array(dense, np.float64), 0)).astype(np.float32)
    return np.array(labels, np.float32), dense, np.array(ids, np.uint64).reshape(-1, FIELDS)


def mix_id(x):
    """SplitMix64's finaliser of x + 0x9e3779b97f4a7c15 (uint64 arrays; shared/train/sparse_ids.cc)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def table_keys(ids):
    """The keys of pstrain's shared table (one table keyed by (field, ID)): mix_id(ID ^ mix_id(field + 1))."""
    return mix_id(ids ^ mix_id(np.arange(1, FIELDS + 1, dtype=np.uint64)))


class Schedule:
    """The records of worker `index`'s share of a step: the step's slice of its epoch's permutation
    (drawn from seed + epoch)."""

    def __init__(self, records, global_batch, seed, index=0, share=None):
        self.records, self.global_batch, self.seed = records, global_batch, seed
        self.index, self.share = index, global_batch if share is None else share
        self.epoch, self.perm = None, None

    def __call__(self, step):
        epoch, k = divmod(step, self.records // self.global_batch)
        if epoch != self.epoch:
            self.epoch, self.perm = epoch, np.random.default_rng(self.seed + epoch).permutation(self.records)
        first = k * self.global_batch + self.index * self.share
        return self.perm[first:first + self.share]


# ----------------------------------------------------------------------------------- the model

def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """`embedding` maps a batch's IDs to [n, FIELDS * dim] (pstrain.torch.EmbeddingBag, or a
    plain table: TorchTable). It holds no random initial values, so the MLPs' are the same for
    the same torch seed whichever it is."""

    def __init__(self, embedding, dim, bottom=BOTTOM, top=TOP):
        super().__init__()
        self.dim = dim
        self.bottom = mlp([DENSE, *bottom, dim], last_relu=True)
        vectors = FIELDS + 1
        self.top = mlp([dim + vectors * (vectors - 1) // 2, *top, 1], last_relu=False)
        self.embedding = embedding
        i, j = torch.triu_indices(vectors, vectors, offset=1)
        self.register_buffer("pair_i", i, persistent=False)
        self.register_buffer("pair_j", j, persistent=False)

    def forward(self, dense, ids):
        x = self.bottom(dense)                                          # [n, dim]
        z = torch.cat([x.unsqueeze(1), self.embedding(ids).view(-1, FIELDS, self.dim)], 1)  # [n, 27, dim]
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.pair_i, self.pair_j]                 # [n, 351]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)            # click logits


class TorchTable(nn.Module):
    """Plain PyTorch's table: a row per (field, ID) key the data shows, from zero (FTRL's start);
    forward takes row indices ([n, FIELDS] int64, from `indices`)."""

    def __init__(self, rows, dim):
        super().__init__()
        self.table = nn.Embedding(rows, dim, sparse=True, _weight=torch.zeros(rows, dim))

    def forward(self, index):
        return self.table(index).flatten(1)

    @staticmethod
    def indices(*id_arrays):
        """(rows, [int64 index tensors]) for raw ID arrays, keyed as pstrain's shared table."""
        keys = [table_keys(ids) for ids in id_arrays]
        vocab, inverse = np.unique(np.concatenate([k.reshape(-1) for k in keys]), return_inverse=True)
        out, at = [], 0
        for k in keys:
            out.append(torch.from_numpy(inverse[at:at + k.size].reshape(k.shape).astype(np.int64)))
            at += k.size
        return len(vocab), out


class SparseFtrl:
    """FTRL-Proximal on the rows a step touched, exactly the PS's `ftrl` table (docs/sparse.md):
    alpha = lr, beta 1, l1 = l2 = 0, n from 0.1, w from zero; sigma from the stored w."""

    def __init__(self, weight, lr, beta=1.0, initial=0.1):
        self.weight, self.lr, self.beta = weight, lr, beta
        self.z = torch.zeros_like(weight.data)
        self.n = torch.full_like(weight.data, initial)

    def zero_grad(self, set_to_none=True):
        self.weight.grad = None

    def step(self):
        grad = self.weight.grad.coalesce()
        rows, g = grad.indices()[0], grad.values()
        w, z, n = self.weight.data[rows], self.z[rows], self.n[rows]
        sigma = (torch.sqrt(n + g * g) - torch.sqrt(n)) / self.lr
        z = z + g - sigma * w
        n = n + g * g
        self.z[rows], self.n[rows] = z, n
        self.weight.data[rows] = -z / ((self.beta + torch.sqrt(n)) / self.lr)


class PsAdam:
    """Adam in the PS's float32 operation order (shared/train/optimizer.cc, adam_kernel):
    torch.optim.Adam's formula (bias-corrected, eps outside the root) rounded as the PS rounds it,
    for --ps-adam: the same arithmetic as the pstrain job, so that what is left between the two is
    the order of the gradient sums, not Adam's rounding, which grows over the steps (docs/python.md)."""

    def __init__(self, params, lr, beta1=0.9, beta2=0.999, eps=1e-8):
        self.params, self.lr, self.beta1, self.beta2, self.t = list(params), lr, beta1, beta2, 0
        f32 = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
        self.b1, self.b2, self.eps, self.one = f32(beta1), f32(beta2), f32(eps), f32(1.0)
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.t += 1
        step_size = torch.tensor(self.lr / (1.0 - self.beta1 ** self.t), dtype=torch.float32)  # in double, as the PS
        inv_sqrt_c2 = torch.tensor(1.0 / (1.0 - self.beta2 ** self.t) ** 0.5, dtype=torch.float32)
        with torch.no_grad():
            for p, m, v in zip(self.params, self.m, self.v):
                g = p.grad
                m.copy_(self.b1 * m + (self.one - self.b1) * g)
                v.copy_(self.b2 * v + (self.one - self.b2) * g * g)
                p.copy_(p - step_size * m / (torch.sqrt(v) * inv_sqrt_c2 + self.eps))


def auc_logloss(p, labels):
    """ROC AUC (ties share their rank) and log loss of click probabilities p."""
    order = np.argsort(p, kind="mergesort")
    s, ranks = p[order], np.empty(len(p))
    starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
    for a, b in zip(starts, np.r_[starts[1:], len(s)]):
        ranks[a:b] = (a + b + 1) / 2.0
    pos = labels[order] == 1
    n_pos, n_neg = pos.sum(), len(p) - pos.sum()
    auc = (ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    q = np.clip(p, 1e-7, 1 - 1e-7)
    return float(auc), float(-np.mean(labels * np.log(q) + (1 - labels) * np.log(1 - q)))


def predict(model, dense, ids, chunk=4096):
    with torch.no_grad():
        return torch.cat([torch.sigmoid(model(dense[i:i + chunk], ids[i:i + chunk]))
                          for i in range(0, len(dense), chunk)]).double().numpy()


# ------------------------------------------------------------------------------- the training

def report(args, steps, global_batch, seconds, model, tx, t_ids, ty, probe):
    """The chief's end: test AUC printed; --result (JSON) and --save (.npz) written."""
    auc, logloss = auc_logloss(predict(model, tx, t_ids), ty.astype(np.float64))
    samples_per_s = steps * global_batch / seconds if seconds > 0 else 0.0
    print(f"dlrm_torch: {steps} steps of {global_batch}: test_auc={auc:.4f} test_logloss={logloss:.4f} "
          f"samples_per_s={samples_per_s:.0f}", flush=True)
    if args.result:
        with open(args.result, "w") as f:
            json.dump({"steps": steps, "samples_per_s": samples_per_s, "test_auc": auc, "test_logloss": logloss,
                       "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, f)
    if args.save:
        dense = [p for name, p in model.named_parameters() if not name.startswith("embedding.")]
        with torch.no_grad(), open(args.save, "wb") as f:  # its name as given (np.savez would add .npz)
            np.savez(f, dense=np.concatenate([p.detach().reshape(-1).numpy() for p in dense]), rows=probe())


def train_pstrain(args, job_flags):
    """A worker of a pstrain job: the tables and the MLPs' parameters on the PS shards."""
    import pstrain
    import pstrain.torch

    worker = pstrain.init(job_flags)
    if worker.embedding_dim <= 0:
        sys.exit("dlrm_torch: give the job --embedding-dim D (the rows' floats; the PS makes the tables)")
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // worker.num_workers))
    y, x, ids = read_tsv(args.train_tsv)
    ty, tx, tids = read_tsv(args.test_tsv)
    global_batch = worker.batch_size * worker.num_workers
    if len(y) < global_batch:
        sys.exit(f"dlrm_torch: {args.train_tsv} has {len(y)} records, fewer than a step's {global_batch}")
    per_epoch = len(y) // global_batch
    steps = worker.steps or worker.epochs * per_epoch
    torch.manual_seed(worker.seed)
    model = DLRM(pstrain.torch.EmbeddingBag(worker, FIELDS), worker.embedding_dim)
    opt = pstrain.torch.DistributedOptimizer(model, worker, total_steps=steps,  # named: checkpoints export by name
                                             steps_per_epoch=per_epoch)
    x, y, ids = torch.from_numpy(x), torch.from_numpy(y), ids.view(np.int64)  # any 64-bit IDs
    schedule = Schedule(len(y), global_batch, worker.seed, worker.index, worker.batch_size)
    start = time.perf_counter()
    while not opt.finished:
        rows = schedule(opt.step_index)
        if not args.no_prefetch and opt.step_index + 1 < steps:
            model.embedding.prefetch(ids[schedule(opt.step_index + 1)])  # travels while opt.step waits
        opt.zero_grad()
        logits = model(x[rows], ids[rows])
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y[rows], reduction="sum")
        loss.backward()  # sums, not means: the PS divides by the step's samples over all workers
        opt.step(samples=len(rows), loss_sum=loss.item(), correct=int(((logits > 0) == (y[rows] > 0.5)).sum()))
    seconds = time.perf_counter() - start
    if worker.index == 0 and not worker.stopped:
        report(args, steps, global_batch, seconds, model, torch.from_numpy(tx), tids.view(np.int64), ty,
               lambda: model.embedding(ids[:args.probe]).numpy())
    worker.done()


def train_torch_steps(net, model, x, index, y, schedule, steps, lr, table_lr, ps_adam=False):
    """Plain PyTorch's training loop (the baseline's; bench/torch_dlrm.py's DDP ranks too, whose
    `net` is `model` under DistributedDataParallel and whose schedule is their share): the mean
    loss, torch.optim.Adam (PsAdam with `ps_adam`) on the MLPs, SparseFtrl on the TorchTable's
    rows. Returns the seconds."""
    dense = [p for name, p in model.named_parameters() if not name.startswith("embedding.")]
    dense_opt = PsAdam(dense, lr) if ps_adam else torch.optim.Adam(dense, lr=lr)
    table_opt = SparseFtrl(model.embedding.table.weight, table_lr)
    start = time.perf_counter()
    for step in range(steps):
        rows = torch.from_numpy(schedule(step))
        dense_opt.zero_grad(set_to_none=True)
        table_opt.zero_grad()
        # the mean loss; DDP averages over ranks: the mean over the global batch either way
        nn.functional.binary_cross_entropy_with_logits(net(x[rows], index[rows]), y[rows]).backward()
        dense_opt.step()
        table_opt.step()
    return time.perf_counter() - start


def train_torch(args, job_flags):
    """One plain PyTorch process on the whole global batch: the same model, data order and initial
    values; torch.optim.Adam on the MLPs, SparseFtrl on the rows (the mean loss)."""
    p = argparse.ArgumentParser(prog="dlrm_torch.py --torch ... --", allow_abbrev=False,
                                description="the job flags --torch takes (pstrain-worker's names)")
    p.add_argument("--batch-size", type=int, default=64, help="the global batch")
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--embedding-dim", type=int, default=8)
    p.add_argument("--optimizer", choices=["adam"], default="adam")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--embedding-optimizer", choices=["ftrl"], default="ftrl")
    p.add_argument("--embedding-lr", type=float, default=None)
    job = p.parse_args(job_flags)
    torch.set_num_threads(args.threads or (os.cpu_count() or 1))
    y, x, ids = read_tsv(args.train_tsv)
    ty, tx, tids = read_tsv(args.test_tsv)
    rows_total, (index, t_index) = TorchTable.indices(ids, tids)
    per_epoch = len(y) // job.batch_size
    steps = job.steps or job.epochs * per_epoch
    torch.manual_seed(job.seed)
    model = DLRM(TorchTable(rows_total, job.embedding_dim), job.embedding_dim)
    seconds = train_torch_steps(model, model, torch.from_numpy(x), index, torch.from_numpy(y),
                                Schedule(len(y), job.batch_size, job.seed), steps, job.lr,
                                job.lr if job.embedding_lr is None else job.embedding_lr, args.ps_adam)
    report(args, steps, job.batch_size, seconds, model, torch.from_numpy(tx), t_index, ty,
           lambda: model.embedding(index[:args.probe]).numpy())


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                epilog="Every other flag is the job's (pstrain-worker --help), as launch.sh appends them.")
    p.add_argument("--train-tsv", required=True, help="training records, Criteo's TSV (tools/ctr_gen.py's train.tsv)")
    p.add_argument("--test-tsv", required=True, help="test records for the chief's AUC at the end")
    p.add_argument("--torch", action="store_true",
                   help="one plain PyTorch process instead of a pstrain worker (the baseline; FTRL tables, Adam)")
    p.add_argument("--ps-adam", action="store_true",
                   help="with --torch: Adam rounded as the PS rounds it (PsAdam), not torch.optim.Adam: the "
                        "pstrain job's arithmetic, to tell its rounding from a difference")
    p.add_argument("--no-prefetch", action="store_true", help="do not ask for the next step's rows early")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: the cores over the workers)")
    p.add_argument("--result", help="the chief writes its figures here (JSON)")
    p.add_argument("--save", help="the chief writes the MLPs' parameters and the first --probe records' rows (.npz)")
    p.add_argument("--probe", type=int, default=64, help=argparse.SUPPRESS)
    args, job_flags = p.parse_known_args(argv)
    if job_flags[:1] == ["--"]:
        job_flags = job_flags[1:]
    (train_torch if args.torch else train_pstrain)(args, job_flags)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
