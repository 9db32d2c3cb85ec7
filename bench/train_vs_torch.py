#!/usr/bin/env python3
"""bench/train_vs_torch.py: pstrain's training throughput on one device against PyTorch's, in one run.

Both train the same model on Fashion-MNIST with Adam lr 1e-3 and batch 128 for the same number of
steps: `--model mlp` (the default job's MLP 784-256-128-10) or `--model cnn` (configs/fashion_cnn.cfg's
CNN: conv 32 3x3 pad 1, ReLU, max-pool 2, conv 64 3x3 pad 1, ReLU, max-pool 2, dense 128, ReLU,
dropout 0.25, dense 10) or `--model resnet` (configs/fashion_resnet.cfg's ResNet: 3 stages of 2
residual blocks with batch norm), and evaluate the whole test set at the
end of every epoch and after the last step (what pstrain's trainer does; both inside the timing):

* pstrain: one `pstrain-worker --mode allreduce --num-workers 1` (no PS; the worker applies the
  optimizer itself, the one-process baseline of every mode), on --device;
* PyTorch: the same model in eager mode, the training set resident on the device, a fresh random
  permutation every epoch, torch.optim.Adam; a few warm-up steps are run first and not timed
  (kinder to PyTorch than to pstrain, whose timing starts at its first step).

It runs the two programs alternately --repeat times (default 3) and prints one row per program
with its median samples/s and `ratio = pstrain_samples_per_s / torch_samples_per_s` of the
medians (> 1: pstrain is faster); a slow spell of a noisy machine then hits one run, not the
ratio. Compare ratios, not absolute figures across runs.

    python3 bench/train_vs_torch.py                      # --device cuda (a GPU), 3000 steps
    python3 bench/train_vs_torch.py --device cpu --threads 2
    python3 bench/train_vs_torch.py --device cpu --model cnn       # 300 steps unless --steps
    python3 bench/train_vs_torch.py --model resnet                 # configs/fashion_resnet.cfg's model
    python3 bench/train_vs_torch.py --json

Needs PyTorch and numpy (the GPU machine has them; `pip install torch numpy` elsewhere) and a
built pstrain (build/pstrain-worker, or --worker PATH).
"""
import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ranks import machine  # noqa: E402
HIDDEN = (256, 128)
CNN = ("conv 32 3 pad=1, relu, maxpool 2, conv 64 3 pad=1, relu, maxpool 2, flatten, dense 128, relu, dropout 0.25, "
       "dense 10")
# configs/fashion_resnet.cfg's ResNet: a stem, then 3 stages of 2 basic blocks (16, 32, 64 channels;
# the first block of stages 2 and 3 halves the image with stride 2, its shortcut a 1x1 conv),
# global average pooling, dense 10.
RESNET_STAGES = ((16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1))  # (channels, stride) of each block


def resnet_spec():
    blocks = [f"residual(conv {c} 3 stride={s} pad=1, batchnorm, relu, conv {c} 3 pad=1, batchnorm), relu"
              for c, s in RESNET_STAGES]
    return ", ".join(["conv 16 3 pad=1, batchnorm, relu"] + blocks + ["globalavgpool, dense 10"])


def die(message):
    print(f"train_vs_torch: {message}", file=sys.stderr)
    sys.exit(2)


def data_dir(arg):
    return arg or os.environ.get("FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"


def read_idx(directory, name):
    """An IDX file of the data directory, gzip or not, as a numpy array."""
    import numpy as np
    for path, opener in ((os.path.join(directory, name), open), (os.path.join(directory, name + ".gz"), gzip.open)):
        if os.path.exists(path):
            with opener(path, "rb") as f:
                raw = f.read()
            dims = raw[3]
            shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    die(f"no {name}[.gz] in {directory} (--data-dir, or FASHION_MNIST_DIR)")


def run_pstrain(args):
    cmd = [args.worker, "--mode", "allreduce", "--num-workers", "1", "--device", args.device,
           "--data-dir", data_dir(args.data_dir), "--batch-size", str(args.batch), "--steps", str(args.steps),
           "--epochs", "1000", "--optimizer", "adam", "--lr", "1e-3",
           "--threads", str(args.threads), "--log-every", str(max(args.steps, 1))]
    if args.model == "cnn":
        cmd += ["--model", CNN]
    elif args.model == "resnet":
        cmd += ["--model", resnet_spec()]
    else:
        cmd += ["--hidden", ",".join(map(str, HIDDEN))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        die(f"pstrain-worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    match = re.search(r"summary: .* samples_per_s=(\d+) .* test_accuracy=([0-9.]+)", proc.stderr + proc.stdout)
    if not match:
        die(f"no summary line in pstrain-worker's output:\n{proc.stderr[-4000:]}")
    return float(match.group(1)), float(match.group(2))


def resnet(nn):
    """The PyTorch twin of resnet_spec(): BatchNorm2d with PyTorch's defaults (pstrain's batchnorm)."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                                      nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout))
            self.shortcut = nn.Identity() if cin == cout and stride == 1 else nn.Conv2d(cin, cout, 1, stride=stride)

        def forward(self, x):
            return (self.body(x) + self.shortcut(x)).relu()

    layers = [nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()]
    channels = 16
    for c, s in RESNET_STAGES:
        layers.append(Block(channels, c, s))
        channels = c
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10)]
    return nn.Sequential(*layers)


def run_torch(args):
    import numpy as np
    import torch
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        die("PyTorch sees no CUDA device")
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    directory = data_dir(args.data_dir)
    shape = (-1, 784) if args.model == "mlp" else (-1, 1, 28, 28)
    x = torch.from_numpy(read_idx(directory, "train-images-idx3-ubyte").reshape(shape).astype(np.float32) / 255.0).to(device)
    y = torch.from_numpy(read_idx(directory, "train-labels-idx1-ubyte").astype(np.int64)).to(device)
    tx = torch.from_numpy(read_idx(directory, "t10k-images-idx3-ubyte").reshape(shape).astype(np.float32) / 255.0).to(device)
    ty = torch.from_numpy(read_idx(directory, "t10k-labels-idx1-ubyte").astype(np.int64)).to(device)
    nn = torch.nn
    if args.model == "resnet":
        layers = [resnet(nn)]
    elif args.model == "cnn":
        layers = [nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                  nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
                  nn.Linear(128, 10)]
    else:
        widths = (784,) + HIDDEN + (10,)
        layers = []
        for i in range(len(widths) - 1):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i + 2 < len(widths):
                layers.append(nn.ReLU())
    model = nn.Sequential(*layers).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps_per_epoch = x.shape[0] // args.batch

    def evaluate():
        model.eval()  # dropout off, as pstrain evaluates
        with torch.no_grad():
            correct = sum(int((model(tx[i:i + 500]).argmax(1) == ty[i:i + 500]).sum()) for i in range(0, tx.shape[0], 500))
        model.train()
        return correct

    def train(steps, evaluating):
        perm = torch.randperm(x.shape[0], device=device)
        correct = 0
        for step in range(steps):
            k = step % steps_per_epoch
            if k == 0 and step > 0:
                perm = torch.randperm(x.shape[0], device=device)
            index = perm[k * args.batch:(k + 1) * args.batch]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
            if evaluating and (k + 1 == steps_per_epoch or step + 1 == steps):
                correct = evaluate()
        return correct

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    train(20, evaluating=False)  # warm-up: kernels, cuBLAS handles, the allocator
    evaluate()
    sync()
    start = time.perf_counter()
    correct = train(args.steps, evaluating=True)
    sync()
    seconds = time.perf_counter() - start
    return args.steps * args.batch / seconds, correct / tx.shape[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda | cuda:K | cpu, for both programs (default cuda)")
    parser.add_argument("--model", choices=("mlp", "cnn", "resnet"), default="mlp",
                        help="mlp: the default job's MLP; cnn: configs/fashion_cnn.cfg's CNN; resnet: "
                             "configs/fashion_resnet.cfg's ResNet (default mlp)")
    parser.add_argument("--steps", type=int,
                        help="training steps of each program (default 3000; 300 with --model cnn or resnet)")
    parser.add_argument("--batch", type=int, default=128, help="batch size (default 128, the default job's global batch)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads: pstrain --threads and torch.set_num_threads (default 1)")
    parser.add_argument("--data-dir", help="Fashion-MNIST IDX files (default $FASHION_MNIST_DIR or Debian's)")
    parser.add_argument("--worker", default=os.path.join(os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(REPO, "build")),
                                                         "pstrain-worker"), help="pstrain-worker binary")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each program, alternating; the rows give medians (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text rows")
    args = parser.parse_args()
    if args.steps is None:
        args.steps = 3000 if args.model == "mlp" else 300
    if args.steps < 1 or args.batch < 1 or args.threads < 1 or args.repeat < 1:
        die("--steps, --batch, --threads and --repeat must be positive")
    if not os.access(args.worker, os.X_OK):
        die(f"{args.worker} is not an executable (build pstrain, or give --worker)")
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        die(f"{e}: this benchmark needs PyTorch and numpy")

    runs = {"pstrain": [], "torch": []}
    for k in range(args.repeat):
        for name, run in (("pstrain", run_pstrain), ("torch", run_torch)):
            runs[name].append(run(args))
            if args.repeat > 1:
                print(f"# run {k + 1}/{args.repeat}: {name} {runs[name][-1][0]:.0f} samples/s", file=sys.stderr)
    # Accuracy: the first run's (every run of a program trains the same steps from the same seed).
    ours, ours_acc = statistics.median(r[0] for r in runs["pstrain"]), runs["pstrain"][0][1]
    theirs, theirs_acc = statistics.median(r[0] for r in runs["torch"]), runs["torch"][0][1]
    ratio = ours / theirs
    if args.json:
        print(json.dumps({"model": args.model, "device": args.device, "steps": args.steps, "batch": args.batch, "threads": args.threads,
                          "repeat": args.repeat,
                          "pstrain_samples_per_s": round(ours), "torch_samples_per_s": round(theirs),
                          "pstrain_test_accuracy": ours_acc, "torch_test_accuracy": theirs_acc,
                          "ratio": round(ratio, 3), "machine": machine(os.path.dirname(args.worker))}))
    else:
        what = {"cnn": "CNN of configs/fashion_cnn.cfg", "resnet": "ResNet of configs/fashion_resnet.cfg",
                "mlp": "MLP 784-256-128-10"}[args.model]
        print(f"# machine: {machine(os.path.dirname(args.worker))}")
        print(f"# bench/train_vs_torch: {what}, Adam, batch {args.batch}, {args.steps} steps + a test "
              f"evaluation per epoch and at the end, --device {args.device}, {args.threads} thread(s), "
              f"medians of {args.repeat} alternating runs")
        print(f"program=pstrain samples_per_s={ours:.0f} test_accuracy={ours_acc:.4f}")
        print(f"program=torch samples_per_s={theirs:.0f} test_accuracy={theirs_acc:.4f}")
        print(f"ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
