"""What the bench programs that compare with PyTorch (peers.py, ctr.py) share: their --configs
list and checks of what they need (pstrain's binaries, a Python with PyTorch), and the PyTorch
side: run each rank of a configuration as a child process of the program itself
(`--torch-child`), and collect the JSON line each prints last."""

import json
import os
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


def config_list(text, known):
    """The rows of --configs' comma-separated `text`; raises ValueError naming any not in `known`."""
    configs = [c for c in text.split(",") if c]
    unknown = [c for c in configs if c not in known]
    if unknown or not configs:
        raise ValueError(f"unknown configuration(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(known)}")
    return configs


def missing_binary(build_dir):
    """What is missing of pstrain's binaries in `build_dir`, as a message; None when nothing is."""
    for binary in ("pstrain-ps", "pstrain-worker"):
        if not os.access(os.path.join(build_dir, binary), os.X_OK):
            return f"no {binary} in {build_dir} (build pstrain, or give --build-dir)"
    return None


def machine(build_dir):
    """This machine's CPU and what pstrain's arithmetic runs on there, as one line to print beside
    the figures (speed depends on both: docs/models.md, "CPU kernels")."""
    model, family, number = "unknown CPU", "?", "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and model == "unknown CPU":
                    model = value
                elif key == "cpu family" and family == "?":
                    family = value
                elif key == "model" and number == "?":
                    number = value
    except OSError:
        pass
    kernels = []
    for binary in ("pstrain-worker", "pstrain-ps"):
        probe = subprocess.run([os.path.join(build_dir, binary), "--kernels"], capture_output=True, text=True)
        kernels.append(probe.stdout.strip() if probe.returncode == 0 else f"{binary} --kernels failed")
    return f"{model} (family {family} model {number}), {os.cpu_count()} CPUs; {'; '.join(kernels)}"


def torch_problem(python):
    """Why `python` cannot run the PyTorch rows (it does not import torch and numpy); None if it can."""
    probe = subprocess.run([python, "-c", "import torch, numpy"], capture_output=True, text=True)
    if probe.returncode == 0:
        return None
    return (probe.stderr.strip().splitlines() or ["cannot run it"])[-1]
