"""Real pstrain jobs whose workers are Python processes (tests/python/*_worker.py): pstrain-ps
shards and the workers on loopback, in a temporary directory; their logs and results."""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
PACKAGE = os.path.join(BUILD, "python")
PS_BIN = os.path.join(BUILD, "pstrain-ps")


def skip_without_package(test):
    """Exit 77 (ctest: skipped), saying why, where the package was not built."""
    if not os.path.isdir(os.path.join(PACKAGE, "pstrain")):
        print(f"{test}: skipped: no Python package in {PACKAGE} (needs pybind11-dev and python3-dev)")
        sys.exit(77)


class Job:
    """PS shards and Python workers of one job in a temporary directory."""

    def __init__(self, script, num_ps, num_workers, batch, steps, flags=()):
        self.script = script
        self.dir = tempfile.mkdtemp(prefix="pstrain-pyjob-")
        self.num_ps, self.num_workers = num_ps, num_workers
        self.flags = ["--num-ps", str(num_ps), "--num-workers", str(num_workers), "--steps", str(steps), "--batch-size", str(batch), "--seed", "5",
                      "--timeout", "30", *flags]
        self.servers = []
        self.workers = {}
        self.files = []
        self.out = os.path.join(self.dir, "params.npy")
        self.env = dict(os.environ, PYTHONPATH=PACKAGE + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def log(self, name):
        f = open(os.path.join(self.dir, name + ".log"), "w")
        self.files.append(f)  # the child has its own descriptor: closed at finish()
        return f

    def start_servers(self, extra=()):
        hosts = []
        for s in range(self.num_ps):
            port_file = os.path.join(self.dir, f"ps{s}.addr")
            self.servers.append(subprocess.Popen(
                [PS_BIN, "--index", str(s), "--port-file", port_file, *self.flags, *extra],
                stdout=self.log(f"ps{s}"), stderr=subprocess.STDOUT))
            self.wait_for_file(port_file, self.servers[-1])
            hosts.append(read(port_file).strip())  # written whole: renamed into place
        self.hosts = ",".join(hosts)

    def start_worker(self, i, name=None, env=None):
        name = name or f"w{i}"
        self.workers[name] = subprocess.Popen(
            [sys.executable, self.script, self.out, "--", "--index", str(i), "--ps-hosts", self.hosts, *self.flags],
            stdout=self.log(name), stderr=subprocess.STDOUT, env=dict(self.env, **(env or {})))
        return self.workers[name]

    def wait_for_file(self, path, process):
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            if time.monotonic() > deadline or process.poll() is not None:
                raise AssertionError(f"{path} never appeared:\n{self.logs()}")
            time.sleep(0.01)  # polling another process's file, not synchronisation

    def run(self):
        self.start_servers()
        for i in range(self.num_workers):
            self.start_worker(i)
        return self.finish()

    def finish(self):
        codes = {name: p.wait(timeout=300) for name, p in self.workers.items()}
        for s, p in enumerate(self.servers):
            try:
                # A failed worker leaves the shards waiting for it: they are stopped (code -9).
                codes[f"ps{s}"] = p.wait(timeout=30 if all(c == 0 for c in codes.values()) else 0.1)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[f"ps{s}"] = p.wait()
        for f in self.files:
            f.close()
        return codes

    def logs(self):
        text = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                text += f"--- {name}\n" + read(os.path.join(self.dir, name))
        return text

    def params(self):
        return np.load(self.out)


LAUNCH = os.path.join(HERE, "..", "..", "launch", "launch.sh")


def launch(job, run_dir, counts, mode_flags, extra=(), env=None):
    """launch.sh running `job`'s script as 2 workers with `counts` (launch.sh's --num-ps, ...) and
    the job's flags (but its counts) after `mode_flags`; a Popen whose stdout is a pipe."""
    return subprocess.Popen(
        [LAUNCH, "--no-setup", "--progress", "lines", "--run-dir", run_dir, "--num-workers", "2", *counts,
         "--worker-cmd", f"{sys.executable} {job.script} {job.out} --", "--", *mode_flags, *job.flags[4:], *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(job.env, **(env or {})))


def stop_and_resume(test, make_job, counts, mode_flags, pause_variable):
    """Through launch.sh: the job uninterrupted; the job with checkpoints every 10 steps whose
    workers pause before step 25 (`pause_variable`=25: the script writes OUT.pause and waits for
    OUT.go), stopped by `launch.sh stop` (SIGTERM to the chief: a final checkpoint of step 26);
    then that job with --resume. Returns (the uninterrupted job, the resumed one): their OUT."""
    reference = make_job()
    out = launch(reference, os.path.join(reference.dir, "run"), counts, mode_flags)
    test.assertEqual(out.wait(timeout=300), 0, out.communicate()[0])
    job = make_job()
    checkpoints = os.path.join(job.dir, "checkpoints")
    flags = ["--checkpoint-dir", checkpoints, "--checkpoint-every", "10"]
    run_dir = os.path.join(job.dir, "run")
    launcher = launch(job, run_dir, counts, mode_flags, flags, env={pause_variable: "25"})
    try:
        job.wait_for_file(job.out + ".pause", launcher)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{launcher.communicate()[0] if launcher.poll() is not None else ''}") from None
    stop = subprocess.Popen([LAUNCH, "stop", run_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    chief_log = os.path.join(run_dir, "w0.log")
    while "SIGTERM: a final checkpoint at the next step" not in read(chief_log):
        test.assertIsNone(launcher.poll(), launcher.communicate()[0] if launcher.poll() is not None else "")
        time.sleep(0.01)  # polling the chief's log: the handler has run
    open(job.out + ".go", "w").close()
    test.assertEqual(stop.wait(timeout=300), 0, stop.communicate()[0])
    launched = launcher.communicate(timeout=60)[0]
    test.assertFalse(os.path.exists(job.out), "a stopped job wrote its parameters as a result")
    test.assertEqual(sorted(n for n in os.listdir(checkpoints) if n.startswith("v")),
                     ["v0000000010", "v0000000020", "v0000000026"], launched)
    test.assertIn("checkpoint of step 26 complete", read(chief_log))
    resumed = launch(job, os.path.join(job.dir, "resumed"), counts, mode_flags, [*flags, "--resume"])
    test.assertEqual(resumed.wait(timeout=300), 0, resumed.communicate()[0])
    test.assertIn("w0: resumed from checkpoint", read(os.path.join(job.dir, "resumed", "w0.log")))
    return reference.out, job.out


def read(path):
    with open(path) as f:
        return f.read()


def relative_difference(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(np.max(np.abs(a)), 1e-30))
