#!/usr/bin/env python3
"""A PyTorch DLRM three ways on tools/ctr_gen.py's data: one PyTorch process, PyTorch DDP, and
PyTorch workers on pstrain's PS (pstrain.torch.EmbeddingBag + DistributedOptimizer).

The model is tools/dlrm_torch.py's DLRM, in every row the same code: 13 dense features (log1p, as
pstrain reads them) through a bottom MLP 13-64-8, the 26 categorical fields' 8-float rows in one
table keyed by (field, ID), the 351 pairwise dot products of those 27 vectors with the bottom
output, a top MLP 359-256-128-1, binary cross-entropy on the click logit; Adam (lr 0.001) on the
MLPs, FTRL (lr 2, rows from zero, the PS's formula) on the table; global batch 2048; --epochs
passes over a permutation of the training records drawn from seed 42 per epoch, the same in every
row, and the same initial values. The rows:

    torch       one process: tools/dlrm_torch.py's TorchTable (nn.Embedding(sparse=True) over the IDs
                hashed as pstrain's shared table hashes them), torch.optim.Adam and its SparseFtrl;
                --torch-threads threads (default: every core)
    torch-ddp   the same in 2 processes (DistributedDataParallel, gloo), each half the global batch
                and cores / 2 threads
    pstrain-py  launch/launch.sh --worker-cmd "python3 tools/dlrm_torch.py ...": 1 PS + 2 PyTorch
                workers (sync), each half the global batch and cores / 2 threads; the rows in the
                PS's table (--embedding-optimizer ftrl), the MLPs' parameters on the PS (--optimizer
                adam); the next step's rows prefetched (EmbeddingBag.prefetch; --no-prefetch: not)

samples/s: training samples over the training loop's time on rank 0 (data loading, start-up and
the evaluation after the last step not counted, in every row); test AUC and log loss after the
last step. Data: tools/ctr_gen.py, once per run. Each configuration runs --repeat times
(default 3), alternating (the order rotates every round); the table gives medians of samples/s
and AUC (every round's AUC in `aucs`), and ratios against torch and torch-ddp. PyTorch runs in
--python (default $PSTRAIN_TORCH_PYTHON, else python3); pstrain-py imports the package from
<build>/python.

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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ctr import generate  # noqa: E402
from torch_ranks import Failed, config_list, free_port, machine, missing_binary, run_ranks, torch_problem  # noqa: E402

REPO = os.path.dirname(HERE)
CONFIGS = {"torch": 1, "torch-ddp": 2, "pstrain-py": 2}
TOOL = os.path.join(REPO, "tools", "dlrm_torch.py")
DIM, LR, TABLE_LR, GLOBAL_BATCH, SEED = 8, 0.001, 2.0, 2048, 42


def die(message, code=2):
    print(f"torch_dlrm: {message}", file=sys.stderr)
    sys.exit(code)


# ------------------------------------------------------------------------- data (numpy, once)

def tool():
    """tools/dlrm_torch.py as a module (in the torch Python: it imports torch)."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import dlrm_torch
    return dlrm_torch


def prepare(args):
    """In the torch Python: the TSV files as arrays (data.npz), read once per run."""
    import numpy as np
    read_tsv = tool().read_tsv
    y, x, ids = read_tsv(os.path.join(args.data_dir, "train.tsv"))
    ty, tx, tids = read_tsv(os.path.join(args.data_dir, "test.tsv"))
    np.savez(os.path.join(args.data_dir, "data.npz"), y=y, x=x, ids=ids, ty=ty, tx=tx, tids=tids)


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
    dlrm = tool()
    torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    if world > 1:
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    d = np.load(os.path.join(args.data_dir, "data.npz"))
    records = len(d["y"])
    rows_total, (x_ids, t_ids) = dlrm.TorchTable.indices(d["ids"], d["tids"])
    x, t, y = torch.from_numpy(d["x"]), torch.from_numpy(d["tx"]), torch.from_numpy(d["y"])
    model = dlrm.DLRM(dlrm.TorchTable(rows_total, DIM), DIM)
    net = model
    if world > 1:  # the DLRM's buffers (the pairs' indices) are constants: not broadcast every step
        net = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
    per_rank = GLOBAL_BATCH // world
    schedule = dlrm.Schedule(records, GLOBAL_BATCH, SEED, rank, per_rank)
    steps = args.epochs * (records // GLOBAL_BATCH)
    seconds = dlrm.train_torch_steps(net, model, x, x_ids, y, schedule, steps, LR, TABLE_LR)  # the tool's loop
    auc, logloss = dlrm.auc_logloss(dlrm.predict(model, t, t_ids), d["ty"].astype(np.float64)) if rank == 0 \
        else (None, None)
    print(result(rank, steps * GLOBAL_BATCH, seconds, auc, logloss), flush=True)
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

def run_pstrain(args, name, work, data):
    run_dir = os.path.join(work, name)
    out = os.path.join(work, name + ".json")
    command = [args.python, TOOL, "--train-tsv", os.path.join(data, "train.tsv"), "--test-tsv",
               os.path.join(data, "test.tsv"), "--result", out] + (["--no-prefetch"] if args.no_prefetch else [])
    cmd = [os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--progress", "lines", "--run-dir", run_dir,
           "--num-ps", "1", "--num-workers", str(CONFIGS[name]), "--worker-cmd", shlex.join(command), "--",
           "--mode", "sync", "--batch-size", str(GLOBAL_BATCH // CONFIGS[name]),
           "--steps", str(args.epochs * (args.train_lines // GLOBAL_BATCH)),
           "--seed", str(SEED), "--optimizer", "adam", "--lr", str(LR),
           "--lr-schedule", "constant", "--embedding-dim", str(DIM), "--log-every", "100000",
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
    rows = {name: {"samples_per_s": statistics.median(x["samples_per_s"] for x in r),
                   "test_auc": statistics.median(x["test_auc"] for x in r),
                   "test_logloss": statistics.median(x["test_logloss"] for x in r),
                   "runs": [round(x["samples_per_s"]) for x in r], "aucs": [round(x["test_auc"], 5) for x in r],
                   "rss_mib": r[0]["rss_mib"]} for name, r in runs.items()}
    for row in rows.values():
        for base in ("torch", "torch-ddp"):
            b = rows.get(base, {}).get("samples_per_s")
            row["vs_" + base] = round(row["samples_per_s"] / b, 3) if b else None
    header = (f"bench/torch_dlrm: tools/dlrm_torch.py's DLRM (bottom 13-64-{DIM}, 26 fields x {DIM} floats, "
              f"351 dot products, top 359-256-128-1, BCE; Adam {LR}, FTRL {TABLE_LR} tables, global batch "
              f"{GLOBAL_BATCH}, {args.epochs} epoch(s)) on ctr_gen data {args.train_lines}+{args.test_lines} lines, "
              f"--data-seed {args.data_seed}, ceiling_auc={ceiling}; torch {args.torch_threads} thread(s), 2-process "
              f"rows {max(1, (os.cpu_count() or 1) // 2)} each; prefetch {'off' if args.no_prefetch else 'on'}; "
              f"medians of {args.repeat} alternating rounds")
    if args.json:
        print(json.dumps({"machine": machine(args.build_dir), "header": header, "rows": rows}))
        return
    print(f"# machine: {machine(args.build_dir)}")
    print(f"# {header}")
    print(f"{'config':<11} {'samples_per_s':>13} {'vs_torch':>8} {'vs_ddp':>7} {'test_auc':>8} {'logloss':>7}  runs; aucs")
    for name, row in rows.items():
        ratios = [f"{row[k]:.3f}" if row[k] is not None else "-" for k in ("vs_torch", "vs_torch-ddp")]
        print(f"{name:<11} {row['samples_per_s']:>13.0f} {ratios[0]:>8} {ratios[1]:>7} {row['test_auc']:>8.4f} "
              f"{row['test_logloss']:>7.4f}  {row['runs']}; {row['aucs']}")


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
