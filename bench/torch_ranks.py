"""The PyTorch side of the bench programs that compare with it (peers.py, ctr.py): run each rank
of a configuration as a child process of the program itself (`--torch-child`), and collect the
JSON line each prints last."""

import json
import socket
import subprocess


class Failed(Exception):
    """A run that did not give its figures; the message says why."""


def free_port():
    """A TCP port of 127.0.0.1 that was free a moment ago (for torch.distributed's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(name, commands, cwd, timeout):
    """Starts one process per command (rank order), waits up to `timeout` seconds for each, and
    returns the JSON object of each one's last stdout line. Raises Failed naming the rank that
    exited non-zero (with the end of its stderr) or the timeout; every process is gone after."""
    procs = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=cwd) for cmd in commands]
    results = []
    try:
        for rank, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise Failed(f"{name}: rank {rank} exited with {p.returncode}\n{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    except subprocess.TimeoutExpired:
        raise Failed(f"{name}: did not finish within --timeout {timeout:g} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results
