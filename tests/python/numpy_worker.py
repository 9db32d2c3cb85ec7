"""A pstrain worker in Python whose model is numpy's: a softmax classifier with one hidden layer
(tanh) on synthetic data, each step's global batch split among the workers by index. The chief
(worker 0) writes the final parameters to OUT (.npy), and each step's loss over every worker's
samples (what Worker.step returns) to OUT.losses.npy. With NUMPY_WORKER_HANG_AT=K the worker
stops before computing step K, writes OUT.hang and waits to be killed (a test's kill -9 at a
known step); with NUMPY_WORKER_PAUSE_AT=K it writes OUT.pause before step K and waits for OUT.go.
A job stopped after a final checkpoint (SIGTERM to the chief) writes no OUT.

    python3 numpy_worker.py OUT -- <pstrain-worker flags>
"""

import os
import sys
import time

import numpy as np

import pstrain

FEATURES, HIDDEN, CLASSES, RECORDS = 20, 16, 4, 4096


def data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((RECORDS, FEATURES)).astype(np.float32)
    w = rng.standard_normal((FEATURES, CLASSES))
    y = np.argmax(x @ w + 0.5 * rng.standard_normal((RECORDS, CLASSES)), axis=1)
    return x, y


def shapes():
    return [(FEATURES, HIDDEN), (HIDDEN,), (HIDDEN, CLASSES), (CLASSES,)]


def unflatten(flat):
    out, at = [], 0
    for shape in shapes():
        n = int(np.prod(shape))
        out.append(flat[at:at + n].reshape(shape))
        at += n
    return out


def gradient_sums(flat, x, y):
    """The sums over the batch of each sample's gradient of its cross-entropy, and the loss sum."""
    w1, b1, w2, b2 = unflatten(flat)
    h = np.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss_sum = float(-np.log(p[np.arange(len(y)), y]).sum())
    dz = p
    dz[np.arange(len(y)), y] -= 1
    dw2 = h.T @ dz
    db2 = dz.sum(axis=0)
    dh = (dz @ w2.T) * (1 - h * h)
    dw1 = x.T @ dh
    db1 = dh.sum(axis=0)
    grad = np.concatenate([g.reshape(-1) for g in (dw1, db1, dw2, db2)]).astype(np.float32)
    correct = int((np.argmax(z, axis=1) == y).sum())
    return grad, loss_sum, correct


def main():
    split = sys.argv.index("--")
    out = sys.argv[1]
    worker = pstrain.init(sys.argv[split + 1:])
    x, y = data(worker.seed)
    rng = np.random.default_rng(worker.seed + 1)
    params = np.concatenate([(0.3 * rng.standard_normal(s)).reshape(-1) for s in shapes()]).astype(np.float32)
    steps = worker.steps
    batch = worker.batch_size
    global_batch = batch * worker.num_workers
    hang_at = int(os.environ.get("NUMPY_WORKER_HANG_AT", "-1"))
    pause_at = int(os.environ.get("NUMPY_WORKER_PAUSE_AT", "-1"))
    step = worker.start(params, steps)
    losses = []  # the job's loss of each step, over all workers' samples
    while step < steps and not worker.stopped:
        if step == hang_at:
            with open(out + ".hang", "w") as f:
                f.write(f"{step}\n")
            while True:
                time.sleep(1)  # until killed
        if step == pause_at:  # until the test says go (a signal to take at a known step)
            with open(out + ".pause", "w") as f:
                f.write(f"{step}\n")
            while not os.path.exists(out + ".go"):
                time.sleep(0.01)  # polling the test's file
        first = (step * global_batch) % (RECORDS - global_batch) + worker.index * batch
        grad, loss_sum, correct = gradient_sums(params, x[first:first + batch], y[first:first + batch])
        figures = worker.step(step, grad, params, batch, loss_sum, correct)
        losses.append(figures["loss"])
        step = figures["next_step"]
    worker.done()
    if worker.index == 0 and not worker.stopped:  # a stopped job's parameters are its checkpoint's
        np.save(out, params)
        np.save(out + ".losses.npy", np.array(losses))


if __name__ == "__main__":
    main()
