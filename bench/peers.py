#!/usr/bin/env python3
"""bench/peers.py: pstrain's configurations against PyTorch, one process and DDP, on one job.

The job of every row: MLP 784-256-128-10 on Fashion-MNIST, SGD with momentum 0.9, lr 0.05 (no
schedule), global batch 128, --epochs passes (default 5), the test set evaluated at every epoch's
end, one thread per process. The rows:

    torch         PyTorch, one process, batch 128 (the baseline of every ratio)
    torch-ddp     PyTorch DistributedDataParallel (gloo), 2 processes x 64
    pstrain-1w    pstrain, 1 PS + 1 worker x 128 (sync)
    pstrain-2w    pstrain, 1 PS + 2 workers x 64 (sync: mirrored, the default job's layout)
    pstrain-ring  pstrain, 2 workers x 64, --mode allreduce (the ZeroMQ ring, no PS)
    pstrain-async pstrain, 1 PS + 2 workers x 64, --mode async (not in the default list)

Each configuration runs --repeat times (default 3), alternating (the order rotates every round),
and the table gives medians:

* samples_per_s: training samples over the training loop's time, per-epoch evaluations included
  (pstrain: the chief's summary; PyTorch: measured the same way by rank 0);
  ratio = samples_per_s / torch's (both medians of this run).
* test_acc: the test accuracy at the end (the first round's).
* wall_s: the whole command, start-up and data loading included (pstrain: launch/launch.sh).
* rss_mib: each process's peak resident memory (VmHWM), e.g. ps0=40 w0=55 w1=55.

pstrain runs through launch/launch.sh (--no-setup: build it first). PyTorch runs in the Python
given by --python (default $PSTRAIN_TORCH_PYTHON, else python3); --venv DIR makes DIR a virtual
environment with PyTorch's CPU wheel from PyPI first (needs the network). Without PyTorch the
torch rows are skipped, saying so, and ratios print as "-".

    python3 bench/peers.py --repeat 3                        # the table of bench/README.md
    python3 bench/peers.py --python /path/venv/bin/python --json
    python3 bench/peers.py --configs pstrain-2w,pstrain-ring --steps 50 --repeat 1   # a smoke run
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ranks import Failed, config_list, free_port, machine, missing_binary, run_ranks, torch_problem  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = 128
CONFIGS = {
    # name: (kind, workers)
    "torch": ("torch", 1),
    "torch-ddp": ("torch", 2),
    "pstrain-1w": ("sync", 1),
    "pstrain-2w": ("sync", 2),
    "pstrain-ring": ("allreduce", 2),
    "pstrain-async": ("async", 2),
}
DEFAULT_CONFIGS = "torch,torch-ddp,pstrain-1w,pstrain-2w,pstrain-ring"


def die(message, code=2):
    print(f"peers: {message}", file=sys.stderr)
    sys.exit(code)


# ----------------------------------------------------------------------------------- pstrain

def run_pstrain(args, name, work):
    kind, workers = CONFIGS[name]
    run_dir = os.path.join(work, name)
    flags = ["--hidden", "256,128", "--optimizer", "momentum", "--momentum", "0.9", "--lr", "0.05",
             "--lr-schedule", "constant", "--batch-size", str(BATCH // workers), "--epochs", str(args.epochs),
             "--threads", "1", "--seed", "42", "--log-every", "100000"]
    flags += ["--steps", str(args.steps)] if args.steps else []
    flags += ["--mode", kind] if kind != "sync" else []
    cmd = [os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--num-workers", str(workers),
           "--run-dir", run_dir] + ([] if kind == "allreduce" else ["--num-ps", "1"]) + ["--"] + flags
    start = time.monotonic()
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PSTRAIN_BUILD_DIR=args.build_dir))
    wall = time.monotonic() - start
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise Failed(f"{name}: launch.sh exited with {proc.returncode}; logs in {run_dir}\n{out[-3000:]}")
    summary = re.search(r"summary: .* samples_per_s=(\d+) .* test_accuracy=([0-9.]+)", out)
    if not summary:
        raise Failed(f"{name}: no summary line in the chief's output; logs in {run_dir}\n{out[-3000:]}")
    rss = {}
    for proc_name, kib in re.findall(r"^\[(\w+)\] .*peak_rss_kib=(\d+)", out, re.M):
        rss[proc_name] = int(kib) / 1024
    return {"samples_per_s": float(summary.group(1)), "test_acc": float(summary.group(2)), "wall_s": wall,
            "rss_mib": rss}


# ------------------------------------------------------------------------------------- PyTorch

def torch_child(args):
    """In the torch Python: one rank of the job; rank 0 prints a JSON line."""
    import numpy as np
    import torch
    import torch.nn as nn
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_vs_torch import read_idx, data_dir  # the same data, read the same way

    rank, world = args.rank, args.world
    torch.set_num_threads(1)
    torch.manual_seed(42)
    if world > 1:
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    directory = data_dir(args.data_dir)
    x = torch.from_numpy(read_idx(directory, "train-images-idx3-ubyte").reshape(-1, 784).astype(np.float32) / 255.0)
    y = torch.from_numpy(read_idx(directory, "train-labels-idx1-ubyte").astype(np.int64))
    tx = torch.from_numpy(read_idx(directory, "t10k-images-idx3-ubyte").reshape(-1, 784).astype(np.float32) / 255.0)
    ty = torch.from_numpy(read_idx(directory, "t10k-labels-idx1-ubyte").astype(np.int64))
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    per_rank = BATCH // world
    steps_per_epoch = x.shape[0] // BATCH
    total = args.steps or steps_per_epoch * args.epochs

    def evaluate():
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(tx[i:i + 1000]).argmax(1) == ty[i:i + 1000]).sum())
                          for i in range(0, tx.shape[0], 1000))
        model.train()
        return correct / tx.shape[0]

    generator = torch.Generator().manual_seed(42)  # the same permutation on every rank
    accuracy = 0.0
    start = time.perf_counter()
    for step in range(total):
        k = step % steps_per_epoch
        if k == 0:
            perm = torch.randperm(x.shape[0], generator=generator)
        index = perm[k * BATCH + rank * per_rank:k * BATCH + (rank + 1) * per_rank]
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x[index]), y[index]).backward()
        optimizer.step()
        if rank == 0 and (k + 1 == steps_per_epoch or step + 1 == total):
            accuracy = evaluate()
    seconds = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"rank": rank, "samples_per_s": total * BATCH / seconds, "test_acc": accuracy,
                      "rss_mib": rss_mib}), flush=True)
    if world > 1:
        dist.barrier()  # both ranks done before either tears gloo down (else it may abort at exit)
        dist.destroy_process_group()


def run_torch(args, name, _work):
    _, world = CONFIGS[name]
    port = free_port()
    start = time.monotonic()
    commands = []
    for rank in range(world):
        cmd = [args.python, os.path.abspath(__file__), "--torch-child", "--rank", str(rank), "--world", str(world),
               "--port", str(port), "--epochs", str(args.epochs), "--steps", str(args.steps or 0)]
        cmd += ["--data-dir", args.data_dir] if args.data_dir else []
        commands.append(cmd)
    results = run_ranks(name, commands, REPO, args.timeout)
    wall = time.monotonic() - start
    chief = results[0]
    return {"samples_per_s": chief["samples_per_s"], "test_acc": chief["test_acc"], "wall_s": wall,
            "rss_mib": {f"rank{r['rank']}": r["rss_mib"] for r in results}}


def ensure_torch(args):
    """Whether args.python imports torch and numpy, making --venv first where asked."""
    if args.venv:
        python = os.path.join(args.venv, "bin", "python")
        if not os.path.exists(python):
            print(f"# peers: creating {args.venv} with PyTorch (CPU wheel) from PyPI", file=sys.stderr)
            steps = [[sys.executable, "-m", "venv", args.venv],
                     [python, "-m", "pip", "install", "--quiet", "numpy", "torch",
                      "--extra-index-url", "https://download.pytorch.org/whl/cpu"]]
            for step in steps:
                if subprocess.run(step).returncode != 0:
                    print(f"# peers: could not install PyTorch into {args.venv} ({' '.join(step[:4])} failed)",
                          file=sys.stderr)
                    return False
        args.python = python
    reason = torch_problem(args.python)
    if reason is not None:
        print(f"# peers: {args.python} has no PyTorch ({reason}); the torch rows are skipped. Give --python, "
              "set PSTRAIN_TORCH_PYTHON, or --venv DIR to install it", file=sys.stderr)
        return False
    return True


# -------------------------------------------------------------------------------------- table

def summarise(runs):
    return {
        "samples_per_s": statistics.median(r["samples_per_s"] for r in runs),
        "test_acc": runs[0]["test_acc"],
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "rss_mib": {k: max(r["rss_mib"].get(k, 0) for r in runs) for k in runs[0]["rss_mib"]},
        "runs": [round(r["samples_per_s"]) for r in runs],
    }


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=DEFAULT_CONFIGS,
                        help=f"comma-separated rows, of {', '.join(CONFIGS)} (default {DEFAULT_CONFIGS})")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the table gives medians (default 3)")
    parser.add_argument("--epochs", type=int, default=5, help="passes over the training set (default 5)")
    parser.add_argument("--steps", type=int, default=0, help="stop after this many global steps (a smoke run)")
    parser.add_argument("--python", default=os.environ.get("PSTRAIN_TORCH_PYTHON") or "python3",
                        help="the Python with PyTorch (default $PSTRAIN_TORCH_PYTHON, else python3)")
    parser.add_argument("--venv", help="create this virtual environment with PyTorch from PyPI (if absent) and use it")
    parser.add_argument("--build-dir", default=os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(REPO, "build")),
                        help="pstrain's build directory (default $PSTRAIN_BUILD_DIR or build/)")
    parser.add_argument("--data-dir", help="Fashion-MNIST IDX files for PyTorch (default as train_vs_torch.py)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.epochs < 1 or args.steps < 0:
        die("--repeat and --epochs must be positive, --steps not negative")
    try:
        args.configs = config_list(args.configs, CONFIGS)
    except ValueError as e:
        die(str(e))
    return args


def main(argv):
    args = parse_args(argv)
    if args.torch_child:
        torch_child(args)
        return 0
    if missing_binary(args.build_dir):
        die(missing_binary(args.build_dir))
    configs = list(args.configs)
    if any(CONFIGS[c][0] == "torch" for c in configs) and not ensure_torch(args):
        configs = [c for c in configs if CONFIGS[c][0] != "torch"]
    if not configs:
        die("nothing left to run")

    runs = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="pstrain-peers-") as work:
        for round_index in range(args.repeat):
            order = configs[round_index % len(configs):] + configs[:round_index % len(configs)]
            for name in order:
                runner = run_torch if CONFIGS[name][0] == "torch" else run_pstrain
                try:
                    result = runner(args, name, os.path.join(work, str(round_index)))
                except Failed as e:
                    die(str(e), 1)
                runs[name].append(result)
                print(f"# round {round_index + 1}/{args.repeat}: {name} {result['samples_per_s']:.0f} samples/s",
                      file=sys.stderr, flush=True)

    rows = {name: summarise(r) for name, r in runs.items()}
    base = rows.get("torch", {}).get("samples_per_s")
    for row in rows.values():
        row["ratio"] = round(row["samples_per_s"] / base, 3) if base else None
    if args.json:
        print(json.dumps({"epochs": args.epochs, "steps": args.steps, "repeat": args.repeat,
                          "cores": os.cpu_count(), "machine": machine(args.build_dir), "rows": rows}))
        return 0
    print(f"# machine: {machine(args.build_dir)}")
    print(f"# bench/peers: MLP 784-256-128-10, SGD momentum 0.9 lr 0.05, global batch 128, "
          f"{f'{args.steps} steps' if args.steps else f'{args.epochs} epochs'}, 1 thread per process, "
          f"{os.cpu_count()} cores; medians of {args.repeat} alternating rounds; ratio against torch")
    print(f"{'config':<14} {'samples_per_s':>13} {'ratio':>6} {'test_acc':>8} {'wall_s':>7}  rss_mib")
    for name, row in rows.items():
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "-"
        rss = " ".join(f"{k}={v:.0f}" for k, v in sorted(row["rss_mib"].items()))
        print(f"{name:<14} {row['samples_per_s']:>13.0f} {ratio:>6} {row['test_acc']:>8.4f} {row['wall_s']:>7.1f}  {rss}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
