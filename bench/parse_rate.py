#!/usr/bin/env python3
"""The CTR readers' parsing rate: MB/s per worker for 1 and 2 workers (issue 47).

A CTR training file is parsed once, streaming, into a binary cache in --cache-dir before a worker
takes its first step (docs/data.md, "Memory and the cache directory"); this bench times that parse.
It writes a file of about --mb MB with tools/ctr_gen.py (Criteo TSV), and from it the same rows as
a CSV with a header read through a --schema (label, I1..I13 integer log1p, C1..C26 hex IDs: the
Criteo preset's columns, comma-separated), and as Parquet where pstrain-worker was built with it
(it links libparquet; else the output says Parquet is not run). For each format
and each worker count it starts that many pstrain-worker processes together on an empty cache
directory (as launch.sh starts a job's workers: each parses the file itself), with a PS address
nobody serves, and takes from each worker's log the time from its "parsing <file>" line to its next
line (the log's millisecond clock), then stops it (a worker opens its data before it connects).

    MB/s per worker = the file's bytes / 1e6 / that worker's parse seconds

(the table gives the slowest and fastest worker of each run; --repeat runs, the median of each).

    python3 bench/parse_rate.py [--mb 64] [--workers 1,2] [--formats tsv,csv,parquet] [--repeat 1]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ranks import machine, missing_binary  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BYTES_PER_LINE = 256  # tools/ctr_gen.py's default lines, about
LOG_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) ")


def die(message, code=2):
    print(f"parse_rate: {message}", file=sys.stderr)
    sys.exit(code)


def has_parquet(worker):
    """Whether the binary links Arrow's Parquet library (a build with PSTRAIN_PARQUET on, docs/data.md)."""
    out = subprocess.run(["ldd", worker], capture_output=True, text=True).stdout
    return "libparquet" in out


def criteo_schema(path):
    columns = [{"name": "label", "type": "label"}]
    columns += [{"name": f"I{i}", "type": "numeric", "integer": True, "transform": "log1p"} for i in range(1, 14)]
    columns += [{"name": f"C{i}", "type": "categorical", "ids": "hex"} for i in range(1, 27)]
    import json
    with open(path, "w") as f:
        json.dump({"delimiter": "comma", "header": True, "columns": columns}, f)


def write_csv(tsv, csv):
    names = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    with open(tsv) as src, open(csv, "w") as dst:
        dst.write(",".join(names) + "\n")
        for line in src:
            dst.write(line.replace("\t", ","))


def write_parquet(csv, parquet):
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    options = pcsv.ConvertOptions(column_types={f"C{i}": "string" for i in range(1, 27)})
    pq.write_table(pcsv.read_csv(csv, convert_options=options), parquet)


def seconds(stamp):
    m = LOG_TIME.match(stamp)
    h, mi, s, ms = (int(g) for g in m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000.0


def parse_seconds(log, path):
    """From a worker's log: its "parsing <path>" line's time to the next line's."""
    lines = [line for line in log.splitlines() if LOG_TIME.match(line)]
    for i, line in enumerate(lines):
        if f" parsing {path} " in line and i + 1 < len(lines):
            return (seconds(lines[i + 1]) - seconds(line)) % 86400
    return None


def run_workers(args, data, test, schema, count, cache):
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    worker = os.path.join(args.build_dir, "pstrain-worker")
    procs, logs = [], []
    for index in range(count):
        cmd = [worker, "--train-data", data, "--test-data", test, "--embedding-dim", "8", "--model", "dense 2",
               "--num-workers", str(count), "--index", str(index), "--ps-hosts", "127.0.0.1:1", "--cache-dir", cache]
        cmd += ["--schema", schema] if schema else []
        log = open(os.path.join(cache, f"w{index}.log"), "w+")
        procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
        logs.append(log)
    results = [None] * count
    deadline = time.monotonic() + args.timeout
    while any(r is None for r in results) and time.monotonic() < deadline:
        for i, (proc, log) in enumerate(zip(procs, logs)):
            if results[i] is not None:
                continue
            log.seek(0)
            text = log.read()
            if " connecting to ps0" in text:  # the data is open
                results[i] = parse_seconds(text, data)
            elif proc.poll() is not None:
                results[i] = RuntimeError(f"worker {i} exited with {proc.returncode} before it connected:\n{text[-2000:]}")
        time.sleep(0.05)  # polling a log file, not synchronising anything
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()
    for log in logs:
        log.close()
    for r in results:
        if isinstance(r, Exception) or r is None:
            die(str(r) if r else f"no parse within --timeout {args.timeout:g} s", 1)
    return results


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=64, help="the TSV file's size in MB, about (default 64)")
    p.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    p.add_argument("--formats", default="tsv,csv,parquet", help="of tsv, csv (with --schema), parquet (default all)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each; the table gives medians (default 1)")
    p.add_argument("--build-dir", default=os.environ.get("PSTRAIN_BUILD_DIR", os.path.join(REPO, "build")),
                   help="pstrain's build directory (default $PSTRAIN_BUILD_DIR or build/)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take (default 600)")
    args = p.parse_args(argv)
    try:
        counts = [int(c) for c in args.workers.split(",")]
    except ValueError:
        die("--workers: comma-separated counts, e.g. 1,2")
    formats = [f for f in args.formats.split(",") if f]
    if args.mb <= 0 or args.repeat < 1 or any(c < 1 for c in counts) or set(formats) - {"tsv", "csv", "parquet"}:
        die("--mb and --repeat must be positive, --workers counts of at least 1, --formats of tsv, csv, parquet")
    if missing_binary(args.build_dir):
        die(missing_binary(args.build_dir))
    if "parquet" in formats and not has_parquet(os.path.join(args.build_dir, "pstrain-worker")):
        print("# parse_rate: parquet NOT RUN: this pstrain-worker was built without Parquet (PSTRAIN_PARQUET)")
        formats.remove("parquet")
    with tempfile.TemporaryDirectory(prefix="pstrain-parse-") as work:
        lines = max(int(args.mb * 1e6 / BYTES_PER_LINE), 1)
        gen = [sys.executable, os.path.join(REPO, "tools", "ctr_gen.py"), "--out-dir", work, "--train-lines",
               str(lines), "--test-lines", "100"]
        if subprocess.run(gen, capture_output=True).returncode != 0:
            die("tools/ctr_gen.py failed", 1)
        tsv, test = os.path.join(work, "train.tsv"), os.path.join(work, "test.tsv")
        schema = os.path.join(work, "criteo.json")
        files = {"tsv": (tsv, test, None)}
        if "csv" in formats or "parquet" in formats:
            criteo_schema(schema)
            write_csv(tsv, os.path.join(work, "train.csv"))
            write_csv(test, os.path.join(work, "test.csv"))
            files["csv"] = (os.path.join(work, "train.csv"), os.path.join(work, "test.csv"), schema)
        if "parquet" in formats:
            write_parquet(os.path.join(work, "train.csv"), os.path.join(work, "train.parquet"))
            write_parquet(os.path.join(work, "test.csv"), os.path.join(work, "test.parquet"))
            files["parquet"] = (os.path.join(work, "train.parquet"), os.path.join(work, "test.parquet"), schema)
        print(f"# machine: {machine(args.build_dir)}; load average {os.getloadavg()[0]:.2f}")
        print(f"# bench/parse_rate: {lines} lines of tools/ctr_gen.py; MB/s per worker = the file's MB / that "
              f"worker's parse seconds (its log); slowest and fastest worker; medians of {args.repeat}")
        print(f"{'format':<8} {'file_mb':>8} {'workers':>7} {'parse_s':>8} {'mb_s_slowest':>12} {'mb_s_fastest':>12}")
        for fmt in formats:
            data, test_file, fmt_schema = files[fmt]
            mb = os.path.getsize(data) / 1e6
            for count in counts:
                runs = [run_workers(args, data, test_file, fmt_schema, count, os.path.join(work, "cache"))
                        for _ in range(args.repeat)]
                slowest = statistics.median(max(r) for r in runs)
                fastest = statistics.median(min(r) for r in runs)
                print(f"{fmt:<8} {mb:>8.1f} {count:>7} {slowest:>8.2f} {mb / slowest:>12.1f} {mb / fastest:>12.1f}",
                      flush=True)
        print(f"# load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
