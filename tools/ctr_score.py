#!/usr/bin/env python3
"""The reference scorer of a pstrain CTR model's standard export (docs/models.md, "Standard
exports"): reads `pstrain-export --format npz-arrays` (.npz) or `--format safetensors` output,
reads Criteo TSV or `--schema` data as pstrain reads it (docs/data.md), and writes each record's
probabilities as `pstrain-worker --init-params DIR --predict DATA --predictions OUT` does.

    tools/ctr_score.py model.npz test.tsv --predictions p.csv
    tools/ctr_score.py model.safetensors rows.csv.gz --check p_pstrain.csv      # max |difference|, exit 1 past 1e-6
    tools/ctr_score.py model.safetensors rows.csv --torch --predictions p.npy      # the MLP in PyTorch

Needs numpy (Debian: python3-numpy); --torch needs torch (and reads a safetensors file with the
`safetensors` package when it is installed). Everything it computes is in this file, from the
export alone: the feature transform, the IDs (hex, FNV-1a 64 of strings, SplitMix64 of
integers), the keys, the rows of IDs the tables lack (their initial rows), pooling, and the
layers (dense, relu, tanh, sigmoid, dropout, dot, bottom).
"""
import argparse
import gzip
import json
import math
import struct
import sys
import zipfile

import numpy as np

M64 = (1 << 64) - 1
MISSING_ID = M64
GOLDEN = 0x9E3779B97F4A7C15


# --- IDs and keys (docs/sparse.md "Sharding", docs/data.md "Feature schema") ----------------------


def mix_id(x):
    """SplitMix64's finaliser of x + 0x9e3779b97f4a7c15, on uint64 arrays or Python ints."""
    if isinstance(x, np.ndarray):
        with np.errstate(over="ignore"):
            x = x.astype(np.uint64) + np.uint64(GOLDEN)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))
    x = (x + GOLDEN) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def string_id(s):
    """FNV-1a 64 of the value's bytes ("ids": "string")."""
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def init_rows(kind, seed, table, keys, dim):
    """init_row (shared/train/row_init.cc) for each key: uniform in (-1/sqrt(dim), 1/sqrt(dim)), in double, rounded once."""
    if kind == "zeros":
        return np.zeros((len(keys), dim), np.float32)
    scale = 1.0 / math.sqrt(dim)
    base = mix_id(np.uint64(mix_id(mix_id(seed) ^ table)) ^ keys.astype(np.uint64))
    with np.errstate(over="ignore"):
        j = np.arange(dim, dtype=np.uint64) * np.uint64(GOLDEN)
        u = mix_id(base[:, None] + j[None, :]) >> np.uint64(40)
    return ((2.0 * (u.astype(np.float64) + 0.5) * (1.0 / 16777216.0) - 1.0) * scale).astype(np.float32)


# --- the export ---------------------------------------------------------------------------------


def read_safetensors(path):
    """(arrays, metadata) of a safetensors file: 8-byte little-endian header length, JSON, bytes."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    types = {"F32": np.float32, "I64": np.int64, "F64": np.float64, "I32": np.int32}
    arrays = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        arrays[name] = np.frombuffer(data, types[t["dtype"]], (end - begin) // np.dtype(types[t["dtype"]]).itemsize,
                                     8 + n + begin).reshape(t["shape"])
    return arrays, metadata


def load_export(path, with_package=False):
    """(model.json as a dict, {name: array}) of an npz-arrays or safetensors export; with_package:
    a safetensors file read by the `safetensors` package (PyTorch's loader) where it is installed."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PK\x03\x04":
        with zipfile.ZipFile(path) as z:
            model = json.loads(z.read("model.json"))
        npz = np.load(path)
        arrays = {k: npz[k] for k in npz.files if k != "model.json"}
    else:
        arrays, metadata = read_safetensors(path)
        if with_package:
            try:
                from safetensors.numpy import load_file
            except ImportError:
                pass
            else:
                arrays = load_file(path)
        if "pstrain_model" not in metadata:
            sys.exit(f"{path}: not a pstrain export (no pstrain_model in the safetensors metadata)")
        model = json.loads(metadata["pstrain_model"])
    if "export" not in model or "embeddings" not in model:
        sys.exit(f"{path}: not the export of a CTR model (pstrain-export --format npz-arrays or safetensors)")
    return model, arrays


# --- the data (docs/data.md: Criteo, "Feature schema") -----------------------------------------


def parse_value_id(kind, v):
    if kind == "hex":
        return int(v, 16)
    if kind == "int":
        return mix_id(int(v) & M64)
    return string_id(v)


def read_records(path, schema):
    """(dense float32 [N, D], ids: per record, per field, a list of raw IDs)."""
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        lines = f.read().decode().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    delimiter = "," if schema["delimiter"] == "comma" else "\t"
    columns = schema["columns"]
    label = next((i for i, c in enumerate(columns) if c["type"] == "label"), None)
    position = None
    if schema["header"]:
        names = [f[1:-1] if delimiter == "," and len(f) >= 2 and f[0] == f[-1] == '"' else f
                 for f in lines.pop(0).rstrip("\r").split(delimiter)]
        position = [names.index(c["name"]) if c["name"] in names else None for c in columns]
    dense, ids = [], []
    for line in lines:
        fields = line.rstrip("\r").split(delimiter)
        if delimiter == ",":
            fields = [f[1:-1] if len(f) >= 2 and f[0] == f[-1] == '"' else f for f in fields]
        labelled = len(fields) == len(columns) if position is None else position[label] is not None if label is not None else False
        d, r = [], []
        for c, col in enumerate(columns):
            if col["type"] == "ignore" or col["type"] == "label":
                continue
            at = position[c] if position is not None else (c - 1 if (label is not None and not labelled and c > label) else c)
            f = fields[at]
            if col["type"] == "numeric":
                x = 0.0 if f == "" else float(int(f)) if col.get("integer") else float(f)
                if col.get("transform") == "log1p" and f != "":
                    x = math.log1p(max(x, 0.0))  # in double, then float32, as pstrain
                d.append(x)
            else:
                sep = col.get("separator")
                values = f.split(sep) if (sep and f) else [f]
                r.append([MISSING_ID] if f == "" else [parse_value_id(col["ids"], v) for v in values])
        dense.append(d)
        ids.append(r)
    return np.array(dense, np.float64).astype(np.float32).reshape(len(dense), -1), ids


# --- the model's input and layers ---------------------------------------------------------------


def model_input(model, arrays, dense, ids):
    """Per record: its dense features, then each field's (pooled) row: the input --predict builds."""
    e, x = model["embeddings"], model["export"]
    dim, per_field, n, fields = e["dim"], e["tables"] == "per-field", len(ids), e["fields"]
    tables = [(t["table"], arrays[t["ids"]].view(np.uint64), arrays[t["weights"]]) for t in x["tables"]]
    # Every occurrence's (record, field, key), in record, field, list order.
    rec, fld, raw = [], [], []
    for i, r in enumerate(ids):
        for f, values in enumerate(r):
            for v in values:
                rec.append(i), fld.append(f), raw.append(v)
    rec, fld, raw = np.array(rec, np.int64), np.array(fld, np.int64), np.array(raw, np.uint64)
    keys = raw if per_field else mix_id(raw ^ mix_id(fld.astype(np.uint64) + np.uint64(1)))
    rows = np.empty((len(keys), dim), np.float32)
    table_of = fld if per_field else np.zeros_like(fld)
    for t, table_ids, weights in tables:
        mine = np.nonzero(table_of == t)[0]
        at = np.searchsorted(table_ids, keys[mine])
        found = (at < len(table_ids)) & (table_ids[np.minimum(at, max(len(table_ids) - 1, 0))] == keys[mine]) if len(table_ids) else np.zeros(len(mine), bool)
        rows[mine[found]] = weights[at[found]]
        absent = mine[~found]
        rows[absent] = (np.zeros((len(absent), dim), np.float32) if e["min_count"] > 1
                        else init_rows(e["init"], e["seed"], t, keys[absent], dim))
    out = np.concatenate([dense, np.zeros((n, fields * dim), np.float32)], axis=1)
    # Pooling (docs/sparse.md, "Pooling"): the first row copied, the others added in list order in
    # float32; mean divides that sum by the count (one float division per element).
    d0 = dense.shape[1]
    count = np.zeros((n, fields), np.int64)
    np.add.at(count, (rec, fld), 1)
    seen = np.zeros((n, fields), bool)
    for k in range(len(keys)):
        i, f = rec[k], fld[k]
        cols = slice(d0 + f * dim, d0 + (f + 1) * dim)
        if seen[i, f]:
            out[i, cols] = out[i, cols] + rows[k]
        else:
            out[i, cols] = rows[k]
            seen[i, f] = True
    if e.get("pool", "sum") == "mean":
        for i, f in zip(*np.nonzero(count > 1)):
            cols = slice(d0 + f * dim, d0 + (f + 1) * dim)
            out[i, cols] = out[i, cols] / np.float32(count[i, f])
    return out


class NumpyOps:
    """float32, as pstrain computes: its rounding errors (large with raw numeric features) are then
    mostly the same ones, where float64 would differ from --predict by them."""

    def __init__(self, arrays):
        self.arrays = arrays

    def param(self, name):
        return np.asarray(self.arrays[name], np.float32)

    tensor = staticmethod(lambda x: np.asarray(x, np.float32))
    relu = staticmethod(lambda x: np.maximum(x, 0))
    tanh = staticmethod(np.tanh)
    sigmoid = staticmethod(lambda x: (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32))
    cat = staticmethod(lambda xs: np.concatenate(xs, axis=1))
    @staticmethod
    def softmax(z):
        e = np.exp(z.astype(np.float64) - z.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    numpy = staticmethod(lambda x: x.astype(np.float64))

    @staticmethod
    def pairs(v, f):
        i, j = np.triu_indices(f, 1)  # (0,1), (0,2), ..., (1,2), ...: the dot layer's order
        out = np.zeros((v.shape[0], len(i)), np.float32)
        for d in range(v.shape[2]):  # each product rounded, summed in element order, as the dot layer does
            out += v[:, i, d] * v[:, j, d]
        return out


class TorchOps:
    def __init__(self, arrays):
        import torch

        self.torch = torch
        self.arrays = arrays

    def param(self, name):
        return self.torch.as_tensor(np.array(self.arrays[name], np.float32))

    def tensor(self, x):
        return self.torch.as_tensor(x, dtype=self.torch.float32)

    def relu(self, x):
        return self.torch.relu(x)

    def tanh(self, x):
        return self.torch.tanh(x)

    def sigmoid(self, x):
        return self.torch.sigmoid(x)

    def cat(self, xs):
        return self.torch.cat(xs, dim=1)

    def softmax(self, z):
        return self.torch.softmax(z, dim=1)

    def numpy(self, x):
        return x.detach().numpy().astype(np.float64)

    def pairs(self, v, f):
        gram = self.torch.bmm(v, v.transpose(1, 2))
        i, j = np.triu_indices(f, 1)
        return gram[:, i, j]


def run_layers(layers, x, ops, variables):
    """The layer list of model.json on x; `variables` yields the weight and bias names in order."""
    for layer in layers:
        kind, args = layer["kind"], layer["args"]
        if kind == "dense":
            w, b = ops.param(next(variables)), ops.param(next(variables))
            x = x @ w + b  # pstrain's dense weight is [inputs, outputs]
        elif kind == "relu":
            x = ops.relu(x)
        elif kind == "tanh":
            x = ops.tanh(x)
        elif kind == "sigmoid":
            x = ops.sigmoid(x)
        elif kind == "dropout":
            pass  # scoring: no dropout
        elif kind == "dot":
            f, d = int(args[0]), int(args[1])
            v = x[:, x.shape[1] - f * d :].reshape(x.shape[0], f, d)
            x = ops.cat([x, ops.pairs(v, f)])
        elif kind == "bottom":
            k = int(args[0])
            x = ops.cat([run_layers(layer["layers"], x[:, :k], ops, variables), x[:, k:]])
        elif kind == "softmax":
            pass  # the output's softmax is applied below
        else:
            sys.exit(f"ctr_score.py: layer '{layer['text']}' ({kind}) is not one this reference scorer computes "
                     "(dense, relu, tanh, sigmoid, dropout, dot, bottom)")
    return x


def score(model, arrays, x, use_torch=False):
    ops = TorchOps(arrays) if use_torch else NumpyOps(arrays)
    names = iter(v for layer in model["layers"] for v in layer["variables"])
    z = run_layers(model["layers"], ops.tensor(x), ops, names)
    loss = model.get("loss", "softmax")
    p = ops.softmax(z) if loss == "softmax" else ops.sigmoid(z) if loss == "bce" else z
    return ops.numpy(p).astype(np.float32)


def read_predictions(path):
    if path.endswith(".npy"):
        return np.load(path).astype(np.float64)
    return np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("export", help="pstrain-export --format npz-arrays (.npz) or --format safetensors output")
    ap.add_argument("data", help="rows to score: Criteo TSV, or the model's --schema file format (plain or gzip)")
    ap.add_argument("--predictions", help="write the probabilities: .npy (records x outputs) or CSV (p0,p1,...)")
    ap.add_argument("--check", help="--predict's output for the same rows: print the largest difference")
    ap.add_argument("--tolerance", type=float, default=1e-6, help="--check's bound (default 1e-6): exit 1 past it")
    ap.add_argument("--torch", action="store_true", help="compute the layers in PyTorch instead of numpy (both float32)")
    a = ap.parse_args()
    model, arrays = load_export(a.export, with_package=a.torch)
    dense, ids = read_records(a.data, model["export"]["features"])
    x = model_input(model, arrays, dense, ids)
    p = score(model, arrays, x, a.torch)
    print(f"ctr_score: {len(p)} records x {p.shape[1]} outputs from {a.export}")
    if a.predictions:
        if a.predictions.endswith(".npy"):
            np.save(a.predictions, p)
        else:
            with open(a.predictions, "w") as f:
                f.write(",".join(f"p{c}" for c in range(p.shape[1])) + "\n")
                for row in p:
                    f.write(",".join(f"{float(v):.9g}" for v in row) + "\n")
    if a.check:
        q = read_predictions(a.check)
        if q.shape != p.shape:
            sys.exit(f"ctr_score: {a.check} holds {q.shape}, the scorer gave {p.shape}")
        diff = float(np.abs(q - p.astype(np.float64)).max()) if p.size else 0.0
        print(f"ctr_score: max |difference| from {a.check}: {diff:.3g} (tolerance {a.tolerance:g})")
        if not diff <= a.tolerance:
            sys.exit(1)


if __name__ == "__main__":
    main()
