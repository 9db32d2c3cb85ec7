#!/usr/bin/env python3
"""A PyTorch DLRM-like CTR model three ways on tools/ctr_gen.py's data: one PyTorch process,
PyTorch DDP, and PyTorch workers on pstrain's PS (pstrain.torch.EmbeddingBag + DistributedOptimizer).

The model is configs/ctr.cfg's: 13 dense features (log1p, as pstrain reads them) and 26 categorical
fields of 8-float rows in one table keyed by (field, ID), an MLP 221-256-128-2 above them, cross
entropy; Adam (lr 0.001) on the MLP, FTRL (lr 2, rows from zero) on the table; global batch 2048;
--epochs passes over a permutation of the training records drawn from seed 42 per epoch, the same
in every row. The rows:

    torch       one process: nn.Embedding(sparse=True) over the IDs hashed as pstrain's shared table
                hashes them (bench/ctr.py's torch row), the MLP, torch.optim.Adam and bench/ctr.py's
                SparseFtrl; --torch-threads threads (default: every core)
    torch-ddp   the same in 2 processes (DistributedDataParallel, gloo), each half the global batch
                and cores / 2 threads
    pstrain-py  launch/launch.sh --worker-cmd: 1 PS + 2 PyTorch workers (sync), each half the global
                batch and cores / 2 threads; the rows in the PS's table (--embedding-optimizer ftrl),
                the MLP's parameters on the PS (--optimizer adam); the next step's rows prefetched
                (EmbeddingBag.prefetch; --no-prefetch: not)

samples/s: training samples over the training loop's time on rank 0 (data loading, start-up and
the evaluation after the last step not counted, in every row); test AUC and log loss after the
last step. Data: tools/ctr_gen.py, once per run. Each configuration runs --repeat times
(default 3), alternating (the order rotates every round); the table gives medians of samples/s,
the first round's AUC, and ratios against torch and torch-ddp. PyTorch runs in --python (default
$PSTRAIN_TORCH_PYTHON, else python3); pstrain-py imports the package from <build>/python.

    python3 bench/torch_dlrm.py --repeat 3
    python3 bench/torch_dlrm.py --repeat 1 --epochs 1 --train-lines 20000 --test-lines 4000   # a smoke run
"""
import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ctr import DENSE, CAT, MASK64, SparseFtrl, generate  # noqa: E402
from torch_ranks import Failed, config_list, free_port, machine, missing_binary, run_ranks, torch_problem  # noqa: E402

REPO = os.path.dirname(HERE)
CONFIGS = {"torch": 1, "torch-ddp": 2, "pstrain-py": 2}
DIM, HIDDEN, LR, TABLE_LR, GLOBAL_BATCH, SEED = 8, (256, 128), 0.001, 2.0, 2048, 42


def die(message, code=2):
    print(f"torch_dlrm: {message}", file=sys.stderr)
    sys.exit(code)


# ------------------------------------------------------------------------- data (numpy, once)

def mix_id(np, x):
    """SplitMix64's finaliser of x + 0x9e3779b97f4a7c15 on uint64 arrays (shared/train/sparse_ids.cc)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def read_tsv(np, path):
    """Labels, dense features (log1p(max(x, 0)), 0 when empty, as pstrain) and the 26 raw IDs per
    record (an empty field: 2^64 - 1, as pstrain's reader gives it)."""
    labels, dense, ids = [], [], []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            labels.append(int(parts[0]))
            dense.append([float(v) if v else 0.0 for v in parts[1:1 + DENSE]])
            ids.append([int(v, 16) if v else MASK64 for v in parts[1 + DENSE:]])
    dense = np.log1p(np.maximum(np.array(dense, np.float64), 0)).astype(np.float32)
    return np.array(labels, np.int64), dense, np.array(ids, np.uint64)


def prepare(args):
    """In the torch Python: the TSV files as arrays (data.npz), read once per run."""
    import numpy as np
    y, x, ids = read_tsv(np, os.path.join(args.data_dir, "train.tsv"))
    ty, tx, tids = read_tsv(np, os.path.join(args.data_dir, "test.tsv"))
    np.savez(os.path.join(args.data_dir, "data.npz"), y=y, x=x, ids=ids, ty=ty, tx=tx, tids=tids)


def load(np, data_dir):
    d = np.load(os.path.join(data_dir, "data.npz"))
    return {k: d[k] for k in d.files}


def epoch_order(np, records, epoch):
    """The records of an epoch in the order every row takes them."""
    return np.random.default_rng(SEED + epoch).permutation(records)


def mlp(nn):
    return nn.Sequential(nn.Linear(DENSE + CAT * DIM, HIDDEN[0]), nn.ReLU(), nn.Linear(HIDDEN[0], HIDDEN[1]),
                         nn.ReLU(), nn.Linear(HIDDEN[1], 2))


def auc_logloss(np, p, labels):
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


def predict(torch, model, x, ids):
    with torch.no_grad():
        return torch.cat([torch.softmax(model(x[i:i + 4096], ids[i:i + 4096]), 1)[:, 1]
                          for i in range(0, x.shape[0], 4096)]).double().numpy()


def schedule(np, records, epochs, per_rank, rank, world):
    """(step, this rank's record indices) of every step."""
    steps_per_epoch = records // GLOBAL_BATCH
    for epoch in range(epochs):
        perm = epoch_order(np, records, epoch)
        for k in range(steps_per_epoch):
            first = k * GLOBAL_BATCH + rank * per_rank
            yield epoch * steps_per_epoch + k, perm[first:first + per_rank]


def result(rank, samples, seconds, auc, logloss):
    return json.dumps({"rank": rank, "samples_per_s": samples / seconds, "test_auc": auc, "test_logloss": logloss,
                       "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


# ------------------------------------------------------------------------------------- PyTorch

def torch_child(args):
    """In the torch Python: one rank of torch / torch-ddp; prints a JSON line."""
    import numpy as np
    import torch
    import torch.nn as nn

    rank, world = args.rank, args.world
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    if world > 1:
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    d = load(np, args.data_dir)
    records = len(d["y"])
    # pstrain's shared table: key = mix_id(raw ^ mix_id(field + 1)); a row per key the data shows.
    salts = mix_id(np, np.arange(1, CAT + 1, dtype=np.uint64))
    keys = mix_id(np, np.concatenate([d["ids"], d["tids"]]) ^ salts)
    vocab, index = np.unique(keys, return_inverse=True)
    index = torch.from_numpy(index.reshape(-1, CAT).astype(np.int64))
    x_ids, t_ids = index[:records], index[records:]
    x, t, y = torch.from_numpy(d["x"]), torch.from_numpy(d["tx"]), torch.from_numpy(d["y"])

    top = mlp(nn)  # first, as pstrain-py's: the same initial values
    table = nn.Embedding(len(vocab), DIM, sparse=True)
    with torch.no_grad():
        table.weight.zero_()  # FTRL's rows start at zero

    class Ctr(nn.Module):
        def __init__(self):
            super().__init__()
            self.table, self.mlp = table, top

        def forward(self, dense, ids):
            return self.mlp(torch.cat([dense, self.table(ids).flatten(1)], 1))

    model = Ctr()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    dense_opt = torch.optim.Adam(top.parameters(), lr=LR)
    table_opt = SparseFtrl(torch, table.weight, TABLE_LR)
    loss_fn = nn.CrossEntropyLoss()  # DDP averages over ranks: the mean over the global batch either way
    per_rank = GLOBAL_BATCH // world
    steps = 0
    start = time.perf_counter()
    for steps, rows in schedule(np, records, args.epochs, per_rank, rank, world):
        rows = torch.from_numpy(rows)
        dense_opt.zero_grad(set_to_none=True)
        table_opt.zero_grad(set_to_none=True)
        loss_fn(model(x[rows], x_ids[rows]), y[rows]).backward()
        dense_opt.step()
        table_opt.step()
    seconds = time.perf_counter() - start
    auc, logloss = auc_logloss(np, predict(torch, model, t, t_ids), d["ty"].astype(np.float64)) if rank == 0 \
        else (None, None)
    print(result(rank, (steps + 1) * GLOBAL_BATCH, seconds, auc, logloss), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_torch(args, name, work, data):
    world = CONFIGS[name]
    port = free_port()
    threads = args.torch_threads if world == 1 else max(1, (os.cpu_count() or 1) // world)
    commands = [[args.python, os.path.abspath(__file__), "--torch-child", "--rank", str(rank), "--world", str(world),
                 "--port", str(port), "--data-dir", data, "--epochs", str(args.epochs), "--threads", str(threads)]
                for rank in range(world)]
    results = run_ranks(name, commands, REPO, args.timeout)
    return dict(results[0], rss_mib={f"rank{r['rank']}": r["rss_mib"] for r in results})


# ------------------------------------------------------------------------------ pstrain-py

def pstrain_child(argv):
    """A worker of the pstrain-py job (launch.sh --worker-cmd): DATA_DIR RESULT PREFETCH, then
    pstrain-worker's flags. The chief writes RESULT (JSON)."""
    import numpy as np
    import torch
    import torch.nn as nn
    import pstrain
    import pstrain.torch

    data_dir, out, prefetch = argv[0], argv[1], argv[2] == "1"
    worker = pstrain.init(argv[3:])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // worker.num_workers))
    torch.manual_seed(SEED)
    d = load(np, data_dir)
    records = len(d["y"])
    x, t = torch.from_numpy(d["x"]), torch.from_numpy(d["tx"])
    ids, t_ids = d["ids"].view(np.int64), torch.from_numpy(d["tids"].view(np.int64))
    y = torch.from_numpy(d["y"])
    top = mlp(nn)
    embedding = pstrain.torch.EmbeddingBag(worker, CAT)

    def model(dense, batch_ids):
        return top(torch.cat([dense, embedding(batch_ids)], 1))

    per_rank = worker.batch_size
    epochs = -(-worker.steps // (records // GLOBAL_BATCH))
    plan = list(schedule(np, records, epochs, per_rank, worker.index, worker.num_workers))[:worker.steps]
    opt = pstrain.torch.DistributedOptimizer(top.parameters(), worker, total_steps=len(plan))
    loss_fn = nn.CrossEntropyLoss(reduction="sum")  # gradient sums: the PS divides by the global batch
    start = time.perf_counter()
    while not opt.finished:
        step, rows = plan[opt.step_index]
        if prefetch and step + 1 < len(plan):
            embedding.prefetch(ids[plan[step + 1][1]])  # asked for once this step's rows are pushed
        opt.zero_grad()
        loss = loss_fn(model(x[rows], ids[rows]), y[rows])
        loss.backward()
        opt.step(samples=len(rows), loss_sum=loss.item())
    seconds = time.perf_counter() - start
    if worker.index == 0:
        auc, logloss = auc_logloss(np, predict(torch, model, t, t_ids), d["ty"].astype(np.float64))
        with open(out, "w") as f:
            f.write(result(0, len(plan) * GLOBAL_BATCH, seconds, auc, logloss))
    worker.done()


def run_pstrain(args, name, work, data):
    run_dir = os.path.join(work, name)
    out = os.path.join(work, name + ".json")
    command = [args.python, os.path.abspath(__file__), "--pstrain-child", data, out, "0" if args.no_prefetch else "1"]
    cmd = [os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--progress", "lines", "--run-dir", run_dir,
           "--num-ps", "1", "--num-workers", str(CONFIGS[name]), "--worker-cmd", shlex.join(command), "--",
           "--mode", "sync", "--batch-size", str(GLOBAL_BATCH // CONFIGS[name]),
           "--steps", str(args.epochs * (args.train_lines // GLOBAL_BATCH)),
           "--seed", str(SEED), "--optimizer", "adam", "--lr", str(LR),
           "--lr-schedule", "constant", "--embedding-dim", str(DIM),
           "--embedding-tables", "shared", "--embedding-optimizer", "ftrl", "--embedding-lr", str(TABLE_LR)]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=REPO,
                              env=dict(os.environ, PSTRAIN_BUILD_DIR=args.build_dir), timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"{name}: did not finish within --timeout {args.timeout:g} s; logs in {run_dir}") from None
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or not os.path.exists(out):
        raise Failed(f"{name}: launch.sh exited with {proc.returncode}; logs in {run_dir}\n{text[-3000:]}")
    with open(out) as f:
        r = json.load(f)
    rss = {p: int(kib) / 1024 for p, kib in re.findall(r"^\[(ps\d+)\] .*peak_rss_kib=(\d+)", text, re.M)}
    return dict(r, rss_mib=dict(rss, w0=r["rss_mib"]))


# -------------------------------------------------------------------------------------- table

def compare(args, configs, work):
    data = os.path.join(work, "data")
    ceiling = generate(data, args.train_lines, args.test_lines, args.distinct_ids, args.data_seed)
    subprocess.run([args.python, os.path.abspath(__file__), "--prepare", "--data-dir", data], check=True)
    runs = {c: [] for c in configs}
    for round_index in range(args.repeat):
        order = configs[round_index % len(configs):] + configs[:round_index % len(configs)]
        for name in order:
            runner = run_pstrain if name.startswith("pstrain") else run_torch
            r = runner(args, name, os.path.join(work, str(round_index)), data)
            runs[name].append(r)
            print(f"# round {round_index + 1}/{args.repeat}: {name} {r['samples_per_s']:.0f} samples/s "
                  f"auc {r['test_auc']:.4f}", file=sys.stderr, flush=True)
    rows = {name: {"samples_per_s": statistics.median(x["samples_per_s"] for x in r), "test_auc": r[0]["test_auc"],
                   "test_logloss": r[0]["test_logloss"], "runs": [round(x["samples_per_s"]) for x in r],
                   "rss_mib": r[0]["rss_mib"]} for name, r in runs.items()}
    for row in rows.values():
        for base in ("torch", "torch-ddp"):
            b = rows.get(base, {}).get("samples_per_s")
            row["vs_" + base] = round(row["samples_per_s"] / b, 3) if b else None
    header = (f"bench/torch_dlrm: DLRM-like (13 dense + 26 fields x {DIM} floats, MLP 221-256-128-2, Adam {LR}, "
              f"FTRL {TABLE_LR} tables, global batch {GLOBAL_BATCH}, {args.epochs} epoch(s)) on ctr_gen data "
              f"{args.train_lines}+{args.test_lines} lines, ceiling_auc={ceiling}; torch {args.torch_threads} "
              f"thread(s), 2-process rows {max(1, (os.cpu_count() or 1) // 2)} each; "
              f"prefetch {'off' if args.no_prefetch else 'on'}; medians of {args.repeat} alternating rounds")
    if args.json:
        print(json.dumps({"machine": machine(args.build_dir), "header": header, "rows": rows}))
        return
    print(f"# machine: {machine(args.build_dir)}")
    print(f"# {header}")
    print(f"{'config':<11} {'samples_per_s':>13} {'vs_torch':>8} {'vs_ddp':>7} {'test_auc':>8} {'logloss':>7}  runs")
    for name, row in rows.items():
        ratios = [f"{row[k]:.3f}" if row[k] is not None else "-" for k in ("vs_torch", "vs_torch-ddp")]
        print(f"{name:<11} {row['samples_per_s']:>13.0f} {ratios[0]:>8} {ratios[1]:>7} {row['test_auc']:>8.4f} "
              f"{row['test_logloss']:>7.4f}  {row['runs']}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="torch,torch-ddp,pstrain-py",
                   help="comma-separated rows, of torch, torch-ddp, pstrain-py (default all)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the table gives medians (default 3)")
    p.add_argument("--epochs", type=int, default=2, help="passes over the training records (default 2)")
    p.add_argument("--train-lines", type=int, default=100000, help="training records (default 100000)")
    p.add_argument("--test-lines", type=int, default=20000, help="test records (default 20000)")
    p.add_argument("--distinct-ids", type=int, default=100000, help="ctr_gen.py's --distinct-ids (default 100000)")
    p.add_argument("--data-seed", type=int, default=1, help="ctr_gen.py's --seed (default 1)")
    p.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1,
                   help="threads of the one-process torch row (default: every core)")
    p.add_argument("--no-prefetch", action="store_true", help="pstrain-py without EmbeddingBag.prefetch")
    p.add_argument("--python", default=os.environ.get("PSTRAIN_TORCH_PYTHON") or "python3",
                   help="the Python with PyTorch and numpy (default $PSTRAIN_TORCH_PYTHON, else python3)")
    p.add_argument("--build-dir", default=os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(REPO, "build")),
                   help="pstrain's build directory, with python/ (default $PSTRAIN_BUILD_DIR or build/)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    for hidden, kind, default in (("--torch-child", "store_true", False), ("--prepare", "store_true", False)):
        p.add_argument(hidden, action=kind, default=default, help=argparse.SUPPRESS)
    for hidden, kind in (("--rank", int), ("--world", int), ("--port", int), ("--threads", int)):
        p.add_argument(hidden, type=kind, default=1 if hidden in ("--world", "--threads") else 0,
                       help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat < 1 or args.epochs < 1 or args.train_lines < GLOBAL_BATCH or args.test_lines < 1:
        die(f"--repeat, --epochs and --test-lines must be positive, --train-lines at least {GLOBAL_BATCH}")
    try:
        args.configs = config_list(args.configs, CONFIGS)
    except ValueError as e:
        die(str(e))
    return args


def main(argv):
    if argv[:1] == ["--pstrain-child"]:
        pstrain_child(argv[1:])
        return 0
    args = parse_args(argv)
    if args.prepare:
        prepare(args)
        return 0
    if args.torch_child:
        torch_child(args)
        return 0
    if missing_binary(args.build_dir):
        die(missing_binary(args.build_dir))
    if not os.path.isdir(os.path.join(args.build_dir, "python", "pstrain")) and "pstrain-py" in args.configs:
        die(f"no Python package in {args.build_dir}/python (needs pybind11-dev and python3-dev; docs/python.md)")
    reason = torch_problem(args.python)
    if reason is not None:
        die(f"{args.python} has no PyTorch/numpy ({reason}); give --python or set PSTRAIN_TORCH_PYTHON")
    with tempfile.TemporaryDirectory(prefix="pstrain-dlrm-") as work:
        try:
            compare(args, list(args.configs), work)
        except Failed as e:
            die(str(e), 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
