"""A PyTorch model's parameters on pstrain's parameter servers (docs/python.md).

    import torch, pstrain, pstrain.torch
    worker = pstrain.init()
    model = Net()
    opt = pstrain.torch.DistributedOptimizer(model.parameters(), worker, total_steps)
    while not opt.finished:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y, reduction="sum")   # sums: the PS divides by all samples
        loss.backward()
        opt.step(samples=len(y), loss_sum=loss.item())
    worker.done()

The optimizer is the PS's (--optimizer, --lr, its schedule, --clip-norm), applied to the sum of
every worker's gradient sums divided by their samples: in sync mode N workers equal one process
on the concatenated batch. The parameters are float32 on the CPU.

EmbeddingBag's rows live in the PS shards' embedding tables (the job's --embedding-dim,
--embedding-optimizer, admission and expiry, docs/sparse.md): forward pulls the batch's rows,
backward pushes their gradients; EmbeddingBag.prefetch asks for the next step's rows as soon as
this step's are pushed.
"""

import numpy as np
import torch

from pstrain import _core

__all__ = ["DistributedOptimizer", "EmbeddingBag"]


class DistributedOptimizer:
    """Keeps `params` on the job's PS shards (or all-reduces them: --mode allreduce).

    `params`: a torch.nn.Module, its named_parameters(), or plain parameters. Checkpoints name
    each variable by its state_dict name (pstrain-export writes them so: docs/python.md); plain
    parameters are "param0", "param1", ..."""

    def __init__(self, params, worker, total_steps, steps_per_epoch=0):
        if isinstance(params, torch.nn.Module):
            params = params.named_parameters()
        items = list(params)
        if items and isinstance(items[0], tuple):
            self.names = [str(name) for name, _ in items]
            self.params = [p for _, p in items]
        else:
            self.names = [f"param{i}" for i in range(len(items))]
            self.params = items
        if not self.params:
            raise ValueError("DistributedOptimizer: no parameters")
        for p in self.params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError("DistributedOptimizer: parameters must be float32 on the CPU, not "
                                 f"{p.dtype} on {p.device}")
        self.worker = worker
        self.total_steps = int(total_steps)
        self.values = np.concatenate([p.detach().reshape(-1).numpy() for p in self.params]).astype(np.float32)
        self.grad = np.zeros_like(self.values)
        variables = [(name, list(p.shape)) for name, p in zip(self.names, self.params)]
        self.step_index = worker.start(self.values, self.total_steps, int(steps_per_epoch), variables)
        self.metrics = {}
        self._load()

    @property
    def finished(self):
        """The job's last step is done, or the job stopped after a final checkpoint (SIGTERM to
        the chief: launch.sh stop, Ctrl-C; resume it with --resume)."""
        return self.step_index >= self.total_steps or self.worker.stopped

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self, samples, loss_sum=0.0, correct=0):
        """Pushes the gradient sums of this step's `samples` samples; loads the next parameters.
        Returns the step's figures over all workers (loss, accuracy, samples, next_step)."""
        at = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self.grad[at:at + n] = 0
            else:
                self.grad[at:at + n] = p.grad.detach().reshape(-1).numpy()
            at += n
        self.metrics = self.worker.step(self.step_index, self.grad, self.values, int(samples), float(loss_sum),
                                        int(correct))
        self.step_index = self.metrics["next_step"]
        self._load()
        return self.metrics

    def _load(self):
        at = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                p.copy_(torch.from_numpy(self.values[at:at + n]).view_as(p))
                at += n


class _PulledRows(torch.autograd.Function):
    """The pooled rows of a batch's IDs as a tensor; backward pushes their gradient to the PS."""

    @staticmethod
    def forward(ctx, anchor, rows, ids, counts, n):
        out = np.empty(n * rows.width, np.float32)
        rows.pull(ids, n, counts, out)
        out = out.reshape(n, rows.width)
        ctx.rows, ctx.n = rows, n
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, grad):
        ctx.rows.push(np.ascontiguousarray(grad.detach().numpy(), dtype=np.float32).reshape(-1), ctx.n)
        return None, None, None, None, None


class EmbeddingBag(torch.nn.Module):
    """`fields` categorical fields, each one row of the job's --embedding-dim floats per ID from the
    PS shards' tables, a field of several IDs pooled by `mode` ("sum" or "mean").
    forward(ids) with ids [n, fields] (int64, any 64-bit values: hashed strings too), or
    forward(ids, counts) with counts [n, fields] (each >= 1) and ids the flat IDs of each record's
    fields in turn, returns [n, fields * dim]. With per_field_tables each field has a table of
    its own; otherwise one table keyed by (field, ID). backward pushes one summed gradient per
    unique ID, over n samples, for the worker's current step: call it once per step."""

    def __init__(self, worker, fields, per_field_tables=False, mode="sum"):
        super().__init__()
        self.rows = _core.Rows(worker, int(fields), bool(per_field_tables), str(mode))
        self.fields, self.dim = int(fields), worker.embedding_dim
        # backward runs only for an input that needs a gradient: this one, never a parameter.
        self._anchor = torch.zeros((), requires_grad=True)

    def forward(self, ids, counts=None):
        flat, counts, n = _batch(ids, counts)
        return _PulledRows.apply(self._anchor, self.rows, flat, counts, n)

    def prefetch(self, ids, counts=None):
        """The IDs (as forward's) the next step's forward will take. Their rows are asked for
        right after this step's backward pushes its rows, at the next step's version: they travel
        while DistributedOptimizer.step completes, and are the rows a pull at the next step would
        get (sync: the shards answer once this step is applied), so the results do not change.
        Call it before this step's backward; a forward of other IDs drops them."""
        flat, counts, n = _batch(ids, counts)
        self.rows.prefetch(flat, n, counts)


def _batch(ids, counts):
    """(flat uint64 IDs, flat uint32 counts or None, records) of forward's arguments, without a
    copy where they already are contiguous 64-bit and 32-bit integers."""
    ids = ids.detach().cpu().numpy() if torch.is_tensor(ids) else np.asarray(ids)
    n = len(ids) if counts is None else len(counts)
    flat = np.ascontiguousarray(ids.reshape(-1)).view(np.uint64) if ids.dtype.itemsize == 8 else \
        np.ascontiguousarray(ids.reshape(-1), dtype=np.uint64)
    if counts is not None:
        counts = counts.detach().cpu().numpy() if torch.is_tensor(counts) else np.asarray(counts)
        counts = np.ascontiguousarray(counts.reshape(-1), dtype=np.uint32)
    return flat, counts, n
