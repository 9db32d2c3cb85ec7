"""pstrain for Python: a Python process as one worker of a pstrain job (docs/python.md).

A worker takes pstrain-worker's flags (the launcher's, the environment's roles: TF_CONFIG, Slurm,
Open MPI), joins the job's parameter servers (or its all-reduce), and from then on exchanges one
flat float32 vector of the model's parameters for one of its gradient sums each step:

    import numpy as np, pstrain
    worker = pstrain.init()                    # sys.argv[1:]: --index, --num-ps, --ps-hosts, --lr ...
    params = np.asarray(initial, np.float32)   # every worker's start; the chief's starts the job
    step = worker.start(params, total_steps)   # params now holds the values of `step`
    while step < total_steps:
        grad = gradient_sums(params, batch)    # sums over the batch's samples, not means
        step = worker.step(step, grad, params, samples=len(batch))["next_step"]
    worker.done()

pstrain.torch (PyTorch): DistributedOptimizer over a model's parameters, EmbeddingBag over the PS
shards' embedding tables.
"""

import sys

from pstrain._core import Error, Rows, UsageError, Worker

__all__ = ["Error", "Rows", "UsageError", "Worker", "init"]


def init(args=None):
    """This process as a worker of the job its flags describe (default: sys.argv[1:])."""
    return Worker(list(sys.argv[1:] if args is None else args))
