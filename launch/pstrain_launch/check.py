"""launch.sh --dry-run's check: the binaries parse the planned command lines themselves.

Each command runs here with --check-config (the binaries parse and check every flag and the
config file as a start would, print "configuration OK" and exit 0, or exit 2 naming what they
refuse), so a dry run refuses what the job would refuse, with the binaries' own words.
"""

import json
import os
import re
import subprocess

# Variables that would place a process in a cluster (shared/config/cluster_env.h). A process on another
# host, or in a Slurm step or under mpirun, gets its own; the check runs here, without ours.
_CLUSTER_ENV = re.compile(r"TF_CONFIG|SLURMD?_.*|OMPI_.*|PSTRAIN_ROLE_.*")
_LOG_PREFIX = re.compile(r"^[0-9:.]+ [DIWE] ", re.M)  # shared/util/log.h's time and level
TIMEOUT_S = 30


class Result:
    def __init__(self, label, binary, refused=None, unchecked=None, said=""):
        self.label = label
        self.binary = binary
        self.refused = refused      # the binary's message when it refused the command
        self.unchecked = unchecked  # why it could not be checked
        self.said = said            # the binary's answer when it accepted


def environment(launcher):
    """The check's environment: ours for local processes (they get it too), else without the
    variables that would place a process in a cluster."""
    if launcher == "local":
        return dict(os.environ)
    return {k: v for k, v in os.environ.items() if not _CLUSTER_ENV.fullmatch(k)}


def run(label, command, env):
    """Runs `command` (its last flag --check-config) and says how the binary took it."""
    binary = command[0]
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return Result(label, binary, unchecked=f"{binary} is not built")
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Result(label, binary, unchecked=f"{binary} --check-config did not answer within {TIMEOUT_S}s")
    except OSError as e:
        return Result(label, binary, unchecked=f"cannot run {binary}: {e.strerror}")
    said = _LOG_PREFIX.sub("", (done.stderr.strip() or done.stdout.strip())) or "no message"
    if done.returncode == 0:
        return Result(label, binary, said=done.stdout.strip() or said)
    if done.returncode == 2 and "'--check-config'" in said:
        return Result(label, binary, unchecked=f"{binary} predates --check-config (rebuild it)")
    if done.returncode != 2:  # not a usage error, yet a start would end the same way
        said += f" (exit status {done.returncode})" if done.returncode > 0 else f" (signal {-done.returncode})"
    return Result(label, binary, refused=said)


def resolved_job(binary, config, job_flags, env):
    """The job as the binaries resolve it from the config file and the job flags (shared/config/
    job_topology.h): `binary --config CONFIG JOB_FLAGS --check-config --json`'s JSON object, so the
    launcher takes the mode, hybrid mode and the counts from them rather than restating their rules.
    None where the binary cannot say: not built, older than --json, a test's stand-in, or a job it
    refuses (the launcher then reads the config file itself and names what is wrong as before)."""
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return None
    try:
        done = subprocess.run([binary, "--config", config, *job_flags, "--check-config", "--json"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        job = json.loads(done.stdout) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return None
    return job if isinstance(job, dict) and "hybrid" in job else None
