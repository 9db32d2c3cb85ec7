"""Starts the job's processes, prefixes and logs their output, and stops all of them together.

Every process runs in its own session and process group (start_new_session), so its pid is the
real binary's pid and the id of its group; stopping = SIGTERM and SIGCONT to every group (a
stopped process acts on its SIGTERM), SIGKILL after the grace period, and the /dev/shm names of
a SIGKILLed process removed for it. Each child's stdout and stderr go to one pipe read by a
thread of this process, which writes the unprefixed log file RUNDIR/<name>.log and the
"[label] " prefixed copy on our stdout. Children get SIGTERM when this launcher dies, even by
SIGKILL (setpriv --pdeathsig), and default SIGINT/SIGQUIT (a background job of a shell script
has them ignored).

A child may be given a stdin pipe (the ssh starter): closing it is how a remote process is told
to stop (launch/remote.sh stops its process when its standard input ends), and the pipe closes
by itself when this launcher dies, whatever kills it.
"""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

from .refusals import Refusals

# What a process's line says while it saves (pstrain-ps: "ps0: saving embedding tables to ...:
# 512 of 1900 MiB"): after the workers, the launcher waits for a PS that keeps saying it.
SAVING = b": saving "


def describe_status(code):
    """Popen's returncode (negative = signal) or a shell's 128+N, as words."""
    if code < 0 or 128 < code <= 128 + 64:
        number = -code if code < 0 else code - 128
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"SIG{number}"
        return f"killed by signal {number} ({name})"
    return f"exited with status {code}"


class Output:
    """Our stdout and RUNDIR/launch.log, shared by the main thread and the readers.

    Lines mode (the default): every line goes to stdout, a process's with its "[label] " prefix.
    Bar mode (`shown` given: progress.shown): a live status line stays at the bottom of stdout; the
    launcher's lines and the processes' warnings and errors go to stderr, results (a process's
    summary and evaluations, where plots were written) to stdout, above it; the processes'
    other lines only to their log files, as `shown` (a line -> "result", "log" or None) says.
    Either mode holds back the lines that repeat a refusal of the job's flags (refusals.py): the
    launcher says each once, naming the processes that gave it (say_refusals)."""

    def __init__(self, run_dir=None, shown=None):
        self.lock = threading.Lock()
        self.run_dir = run_dir
        self.shown = shown
        self.bar = shown is not None
        self.live = ""  # bar mode: the status line shown at the bottom of stdout ("": none yet)
        self.refusals = Refusals()

    def say(self, message, result=False):
        self._line(f"launch: {message}\n".encode(), to_stdout=result or not self.bar)
        if self.run_dir:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            with open(os.path.join(self.run_dir, "launch.log"), "a", encoding="utf-8") as log:
                log.write(f"{stamp} {message}\n")

    def relay(self, label, text):
        """A process's line (ending in a newline)."""
        if self.refusals.hold(label, text):
            return
        where = self.shown(text) if self.bar else "result"
        if where is not None:
            self._line(f"[{label}] ".encode() + text, to_stdout=where == "result")

    def say_refusals(self):
        """Each refusal held back and not yet said, once: "ps0, w0, w1 refused: --resume: ..."."""
        for text, who in self.refusals.take():
            self.say(f"{who} refused: {text}")

    def show(self, line):
        """Bar mode: replaces the status line."""
        with self.lock:
            self.live = line
            sys.stdout.buffer.write(b"\r\x1b[K" + line.encode())
            sys.stdout.buffer.flush()

    def end_live(self):
        """Bar mode: leaves the status line on the screen; later lines go below it."""
        with self.lock:
            if self.live:
                sys.stdout.buffer.write(b"\n")
                sys.stdout.buffer.flush()
            self.live = ""

    def _line(self, data, to_stdout):
        with self.lock:
            if self.live:
                sys.stdout.buffer.write(b"\r\x1b[K")
                sys.stdout.buffer.flush()
            stream = sys.stdout if to_stdout else sys.stderr
            stream.buffer.write(data)
            stream.buffer.flush()
            if self.live:
                sys.stdout.buffer.write(self.live.encode())
                sys.stdout.buffer.flush()


class Child:
    def __init__(self, name, label, popen, reader):
        self.name = name
        self.label = label
        self.popen = popen
        self.pid = popen.pid
        self.reader = reader
        self.status = None  # returncode once reaped


def _wrapper():
    """Commands that give a child default SIGINT/SIGQUIT and SIGTERM when we die."""
    wrap = []
    if shutil.which("env") and subprocess.run(["env", "--default-signal=INT,QUIT", "true"],
                                              stderr=subprocess.DEVNULL).returncode == 0:
        wrap += ["env", "--default-signal=INT,QUIT"]
    if shutil.which("setpriv") and subprocess.run(["setpriv", "--pdeathsig", "TERM", "--", "true"],
                                                  stderr=subprocess.DEVNULL).returncode == 0:
        wrap += ["setpriv", "--pdeathsig", "TERM", "--"]
    return wrap


def _group_states(pgids):
    """pgid -> the states (/proc/PID/stat's letters: R, S, D, T, t, ...) of the members of each
    group among `pgids` that still has one; a zombie is not counted (an orphaned zombie waits
    for init, which in a container may never reap it). Without /proc: '?' for a live group."""
    alive = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
            alive.add(pgid)
        except OSError:
            pass
    if not alive or not os.path.isdir("/proc/self"):
        return {pgid: {"?"} for pgid in alive}
    states = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # state ppid pgrp ...
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) in alive:
            states.setdefault(int(fields[2]), set()).add(fields[0])
    return states


def remove_segments(pid):
    """Removes the names /dev/shm/pstrain-*-PID-* that process `pid` created and could not remove
    (it was SIGKILLed: shared/net/shared_memory.h removes them on SIGTERM, SIGINT and SIGHUP)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    removed = []
    for name in names:
        if re.fullmatch(rf"pstrain-.+-{pid}-[0-9a-f]+", name):
            try:
                os.unlink(os.path.join("/dev/shm", name))
                removed.append(name)
            except OSError:
                pass
    return removed


class Supervisor:
    def __init__(self, output, run_dir, stop_grace):
        self.out = output
        self.run_dir = run_dir
        self.stop_grace = stop_grace
        self.children = {}  # name -> Child, in start order
        # name -> time.monotonic() of its last line saying it is saving (a PS writing its tables
        # at the job's end: docs/operations.md, "How processes are stopped")
        self.saving_at = {}
        self.wrap = _wrapper()

    def spawn(self, name, label, argv, stdin_pipe=False, env=None, demux=None):
        """Starts argv as `name`; its output is prefixed with [label] and logged in RUNDIR/name.log.

        demux (a Slurm or MPI step running several processes): line -> (name, label, text) of the
        process that printed it, name None for the starter's own lines."""
        popen = subprocess.Popen(self.wrap + list(argv), stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                 env=env)
        reader = threading.Thread(target=self._relay, args=(popen.stdout, name, label, demux), daemon=True)
        reader.start()
        child = Child(name, label, popen, reader)
        self.children[name] = child
        with open(os.path.join(self.run_dir, "cmd.txt"), "a", encoding="utf-8") as f:
            f.write(f"{name}\t{child.pid}\t{shlex.join(argv)}\n")
        self.out.say(f"started {label} (pid {child.pid})")
        return child

    def _relay(self, pipe, name, label, demux):
        logs = {} if demux else {name: open(os.path.join(self.run_dir, f"{name}.log"), "ab")}
        try:
            for line in iter(pipe.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                who, tag, text = demux(line) if demux else (name, label, line)
                who = who or name
                if who not in logs:
                    logs[who] = open(os.path.join(self.run_dir, f"{who}.log"), "ab")
                logs[who].write(text)
                logs[who].flush()
                if SAVING in text:
                    self.saving_at[who] = time.monotonic()
                self.out.relay(tag, text)
        finally:
            for log in logs.values():
                log.close()
            pipe.close()

    def live(self):
        return [c for c in self.children.values() if c.status is None]

    def reap(self):
        """Reaps the children that have exited since the last call; returns them in start order."""
        done = []
        for child in self.live():
            code = child.popen.poll()
            if code is not None:
                self._reaped(child, code)
                done.append(child)
        return done

    def _reaped(self, child, code):
        child.status = code
        if code == -signal.SIGKILL:
            for name in remove_segments(child.pid):
                self.out.say(f"removed /dev/shm/{name} of {child.label} (pid {child.pid}, killed by SIGKILL)")

    def running_groups(self):
        """Labels of the children whose process group still has a live (non-zombie) member."""
        groups = _group_states([c.pid for c in self.children.values()])
        return [c.label for c in self.children.values() if c.pid in groups]

    def stopped_groups(self):
        """The live children whose process group has a stopped member (SIGSTOP, SIGTSTP, a
        debugger): one that cannot make progress until it is continued."""
        groups = _group_states([c.pid for c in self.live()])
        return [c for c in self.live() if groups.get(c.pid, set()) & {"T", "t"}]

    def _signal_groups(self, sig, local_only=False):
        for child in self.children.values():
            if local_only and child.popen.stdin is not None:
                continue  # remote: its closed stdin stops it (launch/remote.sh)
            try:
                os.killpg(child.pid, sig)
            except OSError:
                pass

    def _terminate_groups(self):
        """SIGTERM, then SIGCONT: a stopped process wakes up to act on the SIGTERM (remove its
        shared-memory names, exit) instead of waiting for SIGKILL."""
        self._signal_groups(signal.SIGTERM, local_only=True)
        self._signal_groups(signal.SIGCONT, local_only=True)

    def kill_all(self):
        """SIGKILL to every group (a second signal while stopping), and their /dev/shm names go."""
        self._signal_groups(signal.SIGKILL)
        for child in self.live():
            remove_segments(child.pid)

    def _wait_groups(self, seconds):
        deadline = time.monotonic() + seconds
        while self.running_groups() and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        return self.running_groups()

    def stop_all(self):
        """Closes remote processes' stdin, SIGTERM and SIGCONT to every group (the SIGTERM twice),
        SIGKILL after the grace; returns within about grace + 4 s however the processes are stuck
        (stopped, ignoring SIGTERM; one in uninterruptible sleep is left to the kernel)."""
        if not self.children:
            return
        for child in self.children.values():
            if child.popen.stdin is not None and not child.popen.stdin.closed:
                try:
                    child.popen.stdin.close()
                except OSError:
                    pass
        self._terminate_groups()
        # A second SIGTERM to what still runs a moment later: a checkpointing chief takes the
        # first as a request for a final checkpoint (worker/main.cc), the second as "stop now".
        if self._wait_groups(0.3):
            self._terminate_groups()
        # A remote process gets launch/remote.sh's own grace (the same) and its SIGKILL before
        # its ssh client is given up on: the client ends when the remote process has.
        remote = any(c.popen.stdin is not None for c in self.children.values())
        left = self._wait_groups(self.stop_grace + (5 if remote else 0))
        if left:
            self.out.say(f"{' '.join(left)} still running {self.stop_grace}s after SIGTERM; sending SIGKILL")
            self._signal_groups(signal.SIGKILL)
            self._wait_groups(2)
        deadline = time.monotonic() + 1
        for child in self.live():
            try:
                self._reaped(child, child.popen.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        self.drain()
        self.children = {}

    def drain(self):
        """Waits up to 2 s for the readers to print the last lines."""
        deadline = time.monotonic() + 2
        for child in self.children.values():
            child.reader.join(max(0.0, deadline - time.monotonic()))
