"""A PyTorch model as a pstrain worker (pstrain.torch.DistributedOptimizer): an MLP on
Fashion-MNIST's first records, each step's global batch split among the workers by index. The
chief (worker 0) writes the final parameters to OUT (.npy, flat in the model's order).

    python3 torch_worker.py OUT -- <pstrain-worker flags>

The reference (one PyTorch process, torch.optim on the whole batch) is in test_torch_worker.py;
both take the model and the data from here.
"""

import gzip
import os
import sys

import numpy as np
import torch
from torch import nn

FASHION = os.environ.get("PSTRAIN_FASHION_DIR", "/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist


def fashion(records):
    """The first `records` training images (float32 in [0, 1], flattened) and labels."""
    with gzip.open(os.path.join(FASHION, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16)[:records * 784]
    with gzip.open(os.path.join(FASHION, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:records]
    return torch.from_numpy(images.reshape(records, 784).astype(np.float32) / 255), torch.from_numpy(labels.astype(np.int64))


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def flat(net):
    return np.concatenate([p.detach().reshape(-1).numpy() for p in net.parameters()])


def main():
    import pstrain
    import pstrain.torch

    split = sys.argv.index("--")
    out = sys.argv[1]
    worker = pstrain.init(sys.argv[split + 1:])
    steps, batch = worker.steps, worker.batch_size
    global_batch = batch * worker.num_workers
    x, y = fashion(steps * global_batch)
    net = model(worker.seed)
    opt = pstrain.torch.DistributedOptimizer(net, worker, steps)  # checkpoints name the state_dict's variables
    while not opt.finished:
        first = opt.step_index * global_batch + worker.index * batch
        opt.zero_grad()
        logits = net(x[first:first + batch])
        loss = nn.functional.cross_entropy(logits, y[first:first + batch], reduction="sum")
        loss.backward()
        correct = int((logits.argmax(1) == y[first:first + batch]).sum())
        opt.step(samples=batch, loss_sum=loss.item(), correct=correct)
    worker.done()
    if worker.index == 0:
        np.save(out, flat(net))


if __name__ == "__main__":
    main()
