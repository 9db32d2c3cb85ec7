"""A refusal of the job's flags that every process gives (`--resume: no usable checkpoint in ...`)
is said once by the launcher, naming the processes that gave it (launch/pstrain_launch/refusals.py);
the processes' logs keep their lines. The job test needs the built binaries (PSTRAIN_BUILD_DIR, else
REPO/build) and is skipped without them."""

import io
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch"))
from pstrain_launch import cli, supervisor  # noqa: E402 (after the path to launch/)

BUILD = os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(cli.REPO, "build")
REFUSAL = "--resume: no usable checkpoint in '/c' (it holds none; --resume auto starts fresh where there is none)"


def terminal():
    """A stand-in for sys.stdout / sys.stderr: text whose .buffer is kept."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8")


def text_of(stream):
    stream.flush()
    return stream.buffer.getvalue().decode()


class HeldRefusalTest(unittest.TestCase):
    def relay_all(self, lines, bar=False):
        out, err = terminal(), terminal()
        with mock.patch.object(sys, "stdout", out), mock.patch.object(sys, "stderr", err):
            output = supervisor.Output(None, (lambda line: "log") if bar else None)
            for label, line in lines:
                output.relay(label, line.encode() + b"\n")
            shown = text_of(out) + text_of(err)
            output.say_refusals()
            output.say_refusals()  # said once, however often asked
            return shown, text_of(out) + text_of(err), output

    def test_the_refusal_of_every_process_is_said_once_naming_them(self):
        lines = [("ps1", f"12:08:20.814 E ps1: {REFUSAL}"),
                 ("ps1", f"12:08:20.814 W ps1: rejected a message from peer 0xfd3f: {REFUSAL}"),
                 ("w1", "12:08:20.815 I w1: connecting to ps0 at ipc://@x"),
                 ("w1", f"12:08:20.851 E pstrain-worker: ps1 rejected HELLO: {REFUSAL}"),
                 ("ps0", f"12:08:20.846 E ps0: {REFUSAL}"),
                 ("w0", f"12:08:20.826 E pstrain-worker: ps1 rejected HELLO: {REFUSAL}"),
                 ("ps0", f"12:08:20.847 W ps0: rejected a message from peer 0xbe1d: {REFUSAL}")]
        shown, everything, output = self.relay_all(lines)
        self.assertNotIn("--resume", shown)  # held back while the processes give it
        self.assertIn("[w1] 12:08:20.815 I w1: connecting", shown)  # other lines as they come
        self.assertEqual(everything.count("no usable checkpoint"), 1, everything)
        self.assertIn(f"launch: ps0, ps1, w0, w1 refused: {REFUSAL}\n", everything)
        self.assertEqual(output.refusals.replace_in(f"w0 (pid 7) died: exited with status 1 "
                                                    f"(pstrain-worker: ps1 rejected HELLO: {REFUSAL})"),
                         "w0 (pid 7) died: exited with status 1 (pstrain-worker: ps1 rejected HELLO: the refusal below)")

    def test_a_warning_of_its_own_and_other_errors_are_shown_as_they_come(self):
        lines = [("w0", "12:00:00.000 W w0: --prefetch: 0 turns prefetching off (slower)"),
                 ("w0", "12:00:00.001 E pstrain-worker: cannot open /d/x.npy: No such file or directory")]
        for bar in (False, True):
            shown, everything, _ = self.relay_all(lines, bar)
            self.assertIn("W w0: --prefetch: 0 turns", shown, bar)
            self.assertIn("E pstrain-worker: cannot open /d/x.npy", shown, bar)
            self.assertNotIn("refused", everything, bar)


def write_idx(directory, split, n, seed):
    rng = random.Random(seed)
    with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + bytes(rng.randrange(256) for _ in range(64 * n)))
    with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n)))


@unittest.skipUnless(all(os.access(os.path.join(BUILD, b), os.X_OK) for b in ("pstrain-ps", "pstrain-worker")),
                     f"pstrain-ps and pstrain-worker are not built in {BUILD}")
class ResumeRefusalJobTest(unittest.TestCase):
    def test_a_resume_without_a_checkpoint_is_refused_once_naming_every_process_that_refused(self):
        with tempfile.TemporaryDirectory(prefix="pstrain-refusal-") as d:
            data, checkpoints, run_dir = (os.path.join(d, n) for n in ("data", "ck", "run"))
            os.makedirs(data)
            os.makedirs(checkpoints)
            write_idx(data, "train", 48, 1)
            write_idx(data, "t10k", 16, 2)
            env = dict(os.environ, PSTRAIN_NO_SETUP="1", PSTRAIN_BUILD_DIR=BUILD)
            result = subprocess.run(
                ["bash", os.path.join(cli.REPO, "launch", "launch.sh"), "--num-ps", "2", "--num-workers", "3",
                 "--run-dir", run_dir, "--", "--data-dir", data, "--cache-dir", data, "--hidden", "4", "--epochs",
                 "1", "--batch-size", "8", "--checkpoint-dir", checkpoints, "--resume", "--device", "cpu"],
                capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120, env=env)
            terminal_text = result.stdout + result.stderr
            self.assertNotEqual(result.returncode, 0, terminal_text)
            refusal = f"--resume: no usable checkpoint in '{checkpoints}' (it holds none; --resume auto starts " \
                      "fresh where there is none)"
            self.assertEqual(terminal_text.count("no usable checkpoint"), 1, terminal_text)
            # Which processes gave it before the job stopped varies; the line names those that did.
            gave = []
            for name in ("ps0", "ps1", "w0", "w1", "w2"):
                log = os.path.join(run_dir, f"{name}.log")
                if os.path.exists(log):
                    with open(log, encoding="utf-8") as f:
                        if refusal in f.read():
                            gave.append(name)
            self.assertTrue(any(p.startswith("w") for p in gave) and any(p.startswith("ps") for p in gave), gave)
            self.assertIn(f"launch: {', '.join(gave)} refused: {refusal}\n", terminal_text)
            self.assertRegex(terminal_text, re.compile(r"^launch: w\d \(pid \d+\) died: exited with status 1 "
                                                       r"\(pstrain-worker: ps\d rejected HELLO: the refusal below\); "
                                                       r"stopping all$", re.M))


if __name__ == "__main__":
    unittest.main()
