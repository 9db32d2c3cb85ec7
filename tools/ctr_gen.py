#!/usr/bin/env python3
"""Synthetic CTR data in Criteo's TSV format, with labels from a hidden model that can be learned.

Writes OUT_DIR/train.tsv and OUT_DIR/test.tsv (.tsv.gz with --gzip): one record a line, 40
tab-separated fields: the label (0/1), I1..I13 (integers, some negative, some empty) and
C1..C26 (8 lower-case hex digits, some empty), exactly as Criteo's files (docs/data.md).
With --multi-valued-fields K, the last K categorical fields (C27-K..C26) each list 1 to
--max-values IDs separated by ',' (the count uniform, each ID drawn as any other), the form of a
multi-valued field that pstrain reads (docs/data.md), and their effect on the logit is the mean
(or, with --multi-pool sum, the sum) of their IDs' effects.

The hidden model is a logistic one:
  logit = bias + sum_j a_j * log(1 + max(I_j, 0))          (a few dense effects)
               + sum_k effect(k, C_k)                        (one effect per ID of every field;
                                                              a list's: the mean or sum of its IDs')
               + sum_(k,l) in PAIRS effect(k, l, C_k, C_l)   (a few pairwise interactions; a list
                                                              takes part by its first ID)
  p = sigmoid(logit); label ~ Bernoulli(p), then flipped with probability --noise.
Per-ID effects are drawn from a hash of (seed, field, id), so no table of 10^9 IDs is stored.
IDs of field k are Zipf-distributed over --distinct-ids ranks (the continuous bounded power law,
rounded down), each rank mapped to a distinct 32-bit ID by a per-field bijection.

Prints the hidden model's own AUC on the test file (its probabilities against the test labels,
exact, ties counted half) as `ceiling_auc=...`: no model can expect to do better. The output is
the same, byte for byte, for the same flags and --seed.

Example:  tools/ctr_gen.py --out-dir /tmp/ctr --train-lines 100000 --test-lines 20000 --seed 3
"""
import argparse
import gzip
import math
import os
import random
import sys

FIELDS_DENSE = 13
FIELDS_CAT = 26
MASK64 = (1 << 64) - 1
MAX_DISTINCT = 10**9


def mix64(x):
    """splitmix64's finalizer: a 64-bit hash of x."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def hashed_normal(*keys):
    """An approximately standard normal number drawn from a hash of the keys (four uniform
    16-bit parts summed: Irwin-Hall, variance 4/12)."""
    h = 0x9E3779B97F4A7C15
    for k in keys:
        h = mix64(h ^ (k & MASK64))
    s = (h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48)
    return (s / 65536.0 - 2.0) * math.sqrt(3.0)


class HiddenModel:
    def __init__(self, args):
        rng = random.Random(args.seed * 7919 + 1)
        self.seed = args.seed
        self.noise = args.noise
        self.missing = args.missing
        self.zipf = args.zipf
        self.distinct = args.distinct_ids
        # Fields listing several IDs: the last multi_valued_fields, 1..max_values IDs each.
        self.first_multi = FIELDS_CAT - args.multi_valued_fields
        self.max_values = args.max_values
        self.multi_mean = args.multi_pool == "mean"
        self.bias = -1.3
        # Dense fields: value ~ exp(N(mu, sd)) - 1 (counts), I2 sometimes negative as in Criteo.
        self.dense_mu = [rng.uniform(0.5, 3.0) for _ in range(FIELDS_DENSE)]
        self.dense_sd = [rng.uniform(0.5, 1.5) for _ in range(FIELDS_DENSE)]
        self.dense_coef = [0.0] * FIELDS_DENSE
        for j in rng.sample(range(FIELDS_DENSE), 4):
            self.dense_coef[j] = rng.choice([-1, 1]) * rng.uniform(0.15, 0.35)
        # Per-field scale of the ID effects: a few strong fields, most weak.
        self.cat_scale = [rng.choice([0.1, 0.2, 0.3, 0.6]) for _ in range(FIELDS_CAT)]
        self.pairs = []
        while len(self.pairs) < 3:
            k, l = sorted(rng.sample(range(FIELDS_CAT), 2))
            if (k, l) not in self.pairs:
                self.pairs.append((k, l))
        self.pair_scale = 0.5
        # Rank -> ID: x * odd + offset mod 2^32 is a bijection, so distinct ranks give distinct IDs.
        self.id_mul = [(mix64(self.seed * 131 + k) | 1) & 0xFFFFFFFF for k in range(FIELDS_CAT)]
        self.id_add = [mix64(self.seed * 137 + k + 1000) & 0xFFFFFFFF for k in range(FIELDS_CAT)]
        self.effect_cache = [dict() for _ in range(FIELDS_CAT)]
        # Zipf ranks: x = ((n + 1)^(1 - s) - 1) * u + 1)^(1 / (1 - s)) for u uniform in [0, 1)
        # (x = (n + 1)^u for s = 1), rank floor(x) in [1, n].
        e = 1.0 - self.zipf
        self.zipf_b = 0.0 if abs(e) < 1e-9 else 1.0 / e
        self.zipf_a = [0.0 if not self.zipf_b else (n + 1.0) ** e - 1.0 for n in self.distinct]

    def effect(self, k, ident):
        cache = self.effect_cache[k]
        v = cache.get(ident)
        if v is None:
            v = self.cat_scale[k] * hashed_normal(self.seed, k + 1, ident)
            if len(cache) < 1 << 20:
                cache[ident] = v
        return v

    def draw_id(self, k, rand):
        """One Zipf-drawn ID of field k: the inverse CDF of the bounded power law (zipf_a, zipf_b:
        see __init__), rounded down, then mapped to a 32-bit ID."""
        zipf_b = self.zipf_b
        x = (self.zipf_a[k] * rand() + 1.0) ** zipf_b if zipf_b else (self.distinct[k] + 1.0) ** rand()
        r = min(int(x), self.distinct[k]) - 1
        return (r * self.id_mul[k] + self.id_add[k]) & 0xFFFFFFFF

    def multi_valued(self, k, rng, fields, ids):
        """Field k as a list of 1..max_values IDs: appended to fields, its first ID to ids; returns
        its effect on the logit (the mean or sum of its IDs' effects)."""
        idents = [self.draw_id(k, rng.random) for _ in range(rng.randint(1, self.max_values))]
        ids[k] = idents[0]
        fields.append(",".join("%08x" % i for i in idents))
        total = sum(self.effect(k, i) for i in idents)
        return total / len(idents) if self.multi_mean else total

    def record(self, rng):
        """One line's fields (strings) and the hidden probability of label 1."""
        logit = self.bias
        fields = [None]
        for j in range(FIELDS_DENSE):
            if rng.random() < self.missing:
                fields.append("")
                continue
            if j == 1 and rng.random() < 0.05:
                x = -rng.randint(1, 3)
            else:
                x = int(math.exp(rng.gauss(self.dense_mu[j], self.dense_sd[j]))) - 1
            fields.append(str(x))
            if self.dense_coef[j]:
                logit += self.dense_coef[j] * (math.log1p(max(x, 0)) - self.dense_mu[j])
        ids = [None] * FIELDS_CAT
        rand, missing = rng.random, self.missing
        for k in range(FIELDS_CAT):
            if rand() < missing:
                fields.append("")
                continue
            if k >= self.first_multi:
                logit += self.multi_valued(k, rng, fields, ids)
                continue
            ident = self.draw_id(k, rand)
            ids[k] = ident
            fields.append("%08x" % ident)
            v = self.effect_cache[k].get(ident)
            logit += v if v is not None else self.effect(k, ident)
        for p, (k, l) in enumerate(self.pairs):
            if ids[k] is not None and ids[l] is not None:
                logit += self.pair_scale * hashed_normal(self.seed, 1000 + p, ids[k], ids[l])
        prob = 1.0 / (1.0 + math.exp(-logit))
        label = 1 if rng.random() < prob else 0
        if rng.random() < self.noise:
            label = 1 - label
        fields[0] = str(label)
        # With the flips, P(label 1) = noise + (1 - 2 noise) p: the same order as p.
        return "\t".join(fields), label, self.noise + (1.0 - 2.0 * self.noise) * prob


def auc(labels, scores):
    """Exact ROC AUC (Mann-Whitney U over average ranks, ties counted half)."""
    order = sorted(range(len(scores)), key=scores.__getitem__)
    rank_sum, pos, i = 0.0, 0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        avg = (i + j) / 2.0 + 1.0
        for t in range(i, j + 1):
            if labels[order[t]]:
                rank_sum += avg
                pos += 1
        i = j + 1
    neg = len(order) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)


def open_out(path, use_gzip):
    if use_gzip:
        raw = open(path, "wb")
        # No name or time in the gzip header, so the same seed gives the same bytes.
        return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6), raw
    return open(path, "wb"), None


def write_file(model, rng, path, lines, use_gzip, keep):
    out, raw = open_out(path, use_gzip)
    labels, probs, chunk = [], [], []
    positives = 0
    try:
        for _ in range(lines):
            line, label, prob = model.record(rng)
            positives += label
            chunk.append(line)
            if keep:
                labels.append(label)
                probs.append(prob)
            if len(chunk) == 4096:
                out.write(("\n".join(chunk) + "\n").encode())
                chunk = []
        if chunk:
            out.write(("\n".join(chunk) + "\n").encode())
    finally:
        out.close()
        if raw is not None:
            raw.close()
    return positives, labels, probs


def parse_distinct(text):
    values = [int(v) for v in text.split(",")]
    if len(values) == 1:
        values *= FIELDS_CAT
    if len(values) != FIELDS_CAT or not all(1 <= v <= MAX_DISTINCT for v in values):
        raise argparse.ArgumentTypeError(
            "give one number or 26 comma-separated numbers, each in [1, 10^9]")
    return values


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out-dir", default=".", help="where train.tsv and test.tsv go (default: .)")
    p.add_argument("--train-lines", type=int, default=100000, help="records in train.tsv (default 100000)")
    p.add_argument("--test-lines", type=int, default=20000, help="records in test.tsv (default 20000)")
    p.add_argument("--distinct-ids", type=parse_distinct, default=parse_distinct("100000"),
                   help="distinct IDs of each categorical field, up to 10^9: one number for all 26, "
                        "or 26 comma-separated (default 100000)")
    p.add_argument("--zipf", type=float, default=1.1,
                   help="exponent of the IDs' Zipf distribution (0: uniform; default 1.1)")
    p.add_argument("--noise", type=float, default=0.05,
                   help="probability that a label is flipped after it is drawn (default 0.05)")
    p.add_argument("--missing", type=float, default=0.05,
                   help="probability that a feature field is empty (default 0.05)")
    p.add_argument("--multi-valued-fields", type=int, default=0, metavar="K",
                   help="the last K of the 26 categorical fields (C27-K..C26) list several IDs "
                        "separated by ',' (default 0: every field one ID, as Criteo's files)")
    p.add_argument("--max-values", type=int, default=5, metavar="M",
                   help="a multi-valued field lists 1 to M IDs, the count uniform (default 5; at most "
                        "1024, what pstrain reads)")
    p.add_argument("--multi-pool", choices=("mean", "sum"), default="mean",
                   help="a multi-valued field's effect in the hidden model: the mean or the sum of its "
                        "IDs' effects (default mean)")
    p.add_argument("--seed", type=int, default=1, help="the hidden model and the records (default 1)")
    p.add_argument("--gzip", action="store_true", help="write train.tsv.gz and test.tsv.gz instead")
    args = p.parse_args(argv)
    if args.train_lines < 0 or args.test_lines < 1:
        p.error("--train-lines must be >= 0 and --test-lines >= 1")
    if args.zipf < 0 or not 0 <= args.noise < 0.5 or not 0 <= args.missing <= 1:
        p.error("--zipf must be >= 0, --noise in [0, 0.5), --missing in [0, 1]")
    if not 0 <= args.multi_valued_fields <= FIELDS_CAT or not 1 <= args.max_values <= 1024:
        p.error("--multi-valued-fields must be in [0, 26] and --max-values in [1, 1024]")
    os.makedirs(args.out_dir, exist_ok=True)
    model = HiddenModel(args)
    suffix = ".tsv.gz" if args.gzip else ".tsv"
    train = os.path.join(args.out_dir, "train" + suffix)
    test = os.path.join(args.out_dir, "test" + suffix)
    train_pos, _, _ = write_file(model, random.Random(args.seed * 2 + 1), train, args.train_lines,
                                 args.gzip, False)
    test_pos, labels, probs = write_file(model, random.Random(args.seed * 2 + 2), test, args.test_lines,
                                         args.gzip, True)
    print("train=%s lines=%d positives=%d" % (train, args.train_lines, train_pos))
    print("test=%s lines=%d positives=%d" % (test, args.test_lines, test_pos))
    print("ceiling_auc=%.6f" % auc(labels, probs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
