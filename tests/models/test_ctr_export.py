#!/usr/bin/env python3
"""tools/ctr_score.py, the reference scorer, reproduces --predict from pstrain-export's standard
exports (--format npz-arrays and safetensors; docs/models.md, "Standard exports").

Two small CTR jobs of real processes (launch.sh, 2 PS shards, 1 worker): Criteo data from
tools/ctr_gen.py with multi-valued fields (one shared table, mean pooling, a `dot` model), and a
--schema CSV of string, int and multi-valued columns with a header (per-field tables, a bce
model with a DLRM bottom block). Each is predicted with pstrain-worker --predict, exported from
its --save-params directory and from its checkpoint, and scored by tools/ctr_score.py (numpy),
which must match within 1e-6; test rows hold IDs no table has (their initial rows). Where torch is
installed, the safetensors file is also loaded with the `safetensors` package and scored in
PyTorch. Exits 77 (ctest's skip) where numpy is missing; binaries from PSTRAIN_BUILD_DIR (else
build/ beside the source tree); PSTRAIN_KEEP=1 keeps the work directories.
"""
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e} (Debian: python3-numpy)")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(ROOT, "build")
SCORER = os.path.join(ROOT, "tools", "ctr_score.py")


def run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


class CtrExportTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="pstrain-ctr-export-")
        if not os.environ.get("PSTRAIN_KEEP"):
            self.addCleanup(shutil.rmtree, self.work, True)

    def path(self, name):
        return os.path.join(self.work, name)

    def train(self, flags):
        """A launch.sh job of 2 PS shards and a worker: its --save-params and checkpoint directories."""
        run(["bash", os.path.join(ROOT, "launch", "launch.sh"), "--no-setup", "--run-dir", self.path("run"),
             "--num-ps", "2", "--num-workers", "1", "--", "--cache-dir", self.work, "--embedding-dim", "4",
             "--batch-size", "32", "--steps", "60", "--epochs", "100", "--seed", "5", "--timeout", "30",
             "--checkpoint-dir", self.path("ckpt"), "--checkpoint-every", "30", "--save-params", self.path("m"),
             *flags], env=dict(os.environ, PSTRAIN_BUILD_DIR=BUILD))
        return self.path("m"), self.path("ckpt")

    def predict(self, data, out, extra=()):
        log = run([os.path.join(BUILD, "pstrain-worker"), "--init-params", self.path("m"), "--cache-dir", self.work,
                   "--predict", data, "--predictions", out, *extra])
        self.assertIn("predictions:", log)
        return out

    def export(self, source, out, fmt):
        run([os.path.join(BUILD, "pstrain-export"), source, out, "--format", fmt])
        return out

    def score(self, export, data, predictions, *extra):
        """The scorer's largest difference from --predict's file (it exits 1 past the tolerance)."""
        out = run([sys.executable, SCORER, export, data, "--check", predictions, "--tolerance", "1e-6", *extra])
        line = [l for l in out.splitlines() if "max |difference|" in l]
        self.assertEqual(len(line), 1, out)
        return float(line[0].split(": ")[-1].split(" ")[0])

    def check_all(self, data_files, extra=()):
        exports = [self.export(self.path("m"), self.path("m.npz"), "npz-arrays"),
                   self.export(self.path("m"), self.path("m.safetensors"), "safetensors"),
                   self.export(self.path("ckpt"), self.path("ckpt.npz"), "npz-arrays"),
                   self.export(self.path("ckpt"), self.path("ckpt.safetensors"), "safetensors")]
        for n, data in enumerate(data_files):
            predicted = self.predict(data, self.path(f"p{n}.csv"), extra)
            for e in exports:
                with self.subTest(export=os.path.basename(e), data=os.path.basename(data)):
                    self.assertLessEqual(self.score(e, data, predicted), 1e-6)
            if has_torch():
                with self.subTest(torch=True, data=os.path.basename(data)):
                    self.assertLessEqual(self.score(self.path("m.safetensors"), data, predicted, "--torch"), 1e-6)
        return exports

    def test_criteo_data_with_lists_shared_table_mean_pool_and_dot(self):
        run([sys.executable, os.path.join(ROOT, "tools", "ctr_gen.py"), "--out-dir", self.work, "--train-lines", "2000",
             "--test-lines", "300", "--distinct-ids", "500", "--multi-valued-fields", "3", "--seed", "4"])
        self.train(["--train-data", self.path("train.tsv"), "--test-data", self.path("test.tsv"),
                    "--embedding-pool", "mean", "--model", "dot 26 4, dense 16, relu, dense 2"])
        # Criteo's 39 columns (no label), gzip'd: the same rows to score.
        with open(self.path("test.tsv")) as f, gzip.open(self.path("test-39.tsv.gz"), "wt") as g:
            for line in f:
                g.write(line.split("\t", 1)[1])
        exports = self.check_all([self.path("test.tsv"), self.path("test-39.tsv.gz")])
        # The arrays themselves: IDs increasing as uint64, a row per ID, the dense variables as model.json lists.
        npz = np.load(exports[0])
        model = json.loads(npz["model.json"])
        ids, rows = npz["embedding.ids.ids"], npz["embedding.ids.rows"]
        self.assertEqual(ids.dtype, np.int64)
        self.assertEqual(rows.dtype, np.float32)
        self.assertEqual(rows.shape, (len(ids), 4))
        self.assertTrue(np.all(np.diff(ids.view(np.uint64).astype(np.float64)) > 0))
        for v in model["variables"]:
            self.assertEqual(list(npz[v["name"]].shape), v["shape"])
        self.assertEqual(model["export"]["reader"], "criteo")

    def test_schema_csv_with_strings_lists_header_per_field_tables_and_bottom_block(self):
        rng = random.Random(3)
        oses, tags = ["android", "ios", "web", "tv"], ["sport", "news", "music", "games", "kids", "food"]

        def row(labelled):
            os_, site, ts = rng.choice(oses + [""]), rng.randint(-5, 60), rng.sample(tags, rng.randint(1, 3))
            price, age = round(rng.uniform(-2, 90), 3), rng.randint(15, 80)
            click = int((os_ == "ios") + ("sport" in ts) + (site % 3 == 0) + rng.random() > 1.5)
            cells = {"clicked": str(click), "price": str(price), "age": str(age), "os": f'"{os_}"', "site": str(site),
                     "tags": "|".join(ts), "comment": "x"}
            order = ["tags", "comment", "os", "clicked", "age", "site", "price"]  # another order than the schema's
            return ",".join(cells[c] for c in order if labelled or c != "clicked")

        for name, n, labelled in (("train.csv", 1500, True), ("test.csv", 200, True)):
            with open(self.path(name), "w") as f:
                f.write(",".join(c for c in ["tags", "comment", "os", "clicked", "age", "site", "price"]
                                 if labelled or c != "clicked") + "\n")
                for _ in range(n):
                    f.write(row(labelled) + "\n")
        # The test rows again without their label column, gzip'd (input to --predict only).
        with open(self.path("test.csv")) as f, gzip.open(self.path("unlabelled.csv.gz"), "wt") as g:
            for line in f:
                cells = line.rstrip("\n").split(",")
                g.write(",".join(cells[:3] + cells[4:]) + "\n")
        schema = os.path.join(ROOT, "configs", "ctr_schema.json")
        self.train(["--schema", schema, "--train-data", self.path("train.csv"), "--test-data", self.path("test.csv"),
                    "--embedding-tables", "per-field", "--embedding-pool", "sum", "--loss", "bce",
                    "--model", "bottom 2(dense 4), dot 4 4, dense 8, relu, dense 1"])
        exports = self.check_all([self.path("test.csv"), self.path("unlabelled.csv.gz")], ["--schema", schema])
        model = json.loads(np.load(exports[1].replace(".safetensors", ".npz"))["model.json"])
        self.assertEqual(model["export"]["reader"], "schema")
        self.assertEqual([c["name"] for c in model["export"]["features"]["columns"]],
                         [c["name"] for c in json.load(open(schema))["columns"]])
        self.assertEqual([t["name"] for t in model["export"]["tables"]], ["os", "site", "tags"])

    @unittest.skipUnless(has_torch(), "torch is not installed")
    def test_pytorch_loads_the_safetensors_file_with_the_safetensors_package(self):
        try:
            from safetensors import safe_open
            from safetensors.torch import load_file
        except ImportError:
            self.skipTest("the safetensors package is not installed")
        run([sys.executable, os.path.join(ROOT, "tools", "ctr_gen.py"), "--out-dir", self.work, "--train-lines", "500",
             "--test-lines", "50", "--distinct-ids", "100", "--seed", "2"])
        self.train(["--train-data", self.path("train.tsv"), "--test-data", self.path("test.tsv"),
                    "--model", "dense 8, relu, dense 2"])
        path = self.export(self.path("m"), self.path("m.safetensors"), "safetensors")
        tensors = load_file(path)
        npz = np.load(self.export(self.path("m"), self.path("m.npz"), "npz-arrays"))
        self.assertEqual(sorted(tensors), sorted(k for k in npz.files if k != "model.json"))
        for k, t in tensors.items():
            self.assertTrue(np.array_equal(t.numpy(), npz[k]), k)
        with safe_open(path, "pt") as f:
            in_metadata, in_npz = json.loads(f.metadata()["pstrain_model"]), json.loads(npz["model.json"])
        self.assertEqual((in_metadata["export"].pop("format"), in_npz["export"].pop("format")), ("safetensors", "npz-arrays"))
        self.assertEqual(in_metadata, in_npz)


if __name__ == "__main__":
    missing = [b for b in ("pstrain-ps", "pstrain-worker", "pstrain-export") if not os.access(os.path.join(BUILD, b), os.X_OK)]
    if missing:
        print(f"SKIP: {', '.join(missing)} not built in {BUILD} (set PSTRAIN_BUILD_DIR)")
        sys.exit(77)
    unittest.main()
