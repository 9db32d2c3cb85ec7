"""tools/ctr_gen.py: the same bytes for a seed, Criteo's format exactly, the ceiling AUC printed."""
import gzip
import os
import re
import subprocess
import sys
import tempfile
import unittest

GEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "ctr_gen.py")
HEX = re.compile(r"^[0-9a-f]{8}$")
INT = re.compile(r"^-?[0-9]+$")


def run(out_dir, *flags):
    done = subprocess.run([sys.executable, GEN, "--out-dir", out_dir, *flags], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError("ctr_gen.py failed: " + done.stderr)
    return done.stdout


def read(path):
    with open(path, "rb") as f:
        return f.read()


class CtrGenTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ctr-gen-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def gen(self, name, *flags):
        out = os.path.join(self.dir, name)
        return out, run(out, "--train-lines", "2000", "--test-lines", "1000", *flags)

    def test_same_seed_same_bytes_other_seed_other_data(self):
        a, out_a = self.gen("a", "--seed", "4")
        b, out_b = self.gen("b", "--seed", "4")
        c, _ = self.gen("c", "--seed", "5")
        for name in ("train.tsv", "test.tsv"):
            self.assertEqual(read(os.path.join(a, name)), read(os.path.join(b, name)))
            self.assertNotEqual(read(os.path.join(a, name)), read(os.path.join(c, name)))
        self.assertEqual(out_a.replace(a, ""), out_b.replace(b, ""))

    def test_lines_are_criteo_format(self):
        out, _ = self.gen("f", "--missing", "0.1")
        with open(os.path.join(out, "train.tsv"), "rb") as f:
            data = f.read().decode("ascii")
        self.assertTrue(data.endswith("\n"))
        lines = data.split("\n")[:-1]
        self.assertEqual(len(lines), 2000)
        labels = set()
        empty_int = empty_cat = negative = 0
        for line in lines:
            fields = line.split("\t")
            self.assertEqual(len(fields), 40, line)
            self.assertIn(fields[0], ("0", "1"))
            labels.add(fields[0])
            for f in fields[1:14]:
                self.assertTrue(f == "" or INT.match(f), f)
                empty_int += f == ""
                negative += f.startswith("-")
            for f in fields[14:]:
                self.assertTrue(f == "" or HEX.match(f), f)
                empty_cat += f == ""
        self.assertEqual(labels, {"0", "1"})
        self.assertGreater(empty_int, 0)
        self.assertGreater(empty_cat, 0)
        self.assertGreater(negative, 0)

    def test_ceiling_auc_printed_and_gzip_holds_the_same_lines(self):
        plain, out = self.gen("p", "--seed", "2", "--distinct-ids", "1000000000", "--zipf", "1.0")
        gz, out_gz = self.gen("g", "--seed", "2", "--distinct-ids", "1000000000", "--zipf", "1.0", "--gzip")
        auc = float(re.search(r"^ceiling_auc=([0-9.]+)$", out, re.M).group(1))
        self.assertGreater(auc, 0.6)
        self.assertLessEqual(auc, 1.0)
        self.assertIn("ceiling_auc=%.6f" % auc, out_gz)
        for name in ("train.tsv", "test.tsv"):
            with gzip.open(os.path.join(gz, name + ".gz"), "rb") as f:
                self.assertEqual(f.read(), read(os.path.join(plain, name)))
        self.assertEqual(read(os.path.join(gz, "train.tsv.gz")),
                         read(os.path.join(self.gen("g2", "--seed", "2", "--distinct-ids", "1000000000",
                                                    "--zipf", "1.0", "--gzip")[0], "train.tsv.gz")))

    def test_multi_valued_fields_list_one_to_max_ids_in_the_last_k_fields(self):
        plain, _ = self.gen("s", "--seed", "6")
        multi, out = self.gen("m", "--seed", "6", "--multi-valued-fields", "3", "--max-values", "4")
        with open(os.path.join(multi, "train.tsv"), "rb") as f:
            lines = f.read().decode("ascii").split("\n")[:-1]
        counts = set()
        for line in lines:
            fields = line.split("\t")
            self.assertEqual(len(fields), 40, line)
            for f in fields[14:37]:
                self.assertTrue(f == "" or HEX.match(f), f)
            for f in fields[37:]:
                ids = f.split(",") if f else []
                self.assertTrue(all(HEX.match(i) for i in ids), f)
                counts.add(len(ids))
        self.assertEqual(counts, {0, 1, 2, 3, 4})
        self.assertGreater(float(re.search(r"^ceiling_auc=([0-9.]+)$", out, re.M).group(1)), 0.6)
        self.assertNotEqual(read(os.path.join(plain, "train.tsv")), read(os.path.join(multi, "train.tsv")))
        # --multi-valued-fields 0 (the default) writes what the flags' absence writes.
        zero, _ = self.gen("z", "--seed", "6", "--multi-valued-fields", "0", "--max-values", "9")
        self.assertEqual(read(os.path.join(plain, "train.tsv")), read(os.path.join(zero, "train.tsv")))

    def test_bad_flags_are_refused(self):
        done = subprocess.run([sys.executable, GEN, "--out-dir", self.dir, "--distinct-ids", "2000000000"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2)
        self.assertIn("--distinct-ids", done.stderr)
        for flags in (["--multi-valued-fields", "27"], ["--max-values", "0"], ["--max-values", "1025"]):
            done = subprocess.run([sys.executable, GEN, "--out-dir", self.dir, *flags],
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(done.returncode, 2, flags)
            self.assertIn("--multi-valued-fields must be in [0, 26] and --max-values in [1, 1024]", done.stderr)


if __name__ == "__main__":
    unittest.main()
