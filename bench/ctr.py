#!/usr/bin/env python3
"""The CTR job of configs/ctr.cfg (or --config's: any shipped CTR config, several comma-separated):
pstrain 1 PS + 2 workers (sync) against PyTorch on the same data.

Data: tools/ctr_gen.py, once per run (--train-lines, --test-lines, --distinct-ids, --data-seed),
the same files for every configuration. The rows:

    pstrain    launch/launch.sh --config configs/ctr.cfg (1 PS + 2 workers, sync), the data given
    torch      one process: nn.Embedding(sparse=True) over the IDs hashed as pstrain's shared table
               hashes them (key = mix_id(raw ^ mix_id(field + 1)), mix_id SplitMix64's finaliser,
               docs/sparse.md; an empty field is raw 2^64 - 1), then the config's model, built from its
               `model` line by build_model with pstrain's semantics and initial distributions (dense,
               relu, cross N, dot F D, bottom K(...), parallel(...): docs/models.md); Adam on the
               dense part, and on the table what --embedding-optimizer names (adagrad: Adagrad with
               pstrain's initial accumulator 0.1; adam: SparseAdam; sgd: SGD; ftrl: FTRL-Proximal
               written here on the sparse gradient, rows from zero); the config's lr, batch (global:
               workers x batch-size), epochs; the test set evaluated after every epoch
    torch-ddp  the same in 2 processes (DistributedDataParallel, gloo), each half the global batch

Each configuration runs --repeat times (default 3), alternating (the order rotates every round);
the table gives medians of samples/s (training samples over the training loop's time, the
per-epoch evaluations included, as pstrain's summary counts them), the first round's test AUC and
log loss (after the last epoch), every process's peak RSS, and ratio = samples_per_s / torch's.

--sweep: one epoch of pstrain (and of torch, when it is there) on files of --sweep-lines lines
whose fields have 1e5, 1e6, 1e7, 1e8 distinct IDs (--sweep-sizes): the step time, the peak RSS of
each process and the PS's embedding rows and MiB. A table grows with the IDs the data shows, not
with --distinct-ids: with few lines the rows are bounded by lines x 26.

PyTorch runs in the Python given by --python (default $PSTRAIN_TORCH_PYTHON, else python3), which
needs torch and numpy. Without them the torch rows are not run, the output says so, and ratios
print as "-".

    python3 bench/ctr.py --repeat 3
    python3 bench/ctr.py --sweep
    python3 bench/ctr.py --configs torch,pstrain --repeat 1 \
        --config configs/ctr.cfg,configs/ctr_dlrm.cfg,configs/ctr_dcn.cfg,configs/ctr_deepfm.cfg,configs/ctr_wide_deep.cfg
    python3 bench/ctr.py --steps 20 --repeat 1 --train-lines 5000 --test-lines 1000   # a smoke run
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
CONFIG = os.path.join(REPO, "configs", "ctr.cfg")
CONFIGS = {"pstrain": ("pstrain", 2), "torch": ("torch", 1), "torch-ddp": ("torch", 2)}
MASK64 = (1 << 64) - 1
DENSE, CAT = 13, 26


def die(message, code=2):
    print(f"ctr: {message}", file=sys.stderr)
    sys.exit(code)


def read_config(path):
    """configs/ctr.cfg's key = value lines (the settings both sides use)."""
    values = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "=" in line:
                key, value = (s.strip() for s in line.split("=", 1))
                values[key] = value
    return values


def generate(out_dir, lines, test_lines, distinct, seed):
    cmd = [sys.executable, os.path.join(REPO, "tools", "ctr_gen.py"), "--out-dir", out_dir, "--train-lines",
           str(lines), "--test-lines", str(test_lines), "--distinct-ids", str(distinct), "--seed", str(seed)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Failed(f"ctr_gen.py failed: {proc.stderr[-2000:]}")
    ceiling = re.search(r"ceiling_auc=([0-9.]+)", proc.stdout)
    return float(ceiling.group(1)) if ceiling else None


# ----------------------------------------------------------------------------------- pstrain

def run_pstrain(args, name, work, data, epochs=None):
    run_dir = os.path.join(work, name)
    flags = ["--train-data", os.path.join(data, "train.tsv"), "--test-data", os.path.join(data, "test.tsv"),
             "--cache-dir", os.path.join(work, "cache"), "--log-every", "100000"]
    flags += ["--steps", str(args.steps)] if args.steps else []
    flags += ["--epochs", str(epochs)] if epochs else []
    flags += ["--seed", str(args.seed)] if args.seed is not None else []
    cmd = [os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--progress", "lines", "--run-dir", run_dir,
           "--config", args.config, "--"] + flags
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=REPO,
                              env=dict(os.environ, PSTRAIN_BUILD_DIR=args.build_dir), timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"{name}: did not finish within --timeout {args.timeout:g} s; logs in {run_dir}") from None
    wall = time.monotonic() - start
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise Failed(f"{name}: launch.sh exited with {proc.returncode}; logs in {run_dir}\n{out[-3000:]}")
    summary = re.search(r"summary: .* samples_per_s=(\d+) .* test_auc=([0-9.]+) test_logloss=([0-9.]+)"
                        r" \| step ([0-9.]+) ms", out)
    if not summary:
        raise Failed(f"{name}: no summary line in the chief's output; logs in {run_dir}\n{out[-3000:]}")
    table = re.search(r"embedding rows (\d+) .*?, ([0-9.]+) MiB", out)
    rss = {p: int(kib) / 1024 for p, kib in re.findall(r"^\[(\w+)\] .*peak_rss_kib=(\d+)", out, re.M)}
    # The PS's growth: its peak less what it held when it began serving, before any row.
    start = re.search(r"^\[ps0\] .*peak_rss_kib=(\d+) rss_start_kib=(\d+)", out, re.M)
    growth = (int(start.group(1)) - int(start.group(2))) / 1024 if start else None
    return {"samples_per_s": float(summary.group(1)), "test_auc": float(summary.group(2)),
            "test_logloss": float(summary.group(3)), "step_ms": float(summary.group(4)), "wall_s": wall,
            "rss_mib": rss, "rows": int(table.group(1)) if table else None,
            "table_mib": float(table.group(2)) if table else None, "ps_growth_mib": growth}


# ------------------------------------------------------------------------------------- PyTorch

def mix_id(x):
    """SplitMix64's finaliser of x + 0x9e3779b97f4a7c15 (shared/train/sparse_ids.cc)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def read_tsv(path, salts):
    """Labels, dense features (log1p(max(x, 0)), 0 when empty, as pstrain) and the 26 keys of the
    shared table per record."""
    import math
    labels, dense, keys = [], [], []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            labels.append(int(parts[0]))
            dense.append([math.log1p(max(int(v), 0)) if v else 0.0 for v in parts[1:1 + DENSE]])
            keys.append([mix_id((int(v, 16) if v else MASK64) ^ salts[k]) for k, v in enumerate(parts[1 + DENSE:])])
    return labels, dense, keys


def split_top(text, sep):
    """text split at `sep` outside parentheses (the --model grammar's lists and branches)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [p.strip() for p in parts + [text[start:]] if p.strip()]


def build_model(nn, torch, spec, inputs):
    """The config's `model` (docs/models.md's grammar) as a torch module over `inputs` values, with
    pstrain's semantics and initialisation (worker/model/: every weight matrix He-uniform over its
    fan-in, U(+-sqrt(6 / fan_in)), biases 0): dense, relu, dropout, flatten, softmax (the default
    loss: nothing), `cross N` (DCN-v2: x_{l+1} = x0 * (x_l W_l + b_l) + x_l), `dot F D` (the input,
    then <v_i, v_j> for i < j in the order (0,1), (0,2), ..., of the F vectors of D ending it),
    `bottom K(...)` ([layers(x[:K]), x[K:]]) and `parallel(a | b ...)` (the branches summed).
    Returns (module, output width)."""

    def init(linear):
        with torch.no_grad():
            limit = (6.0 / linear.in_features) ** 0.5
            linear.weight.uniform_(-limit, limit)
            linear.bias.zero_()
        return linear

    class Cross(nn.Module):
        def __init__(self, n, d):
            super().__init__()
            self.layers = nn.ModuleList(init(nn.Linear(d, d)) for _ in range(n))

        def forward(self, x0):
            x = x0
            for layer in self.layers:
                x = x0 * layer(x) + x
            return x

    class Dot(nn.Module):
        def __init__(self, f, d):
            super().__init__()
            self.f, self.d = f, d
            self.i, self.j = torch.triu_indices(f, f, 1)  # row-major: (0,1), (0,2), ..., (1,2), ...

        def forward(self, x):
            v = x[:, x.shape[1] - self.f * self.d:].reshape(-1, self.f, self.d)
            gram = torch.bmm(v, v.transpose(1, 2))
            return torch.cat([x, gram[:, self.i, self.j]], 1)

    class Bottom(nn.Module):
        def __init__(self, k, layers):
            super().__init__()
            self.k, self.layers = k, layers

        def forward(self, x):
            return torch.cat([self.layers(x[:, :self.k]), x[:, self.k:]], 1)

    class Parallel(nn.Module):
        def __init__(self, branches):
            super().__init__()
            self.branches = nn.ModuleList(branches)

        def forward(self, x):
            out = self.branches[0](x)
            for branch in self.branches[1:]:
                out = out + branch(x)
            return out

    def chain(text, width):
        layers = []
        for item in split_top(text, ","):
            name = item.split("(")[0].split()[0].lower()
            args = item.split("(")[0].split()[1:]
            inner = item[item.index("(") + 1:item.rindex(")")] if "(" in item else None
            if name == "dense":
                layers.append(init(nn.Linear(width, int(args[0]))))
                width = int(args[0])
            elif name == "relu":
                layers.append(nn.ReLU())
            elif name == "dropout":
                layers.append(nn.Dropout(float(args[0])))
            elif name in ("flatten", "softmax"):
                continue
            elif name == "cross":
                layers.append(Cross(int(args[0]), width))
            elif name == "dot":
                f, d = int(args[0]), int(args[1])
                layers.append(Dot(f, d))
                width += f * (f - 1) // 2
            elif name == "bottom":
                k = int(args[0])
                sub, sub_width = chain(inner, k)
                layers.append(Bottom(k, sub))
                width = sub_width + width - k
            elif name == "parallel":
                built = [chain(branch, width) for branch in split_top(inner, "|")]
                if len({w for _, w in built}) != 1:
                    raise ValueError(f"{item!r}: branches of different widths")
                layers.append(Parallel([m for m, _ in built]))
                width = built[0][1]
            else:
                raise ValueError(f"layer {name!r} is not one this benchmark builds")
        return nn.Sequential(*layers), width

    return chain(spec, inputs)


def torch_child(args):
    """In the torch Python: one rank of the job; each rank prints a JSON line."""
    import numpy as np
    import torch
    import torch.nn as nn

    sys.path.insert(0, os.path.join(REPO, "tools"))
    from dlrm_torch import SparseFtrl, auc_logloss  # the PS's ftrl formula and the AUC, as the tool's

    cfg = read_config(args.config)
    rank, world = args.rank, args.world
    torch.set_num_threads(1)
    torch.manual_seed(args.seed if args.seed is not None else int(cfg.get("seed", 42)))
    if world > 1:
        import torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    salts = [mix_id(k + 1) for k in range(CAT)]
    y, xd, keys = read_tsv(os.path.join(args.data_dir, "train.tsv"), salts)
    ty, txd, tkeys = read_tsv(os.path.join(args.data_dir, "test.tsv"), salts)
    # A row per key the data shows (pstrain's table also holds only the IDs it was given).
    vocab, index = np.unique(np.array(keys + tkeys, dtype=np.uint64), return_inverse=True)
    index = torch.from_numpy(index.reshape(-1, CAT).astype(np.int64))
    x_ids, t_ids = index[:len(keys)], index[len(keys):]
    x, t = torch.tensor(xd, dtype=torch.float32), torch.tensor(txd, dtype=torch.float32)
    y, ty = torch.tensor(y), torch.tensor(ty)

    dim = int(cfg["embedding-dim"])
    kind = cfg.get("embedding-optimizer", "adagrad")
    lr = float(cfg.get("lr", 0.001))
    table_lr = float(cfg.get("embedding-lr", lr)) or lr
    table = nn.Embedding(len(vocab), dim, sparse=True)
    with torch.no_grad():
        if kind == "ftrl":
            table.weight.zero_()
        else:
            table.weight.uniform_(-1 / dim ** 0.5, 1 / dim ** 0.5)
    mlp, _ = build_model(nn, torch, cfg["model"], DENSE + CAT * dim)

    class Ctr(nn.Module):
        def __init__(self):
            super().__init__()
            self.table, self.mlp = table, mlp

        def forward(self, dense, ids):
            return self.mlp(torch.cat([dense, self.table(ids).flatten(1)], 1))

    model = Ctr()
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    dense_opt = torch.optim.Adam(mlp.parameters(), lr=lr)
    if kind == "adagrad":
        table_opt = torch.optim.Adagrad([table.weight], lr=table_lr, initial_accumulator_value=0.1)
    elif kind == "adam":
        table_opt = torch.optim.SparseAdam([table.weight], lr=table_lr)
    elif kind == "sgd":
        table_opt = torch.optim.SGD([table.weight], lr=table_lr)
    else:
        table_opt = SparseFtrl(table.weight, table_lr)
    loss_fn = nn.CrossEntropyLoss()
    batch = int(cfg.get("batch-size", 64)) * int(cfg.get("num-workers", 1))  # the global batch
    per_rank = batch // world
    steps_per_epoch = x.shape[0] // batch
    total = args.steps or steps_per_epoch * (args.epochs or int(cfg.get("epochs", 1)))

    def evaluate():
        model.eval()
        with torch.no_grad():
            p = torch.cat([torch.softmax(model(t[i:i + 4096], t_ids[i:i + 4096]), 1)[:, 1]
                           for i in range(0, t.shape[0], 4096)]).double().numpy()
        model.train()
        return auc_logloss(p, ty.numpy())

    # The same permutation on every rank; --seed moves it as it moves pstrain's.
    generator = torch.Generator().manual_seed(args.seed if args.seed is not None else 42)
    auc, logloss = float("nan"), float("nan")
    start = time.perf_counter()
    for step in range(total):
        k = step % steps_per_epoch
        if k == 0:
            perm = torch.randperm(x.shape[0], generator=generator)
        rows = perm[k * batch + rank * per_rank:k * batch + (rank + 1) * per_rank]
        dense_opt.zero_grad(set_to_none=True)
        table_opt.zero_grad(set_to_none=True)
        # DDP averages over ranks: the loss is the mean over the global batch either way.
        loss_fn(model(x[rows], x_ids[rows]), y[rows]).backward()
        dense_opt.step()
        table_opt.step()
        if rank == 0 and (k + 1 == steps_per_epoch or step + 1 == total):
            auc, logloss = evaluate()
    seconds = time.perf_counter() - start
    print(json.dumps({"rank": rank, "samples_per_s": total * batch / seconds, "test_auc": auc,
                      "test_logloss": logloss, "step_ms": 1000 * seconds / total, "rows": len(vocab),
                      "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_torch(args, name, _work, data, epochs=None):
    _, world = CONFIGS[name]
    port = free_port()
    start = time.monotonic()
    commands = []
    for rank in range(world):
        cmd = [args.python, os.path.abspath(__file__), "--torch-child", "--config", args.config, "--rank", str(rank),
               "--world", str(world),
               "--port", str(port), "--data-dir", data, "--steps", str(args.steps or 0), "--epochs", str(epochs or 0)]
        cmd += ["--seed", str(args.seed)] if args.seed is not None else []
        commands.append(cmd)
    results = run_ranks(name, commands, REPO, args.timeout)
    chief = results[0]
    return {"samples_per_s": chief["samples_per_s"], "test_auc": chief["test_auc"],
            "test_logloss": chief["test_logloss"], "step_ms": chief["step_ms"], "wall_s": time.monotonic() - start,
            "rss_mib": {f"rank{r['rank']}": r["rss_mib"] for r in results}, "rows": chief["rows"], "table_mib": None,
            "ps_growth_mib": None}


def has_torch(args):
    reason = torch_problem(args.python)
    if reason is None:
        return True
    print(f"# ctr: PyTorch rows NOT RUN: {args.python} has no PyTorch/numpy ({reason}); give --python or set "
          "PSTRAIN_TORCH_PYTHON", flush=True)
    return False


# -------------------------------------------------------------------------------------- modes

def rss_text(rss):
    return " ".join(f"{k}={v:.0f}" for k, v in sorted(rss.items()))


def compare(args, configs, work, data, ceiling):
    runs = {c: [] for c in configs}
    for round_index in range(args.repeat):
        order = configs[round_index % len(configs):] + configs[:round_index % len(configs)]
        for name in order:
            runner = run_torch if CONFIGS[name][0] == "torch" else run_pstrain
            result = runner(args, name, os.path.join(work, f"{os.path.basename(args.config)}-{round_index}"), data)
            runs[name].append(result)
            print(f"# round {round_index + 1}/{args.repeat}: {name} {result['samples_per_s']:.0f} samples/s",
                  file=sys.stderr, flush=True)
    rows = {}
    for name, r in runs.items():
        rows[name] = {"samples_per_s": statistics.median(x["samples_per_s"] for x in r),
                      "test_auc": r[0]["test_auc"], "test_logloss": r[0]["test_logloss"],
                      "rss_mib": {k: max(x["rss_mib"].get(k, 0) for x in r) for k in r[0]["rss_mib"]},
                      "runs": [round(x["samples_per_s"]) for x in r]}
    base = rows.get("torch", {}).get("samples_per_s")
    for row in rows.values():
        row["ratio"] = round(row["samples_per_s"] / base, 3) if base else None
    cfg = read_config(args.config)
    if args.json:
        print(json.dumps({"mode": "compare", "config": os.path.relpath(args.config, REPO), "ceiling_auc": ceiling,
                          "repeat": args.repeat, "machine": machine(args.build_dir), "rows": rows}))
        return rows
    print(f"# machine: {machine(args.build_dir)}")
    print(f"# bench/ctr: {os.path.relpath(args.config, REPO)} (dim {cfg.get('embedding-dim')}, {cfg.get('embedding-optimizer')} "
          f"lr {cfg.get('embedding-lr')}, model '{cfg.get('model')}', global batch "
          f"{int(cfg.get('batch-size', 0)) * int(cfg.get('num-workers', 1))}, "
          f"{f'{args.steps} steps' if args.steps else str(cfg.get('epochs')) + ' epochs'}) on ctr_gen data "
          f"{args.train_lines}+{args.test_lines} lines, ceiling_auc={ceiling}; {os.cpu_count()} cores; "
          f"medians of {args.repeat} alternating rounds; ratio against torch")
    print(f"{'config':<10} {'samples_per_s':>13} {'ratio':>6} {'test_auc':>8} {'logloss':>7}  rss_mib")
    for name, row in rows.items():
        ratio = f"{row['ratio']:.3f}" if row["ratio"] is not None else "-"
        print(f"{name:<10} {row['samples_per_s']:>13.0f} {ratio:>6} {row['test_auc']:>8.4f} "
              f"{row['test_logloss']:>7.4f}  {rss_text(row['rss_mib'])}")
    sys.stdout.flush()
    return rows


def summary(args, results):
    """One line per config: pstrain's test AUC and log loss against torch's (issue 47's acceptance:
    pstrain's AUC at least torch's on the same data and epochs)."""
    print(f"# summary: {args.train_lines}+{args.test_lines} lines, data seed {args.data_seed}; auc_diff = "
          f"pstrain - torch (first round each)")
    print(f"{'config':<22} {'pstrain_auc':>11} {'torch_auc':>9} {'auc_diff':>8} {'pstrain_ll':>10} {'torch_ll':>8} "
          f"{'pstrain_sps':>11} {'torch_sps':>9}")
    for path, rows in results:
        p, t = rows.get("pstrain"), rows.get("torch")
        cell = lambda row, key, fmt: format(row[key], fmt) if row else "-"  # noqa: E731
        diff = f"{p['test_auc'] - t['test_auc']:+.4f}" if p and t else "-"
        print(f"{os.path.basename(path):<22} {cell(p, 'test_auc', '.4f'):>11} {cell(t, 'test_auc', '.4f'):>9} "
              f"{diff:>8} {cell(p, 'test_logloss', '.4f'):>10} {cell(t, 'test_logloss', '.4f'):>8} "
              f"{cell(p, 'samples_per_s', '.0f'):>11} {cell(t, 'samples_per_s', '.0f'):>9}")


def sweep(args, configs, work):
    rows = []
    for size in args.sweep_sizes:
        data = os.path.join(work, f"data-{size}")
        generate(data, args.sweep_lines, max(args.sweep_lines // 10, 100), size, args.data_seed)
        for name in configs:
            runner = run_torch if CONFIGS[name][0] == "torch" else run_pstrain
            r = runner(args, name, os.path.join(work, f"sweep-{size}"), data, epochs=1)
            rows.append(dict(r, config=name, distinct_ids=size))
            print(f"# sweep {size}: {name} {r['step_ms']:.2f} ms/step", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"mode": "sweep", "lines": args.sweep_lines, "rows": rows}))
        return
    print(f"# bench/ctr --sweep: {os.path.relpath(args.config, REPO)}, 1 epoch of {args.sweep_lines} lines per size; rows: the IDs the "
          f"data showed; table_mib: the PS's tables as it counts them; ps_growth_mib: its peak RSS less its RSS "
          f"before the first row")
    print(f"{'distinct_ids':>12} {'config':<10} {'step_ms':>8} {'rows':>9} {'table_mib':>9} {'ps_growth_mib':>13}  "
          f"rss_mib")
    for r in rows:
        mib = f"{r['table_mib']:.1f}" if r["table_mib"] is not None else "-"
        growth = f"{r['ps_growth_mib']:.1f}" if r.get("ps_growth_mib") is not None else "-"
        print(f"{r['distinct_ids']:>12} {r['config']:<10} {r['step_ms']:>8.2f} {r['rows'] or 0:>9} {mib:>9} "
              f"{growth:>13}  {rss_text(r['rss_mib'])}")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", default="torch,torch-ddp,pstrain",
                   help="comma-separated rows, of pstrain, torch, torch-ddp (default all)")
    p.add_argument("--config", default=CONFIG,
                   help="the job's config, or several comma-separated (configs/ctr_dlrm.cfg, ctr_dcn.cfg, ctr_deepfm.cfg, "
                        "ctr_wide_deep.cfg: the model built in PyTorch from its `model` line; default configs/ctr.cfg)")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the table gives medians (default 3)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many global steps (a smoke run)")
    p.add_argument("--train-lines", type=int, default=100000, help="training records (default 100000)")
    p.add_argument("--test-lines", type=int, default=20000, help="test records (default 20000)")
    p.add_argument("--distinct-ids", type=int, default=100000, help="ctr_gen.py's --distinct-ids (default 100000)")
    p.add_argument("--data-seed", type=int, default=1, help="ctr_gen.py's --seed (default 1)")
    p.add_argument("--seed", type=int, help="the model's seed on both sides instead of the config's: the initial values and "
                   "the data order (another draw of each, to tell noise from a difference)")
    p.add_argument("--sweep", action="store_true", help="step time and memory against the table's size instead")
    p.add_argument("--sweep-sizes", default="100000,1000000,10000000,100000000",
                   help="--distinct-ids values of the sweep (default 1e5,1e6,1e7,1e8)")
    p.add_argument("--sweep-lines", type=int, default=20000, help="training records per sweep size (default 20000)")
    p.add_argument("--python", default=os.environ.get("PSTRAIN_TORCH_PYTHON") or "python3",
                   help="the Python with PyTorch (default $PSTRAIN_TORCH_PYTHON, else python3)")
    p.add_argument("--build-dir", default=os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(REPO, "build")),
                   help="pstrain's build directory (default $PSTRAIN_BUILD_DIR or build/)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    p.add_argument("--torch-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=0, help=argparse.SUPPRESS)  # the sweep's 1 epoch
    args = p.parse_args(argv)
    if args.repeat < 1 or args.steps < 0 or args.train_lines < 1 or args.test_lines < 1 or args.sweep_lines < 1:
        die("--repeat, --train-lines, --test-lines and --sweep-lines must be positive, --steps not negative")
    try:
        args.configs = config_list(args.configs, CONFIGS)
    except ValueError as e:
        die(str(e))
    args.configs_paths = [os.path.abspath(c) for c in args.config.split(",") if c]
    for path in args.configs_paths:
        if not os.path.isfile(path):
            die(f"--config: no file {path}")
    args.config = args.configs_paths[0]
    try:
        args.sweep_sizes = [int(float(s)) for s in args.sweep_sizes.split(",")]
    except ValueError:
        die("--sweep-sizes: comma-separated numbers, e.g. 1e5,1e6")
    return args


def main(argv):
    args = parse_args(argv)
    if args.torch_child:
        torch_child(args)
        return 0
    if missing_binary(args.build_dir):
        die(missing_binary(args.build_dir))
    configs = list(args.configs)
    if any(CONFIGS[c][0] == "torch" for c in configs) and not has_torch(args):
        configs = [c for c in configs if CONFIGS[c][0] != "torch"]
    if not configs:
        die("nothing left to run")
    with tempfile.TemporaryDirectory(prefix="pstrain-ctr-") as work:
        try:
            if args.sweep:
                sweep(args, configs, work)
            else:
                data = os.path.join(work, "data")
                ceiling = generate(data, args.train_lines, args.test_lines, args.distinct_ids, args.data_seed)
                results = []
                for path in args.configs_paths:
                    args.config = path
                    results.append((path, compare(args, configs, work, data, ceiling)))
                if len(results) > 1 and not args.json:
                    summary(args, results)
        except Failed as e:
            die(str(e), 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
