"""The chief's TensorBoard event files read back by TensorBoard's own reader (the `tensorboard`
Python package: EventAccumulator, and the TFRecord reader under it, which checks both masked
CRC-32Cs of every record), for a real job through the launcher (2 PS shards, 3 workers):

* every scalar TensorBoard loads is the figure of RUNDIR/metrics.jsonl at the same step (float
  precision), and every figure of metrics.jsonl is there: the same comparison as
  tests/tensorboard_test.cc's TensorBoardJobTest makes with pstrain's own reader;
* every record passes TensorBoard's CRC checks, and a copy with one flipped byte fails them;
* the runs TensorBoard finds under RUNDIR/tensorboard are named for what they are: "chief" (the
  job's figures) and "w0", "w1", "w2" (each worker's own);
* each worker's own run (RUNDIR/tensorboard/w<i>) loads with its step breakdown and its training
  loss, the three averaging to the chief's train/loss (equal shares).

Exits 77 (ctest's skip) where `tensorboard` cannot be imported: Debian 12 has no package for it
and pstrain does not need it (`pip install tensorboard` in a virtual environment, then run this
file with that environment's python3).

    python3 tests/launch/tensorboard_read_check.py [-v]
"""

import glob
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

try:
    from tensorboard.backend.event_processing import event_accumulator, plugin_event_multiplexer
    from tensorboard.compat.tensorflow_stub import errors as tb_errors
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as tb_records
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
LAUNCH = os.path.join(ROOT, "launch", "launch.sh")


def write_idx(directory, split, n, seed):
    """A learnable 10-class set of 8x8 images: each class a binary template plus noise."""
    templates = random.Random(7)
    templates = [[templates.randrange(2) for _ in range(64)] for _ in range(10)]
    rng = random.Random(seed)
    labels = [rng.randrange(10) for _ in range(n)]
    pixels = bytes(min(255, templates[label][i] * 96 + rng.randrange(160)) for label in labels for i in range(64))
    with open(os.path.join(directory, f"{split}-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + pixels)
    with open(os.path.join(directory, f"{split}-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))


def documented_tag(kind, key, in_breakdown=False, shard=None):
    """The TensorBoard tag of a metrics.jsonl figure (docs/operations.md, "TensorBoard")."""
    if shard is not None:
        return f"{shard}/{key}"
    if in_breakdown:
        part = key[:-3]  # "compute_ms" -> "compute"
        return ("" if kind == "progress" else kind + "/") + "step_ms/" + part
    if kind == "progress":
        return "train/" + key
    if kind == "epoch" and key.startswith("test_"):
        return "test/" + key[5:]
    return kind + "/" + key


def expected_scalars(metrics_path):
    """{(step, tag): value} for every number of metrics.jsonl, and the number of records."""
    expected, records = {}, 0
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            records += 1
            kind = r["kind"]
            step = r["step"] if "step" in r else r["steps"]
            for key, value in r.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and \
                        key not in ("time_s", "step", "steps", "epoch_step"):
                    expected[(step, documented_tag(kind, key))] = value
            for key, value in r.get("breakdown", {}).items():
                expected[(step, documented_tag(kind, key, in_breakdown=True))] = value
            if kind == "progress":
                for shard, figures in r.get("ps", {}).items():
                    for key, value in figures.items():
                        expected[(step, documented_tag(kind, key, shard=shard))] = value
    return expected, records


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def records_of(path):
    """Every record's bytes through TensorBoard's TFRecord reader (both CRCs checked); raises
    tensorboard's DataLossError on a CRC that does not match."""
    reader = tb_records.PyRecordReader_New(path)
    out = []
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            return out
        out.append(reader.record())


def load(directory):
    accumulator = event_accumulator.EventAccumulator(directory, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return accumulator


class TensorBoardReadBackTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pstrain-tbread-")
        data = os.path.join(cls.dir, "data")
        os.mkdir(data)
        write_idx(data, "train", 240, 61)
        write_idx(data, "t10k", 40, 62)
        cls.run_dir = os.path.join(cls.dir, "run")
        env = dict(os.environ, PSTRAIN_NO_SETUP="1")
        command = ["bash", LAUNCH, "--num-ps", "2", "--num-workers", "3", "--run-dir", cls.run_dir, "--",
                   "--data-dir", data, "--cache-dir", data, "--hidden", "16", "--epochs", "2", "--batch-size", "8",
                   "--lr", "0.01", "--log-every", "3", "--device", "cpu"]
        result = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
                                env=env)
        if result.returncode != 0:
            shutil.rmtree(cls.dir, True)
            raise AssertionError(f"the job failed, exit {result.returncode}:\n{result.stdout}{result.stderr}")
        cls.tensorboard = os.path.join(cls.run_dir, "tensorboard")
        cls.chief = os.path.join(cls.tensorboard, "chief")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)

    def chief_file(self):
        files = glob.glob(os.path.join(self.chief, "events.out.tfevents.*"))
        self.assertEqual(len(files), 1, files)
        return files[0]

    def test_every_scalar_is_the_metrics_files_figure_at_its_step(self):
        expected, records = expected_scalars(os.path.join(self.run_dir, "metrics.jsonl"))
        self.assertGreaterEqual(records, 9)  # 4 progress records and an evaluation an epoch, the summary
        accumulator = load(self.chief)
        got = {}
        for tag in accumulator.Tags()[event_accumulator.SCALARS]:
            for event in accumulator.Scalars(tag):
                self.assertNotIn((event.step, tag), got, f"{tag} twice at step {event.step}")
                got[(event.step, tag)] = event.value
        self.assertEqual(sorted(got), sorted(expected))
        for key, value in expected.items():
            self.assertEqual(got[key], float32(value), key)
        tags = {tag for _, tag in got}
        for tag in ("train/loss", "train/accuracy", "train/samples_per_s", "step_ms/compute", "step_ms/wait",
                    "test/loss", "test/accuracy", "summary/samples_per_s", "ps0/apply_ms", "ps1/in_mib",
                    "ps1/out_mib"):
            self.assertIn(tag, tags)
        print(f"\n{len(got)} scalars under {len(tags)} tags, each the figure of metrics.jsonl "
              f"({records} records)", file=sys.stderr)

    def test_every_record_passes_tensorboards_crc_checks_and_a_flipped_byte_fails_them(self):
        path = self.chief_file()
        _, records = expected_scalars(os.path.join(self.run_dir, "metrics.jsonl"))
        clean = records_of(path)
        self.assertEqual(len(clean), records + 1)  # the file_version record, then one per record
        with open(path, "rb") as f:
            data = bytearray(f.read())
        # The third record's data: skip two records (8-byte length, 4-byte CRC, data, 4-byte CRC).
        at = 0
        for _ in range(2):
            at += 12 + struct.unpack_from("<Q", data, at)[0] + 4
        def scalars_in(directory):
            accumulator = load(directory)
            return sum(len(accumulator.Scalars(t)) for t in accumulator.Tags()[event_accumulator.SCALARS])

        def copy_of(name, contents):
            copy = os.path.join(self.dir, name, os.path.basename(path))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            with open(copy, "wb") as f:
                f.write(contents)
            return copy

        first_two = scalars_in(os.path.dirname(copy_of("first-two", data[:at])))
        self.assertGreater(first_two, 0)
        self.assertLess(first_two, scalars_in(self.chief))
        for offset, what in ((at + 12 + 5, "event crc32"), (at + 2, "header crc32")):
            broken = bytearray(data)
            broken[offset] ^= 0x10
            copy = copy_of("broken-" + what.split()[0], broken)
            with self.assertRaises(tb_errors.DataLossError) as caught:
                records_of(copy)
            self.assertIn(f"failed {what} check", str(caught.exception))
            # EventAccumulator stops at the bad record: the first two records' scalars only.
            self.assertEqual(scalars_in(os.path.dirname(copy)), first_two, what)

    def test_the_runs_are_named_chief_and_w0_w1_w2(self):
        multiplexer = plugin_event_multiplexer.EventMultiplexer()
        multiplexer.AddRunsFromDirectory(self.tensorboard)
        multiplexer.Reload()
        self.assertEqual(sorted(multiplexer.Runs()), ["chief", "w0", "w1", "w2"])

    def test_each_workers_own_run_loads_with_its_breakdown_and_loss(self):
        chief = load(self.chief)
        chief_steps = {e.step for e in chief.Scalars("step_ms/compute")}
        chief_loss = {e.step: e.value for e in chief.Scalars("train/loss")}
        worker_loss = {}
        for i in range(3):
            run = os.path.join(self.tensorboard, f"w{i}")
            accumulator = load(run)
            tags = accumulator.Tags()[event_accumulator.SCALARS]
            for part in ("compute", "push", "wait", "pull"):
                self.assertIn(f"step_ms/{part}", tags, run)
            steps = [e.step for e in accumulator.Scalars("step_ms/compute")]
            self.assertEqual(set(steps), chief_steps, run)
            self.assertTrue(all(e.value >= 0 for e in accumulator.Scalars("step_ms/compute")), run)
            self.assertIn("train/loss", tags, run)
            for e in accumulator.Scalars("train/loss"):
                self.assertGreater(e.value, 0, run)
                worker_loss.setdefault(e.step, []).append(e.value)
        self.assertEqual(set(worker_loss), set(chief_loss))
        for step, losses in worker_loss.items():  # 3 x 8 of 240 records a step: equal shares
            self.assertEqual(len(losses), 3, step)
            self.assertAlmostEqual(sum(losses) / 3, chief_loss[step], delta=1e-5 * chief_loss[step], msg=step)


if __name__ == "__main__":
    unittest.main()
