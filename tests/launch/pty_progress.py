"""launch.sh's progress bar on a real job: the launcher runs under a pseudo-terminal (so its stdout
is a terminal and --progress auto picks the bar) with the built binaries on a small synthetic data
set; the bar must be redrawn in place as the chief's progress records arrive, with the step rising
and the ETA falling, end at 100%, and the processes' progress lines must stay off the terminal
while the results reach it. Exits 77 (ctest's skip) without built binaries.

    PSTRAIN_BUILD_DIR=build python3 tests/launch/pty_progress.py [-v]
    PSTRAIN_PTY_SCREEN=FILE ...   also writes the final screen there (docs/operations.md's capture)
"""

import fcntl
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(REPO, "build")
# Wide enough that the bar keeps its full 30 columns with every figure the line can carry (a
# loaded machine adds the straggler's "slowest w0 (100% of steps)", which on 132 columns
# squeezed the bar to 12).
COLUMNS = 200
FRAME = re.compile(r"\r\x1b\[K(\[[#-]+\] +([0-9.]+)%  step ([0-9]+)/([0-9]+)[^\r\n]*)")
ETA = re.compile(r"ETA (?:([0-9]+) min )?([0-9]+) s$")


def write_idx(directory, split, n, seed):
    """A learnable 10-class set of 8 x 8 images in IDX format, like tests/test_util/idx_writer.h's:
    each class a binary template (the same in every split), each record adds noise from `seed`."""
    import random
    shape = random.Random(1)
    templates = [[200 if shape.random() < 0.25 else 20 for _ in range(64)] for _ in range(10)]
    rng = random.Random(seed)
    labels = [rng.randrange(10) for _ in range(n)]
    pixels = bytearray()
    for label in labels:
        pixels += bytes(max(0, min(255, v + rng.randint(-40, 40))) for v in templates[label])
    with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + bytes(pixels))
    with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))


def run_in_pty(argv, env, timeout):
    """(exit status, everything the terminal received) of argv with stdout and stderr on a new
    pseudo-terminal COLUMNS wide."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                             start_new_session=True)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not data:
                break
            received += data
        code = child.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(master)
    return code, received.decode("utf-8", "replace")


def screen(text):
    """What the terminal shows at the end: carriage returns and erase-line applied per line."""
    lines = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = ""
        for part in raw.split("\r"):  # back to column 0; then erase the line, or overwrite its start
            line = part[3:] if part.startswith("\x1b[K") else part + line[len(part):]
        lines.append(line)
    return "\n".join(lines)


class ProgressBarOnATerminalTest(unittest.TestCase):
    def test_bar_redraws_and_eta_falls(self):
        work = tempfile.mkdtemp(prefix="pstrain-pty-")
        self.addCleanup(shutil.rmtree, work, True)
        write_idx(work, "train", 3000, 5)
        write_idx(work, "t10k", 200, 6)
        run_dir = os.path.join(work, "run")
        env = dict(os.environ, PSTRAIN_BUILD_DIR=BUILD, TERM="xterm")
        argv = ["bash", os.path.join(REPO, "launch", "launch.sh"), "--no-setup", "--run-dir", run_dir, "--",
                "--hidden", "16,8", "--timeout", "20", "--data-dir", work, "--cache-dir", work,
                "--batch-size", "8", "--epochs", "1000", "--steps", "1500", "--log-every", "50",
                "--push-jitter-ms", "1"]  # a few ms a step: seconds, however fast the machine
        code, text = run_in_pty(argv, env, timeout=240)
        final = screen(text)
        if os.environ.get("PSTRAIN_PTY_SCREEN"):
            with open(os.environ["PSTRAIN_PTY_SCREEN"], "w", encoding="utf-8") as f:
                f.write(final)
        self.assertEqual(code, 0, final)

        frames = FRAME.findall(text)
        steps = [int(f[2]) for f in frames]
        self.assertGreaterEqual(len(set(steps)), 3, f"the bar was drawn for fewer than 3 steps: {frames}")
        self.assertEqual(steps, sorted(steps), "the step went back")
        self.assertTrue(all(f[3] == "1500" for f in frames), frames)
        etas = [int(m.group(1) or 0) * 60 + int(m.group(2)) for m in (ETA.search(f[0]) for f in frames) if m]
        self.assertGreaterEqual(len(etas), 2, frames)
        self.assertLess(etas[-1], etas[0], f"the ETA did not fall: {etas}")
        self.assertEqual(frames[-1][1], "100.0")
        self.assertRegex(frames[-1][0], r"done in [0-9]")

        # On the screen: the last bar stays; the results are there, the progress lines are not.
        self.assertRegex(final, r"\[w0\] [0-9:.]+ I summary: .*test_accuracy=")
        self.assertRegex(final, r"\n\[#{30}\] 100\.0%  step 1500/1500 .*done in ")
        self.assertIn(f"launch: training completed; logs in {os.path.realpath(run_dir)}", final)
        self.assertNotRegex(final, r"I epoch [0-9]+/[0-9]+ step ")
        with open(os.path.join(run_dir, "w0.log"), encoding="utf-8") as f:
            self.assertRegex(f.read(), r"I epoch [0-9]+/[0-9]+ step ")  # still in the log file


if __name__ == "__main__":
    missing = [b for b in ("pstrain-ps", "pstrain-worker") if not os.access(os.path.join(BUILD, b), os.X_OK)]
    if missing:
        print(f"skipped: {', '.join(missing)} not built in {BUILD} (set PSTRAIN_BUILD_DIR)")
        sys.exit(77)
    unittest.main()
