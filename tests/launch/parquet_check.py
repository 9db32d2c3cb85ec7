#!/usr/bin/env python3
"""Parquet read by a feature schema (docs/data.md, "Parquet").

With Parquet built (PSTRAIN_PARQUET_BUILT=ON, run by the Python with pyarrow that the build took
Arrow from): the same rows as a CSV file and as Parquet files (string categories, one of them
dictionary-encoded, int categories, a multi-valued column as '|'-separated text and as a list,
nulls where the CSV has empty fields, another column order, an ignored column, several row
groups) parse into byte-identical caches, and a launch.sh job (1 PS, 1 worker, the same seed)
trained on each prints the same figures; pstrain-worker --evaluate and --predict of an
unlabelled file give the same output. Each bad file's message names the file, the column (and
the row). Without Parquet built (OFF): a Parquet file is a usage error (exit 2) saying how to build
it in. PSTRAIN_KEEP=1 keeps the work directory.
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("PSTRAIN_BUILD_DIR") or os.path.join(ROOT, "build")
BUILT = os.environ.get("PSTRAIN_PARQUET_BUILT", "OFF") == "ON"
SCHEMA = os.path.join(ROOT, "configs", "ctr_schema.json")
WORKER = os.path.join(BUILD, "pstrain-worker")
if BUILT:
    import pyarrow as pa  # the build's own pyarrow: its absence is a failure, never a skip
    import pyarrow.parquet as pq


def run(argv, expect=0):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ, PSTRAIN_BUILD_DIR=BUILD))
    if p.returncode != expect:
        raise AssertionError(f"{' '.join(argv)} exited {p.returncode}, not {expect}:\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def make_rows(n, seed):
    rng = random.Random(seed)
    oses, tags = ["android", "ios", "web", "tv"], ["sport", "news", "music", "games", "kids"]
    rows = []
    for _ in range(n):
        os_ = rng.choice(oses + [None])
        ts = rng.sample(tags, rng.randint(0, 3))
        site = rng.randint(-5, 60)
        price = None if rng.random() < 0.1 else rng.uniform(-2, 90)
        age = rng.randint(15, 80)
        click = int((os_ == "ios") + ("sport" in ts) + (site % 3 == 0) + rng.random() > 1.5)
        rows.append({"clicked": click, "price": price, "age": age, "os": os_, "site": site, "tags": ts, "comment": "x"})
    return rows


def write_csv(path, rows, labelled):
    order = [c for c in ["tags", "comment", "os", "clicked", "age", "site", "price"] if labelled or c != "clicked"]
    text = {"tags": lambda v: "|".join(v), "os": lambda v: f'"{v}"' if v is not None else "",
            "price": lambda v: repr(v) if v is not None else ""}
    with open(path, "w") as f:
        f.write(",".join(order) + "\n")
        for r in rows:
            f.write(",".join(text.get(c, str)(r[c]) for c in order) + "\n")


def write_parquet(path, rows, labelled, tags_as_text=False):
    col = lambda c: [r[c] for r in rows]
    columns = {"price": pa.array(col("price"), pa.float64()), "site": pa.array(col("site"), pa.int32()),
               "os": pa.array(col("os"), pa.string()).dictionary_encode(), "age": pa.array(col("age"), pa.int16()),
               "tags": pa.array(["|".join(t) for t in col("tags")], pa.string()) if tags_as_text
               else pa.array([t or None for t in col("tags")], pa.list_(pa.string())),
               "comment": pa.array(col("comment"))}
    if labelled:
        columns["clicked"] = pa.array(col("clicked"), pa.int8())
    pq.write_table(pa.table(columns), path, row_group_size=97)


class ParquetTest(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="pstrain-parquet-")
        if not os.environ.get("PSTRAIN_KEEP"):
            self.addCleanup(shutil.rmtree, self.work, True)

    def path(self, *name):
        return os.path.join(self.work, *name)

    @unittest.skipIf(BUILT, "Parquet is built")
    def test_without_arrow_a_parquet_file_is_a_usage_error_naming_how_to_build_it(self):
        with open(self.path("t.parquet"), "wb") as f:
            f.write(b"PAR1" + bytes(32) + b"PAR1")
        write_csv(self.path("train.csv"), make_rows(100, 3), True)
        self.train("m", self.path("train.csv"), self.path("train.csv"), self.work, self.path("m"))
        out = run([WORKER, "--init-params", self.path("m"), "--schema", SCHEMA, "--cache-dir", self.work,
                   "--predict", self.path("t.parquet"), "--predictions", self.path("p.csv")], expect=2)
        self.assertIn("t.parquet is a Parquet file, but this pstrain was built without Parquet", out)
        self.assertIn("-DPSTRAIN_PARQUET=ON", out)

    def train(self, kind, train, test, cache, model):
        return run(["bash", os.path.join(ROOT, "launch", "launch.sh"), "--no-setup", "--run-dir", self.path(kind, "run"),
                    "--num-ps", "1", "--num-workers", "1", "--", "--schema", SCHEMA, "--train-data", train,
                    "--test-data", test, "--cache-dir", cache, "--embedding-dim", "4", "--embedding-tables", "per-field",
                    "--embedding-pool", "mean", "--loss", "bce", "--model", "dense 8, relu, dense 1", "--batch-size", "32",
                    "--epochs", "2", "--seed", "7", "--timeout", "60", "--save-params", model])

    def job(self, kind, train, test, unlabelled):
        """launch.sh trains on `train` (evaluating `test`); then --evaluate and --predict: the figures."""
        cache, model = self.path(kind, "cache"), self.path(kind, "m")
        os.makedirs(cache)
        log = self.train(kind, train, test, cache, model)
        figures = re.findall(r"test_\w+=\S+", log)
        self.assertIn("test_auc", " ".join(figures), log)
        evaluated = run([WORKER, "--init-params", model, "--schema", SCHEMA, "--cache-dir", cache, "--evaluate",
                         "--test-data", test])
        run([WORKER, "--init-params", model, "--schema", SCHEMA, "--cache-dir", cache, "--predict", unlabelled,
             "--predictions", self.path(kind, "p.csv")])
        with open(self.path(kind, "p.csv")) as f:
            predictions = f.read()
        caches = {}
        for name in sorted(os.listdir(cache)):
            with open(os.path.join(cache, name), "rb") as f:
                caches[name.split(".")[0]] = f.read()
        return figures, re.findall(r"test_\w+=\S+|records=\d+", evaluated), predictions, caches

    @unittest.skipUnless(BUILT, "Parquet is not built")
    def test_csv_and_parquet_give_the_same_caches_and_figures(self):
        train, test = make_rows(1200, 1), make_rows(300, 2)
        os.makedirs(self.path("csv"))
        os.makedirs(self.path("pq"))
        for name, rows, labelled in (("train", train, True), ("test", test, True), ("unlabelled", test, False)):
            write_csv(self.path("csv", name), rows, labelled)
            write_parquet(self.path("pq", name), rows, labelled, tags_as_text=name == "test")
        csv = self.job("csv", self.path("csv", "train"), self.path("csv", "test"), self.path("csv", "unlabelled"))
        par = self.job("pq", self.path("pq", "train"), self.path("pq", "test"), self.path("pq", "unlabelled"))
        self.assertEqual(sorted(csv[3]), ["test", "train", "unlabelled"])
        for name in csv[3]:
            with self.subTest(cache=name):
                self.assertEqual(csv[3][name], par[3][name])
        self.assertEqual(csv[0], par[0])  # the job's last test figures
        self.assertEqual(csv[1], par[1])  # --evaluate's
        self.assertIn("records=300", csv[1])
        self.assertEqual(csv[2], par[2])  # --predict's file
        self.assertEqual(len(csv[2].splitlines()), 301)

    def bad(self, columns, needle):
        pq.write_table(pa.table(columns), self.path("bad.parquet"))
        out = run([WORKER, "--init-params", self.path("m"), "--schema", SCHEMA, "--cache-dir", self.work,
                   "--evaluate", "--test-data", self.path("bad.parquet")], expect=1)
        self.assertIn(self.path("bad.parquet") + ": " + needle, out)

    @unittest.skipUnless(BUILT, "Parquet is not built")
    def test_each_bad_file_names_the_file_the_column_and_the_row(self):
        good = {"clicked": pa.array([1, 0], pa.int64()), "price": pa.array([1.5, None]), "age": pa.array([3, 4]),
                "os": pa.array(["a", None]), "site": pa.array([1, 2]), "tags": pa.array([["x"], ["y", "z"]])}
        cases = [({"age": None}, 'the file lacks the schema\'s column(s) "age" (--schema ' + SCHEMA +
                  '; the file\'s 5 columns: "clicked", "price", "os", "site", "tags")'),
                 ({"age": pa.array([1.0, 2.0])}, 'column "age" is double, but the schema\'s numeric column needs an integer type'),
                 ({"price": pa.array(["1", "2"])}, 'column "price" is string, but the schema\'s numeric column needs'),
                 ({"clicked": pa.array(["1", "0"])}, 'column "clicked" is string, but the schema\'s label column needs'),
                 ({"tags": pa.array([[["x"]], []])}, 'column "tags" is list<element: list<element: string>>, but the schema\'s categorical '
                  "column needs a string, binary or integer type, or a list of one"),
                 ({"clicked": pa.array([1, None])}, 'row 2: column "clicked" is null'),
                 ({"clicked": pa.array([1, 2])}, 'row 2: column "clicked" 2 is not 0 or 1'),
                 ({"price": pa.array([float("nan"), 1.0])}, 'row 1: column "price" nan is not a finite number'),
                 ({"site": pa.array(["7", "x"])}, 'row 2: column "site" "x" is not an integer'),
                 ({"tags": pa.array([["x", None], ["y"]])}, 'row 1: column "tags": value 2 of 2 is null'),
                 ({"tags": pa.array([["x", ""], ["y"]])}, 'row 1: column "tags": value 2 of 2 is empty')]
        write_parquet(self.path("good.parquet"), make_rows(100, 3), True)
        self.train("m", self.path("good.parquet"), self.path("good.parquet"), self.work, self.path("m"))
        for change, needle in cases:
            with self.subTest(needle=needle):
                columns = {k: v for k, v in {**good, **change}.items() if v is not None}
                self.bad(columns, needle)


if __name__ == "__main__":
    if not os.access(WORKER, os.X_OK):
        print(f"pstrain-worker not built in {BUILD} (set PSTRAIN_BUILD_DIR)")
        sys.exit(1)
    unittest.main()
