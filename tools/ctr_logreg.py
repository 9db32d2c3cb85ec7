#!/usr/bin/env python3
"""A reference for CTR data in Criteo's format: plain logistic regression, one weight per (field, ID).

What a linear model reaches on the same files as a pstrain CTR job (docs/sparse.md, "Training a
CTR model"), to judge the deep model's test AUC by: the features are the 13 dense values as
pstrain reads them (log(1 + max(x, 0)), 0 when empty) and one indicator per (field, ID) seen in
the training file (an empty field is an ID of its own; an ID only in the test file weighs 0);
trained one record at a time, in file order, by FTRL-Proximal (McMahan et al. 2013, Algorithm 1,
the same update as pstrain's `ftrl` table) or Adagrad. Prints the test AUC (exact, ties counted
half) and log loss after every epoch. Needs numpy.

Example:  tools/ctr_logreg.py --train /tmp/ctr/train.tsv --test /tmp/ctr/test.tsv --optimizer ftrl
"""
import argparse
import math
import sys
import time

import numpy as np

DENSE, CAT = 13, 26


def read(path):
    labels, dense, ids = [], [], []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            labels.append(int(parts[0]))
            dense.append([math.log1p(max(int(v), 0)) if v else 0.0 for v in parts[1:1 + DENSE]])
            ids.append([int(v, 16) if v else -1 for v in parts[1 + DENSE:]])
    return np.array(labels, np.float64), np.array(dense, np.float64), np.array(ids, np.int64)


def index_features(train_ids, test_ids):
    """Column k of a row: the index of (field k, ID) among the training file's pairs; the test
    file's unseen pairs get index -1."""
    key = lambda ids: ids * CAT + np.arange(CAT)  # (field, ID) -> one int64 (IDs are < 2^32)
    vocab, train_index = np.unique(key(train_ids), return_inverse=True)
    test_keys = key(test_ids)
    pos = np.clip(np.searchsorted(vocab, test_keys), 0, len(vocab) - 1)
    test_index = np.where(vocab[pos] == test_keys, pos, -1)
    return len(vocab), train_index.reshape(train_ids.shape), test_index


def auc(labels, scores):
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    starts = np.r_[0, np.flatnonzero(np.diff(s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    for a, b in zip(starts, ends):  # average rank of each group of ties (1-based)
        ranks[a:b] = (a + b + 1) / 2.0
    pos = labels[order] > 0.5
    n_pos, n_neg = pos.sum(), len(s) - pos.sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--train", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--optimizer", choices=["ftrl", "adagrad"], default="ftrl")
    p.add_argument("--lr", type=float, default=0.05, help="FTRL's alpha, or Adagrad's step (default 0.05)")
    p.add_argument("--l1", type=float, default=0.0, help="FTRL's l1 (default 0)")
    p.add_argument("--l2", type=float, default=0.0, help="FTRL's l2, or Adagrad's weight decay (default 0)")
    p.add_argument("--beta", type=float, default=1.0, help="FTRL's beta (default 1)")
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args(argv)

    start = time.monotonic()
    y, xd, train_ids = read(args.train)
    ty, txd, test_ids = read(args.test)
    n_ids, train_index, test_index = index_features(train_ids, test_ids)
    # Weights: the bias, the 13 dense ones, then one per (field, ID).
    n = 1 + DENSE + n_ids
    cols = np.hstack([np.zeros((len(y), 1), np.int64), np.tile(np.arange(1, 1 + DENSE), (len(y), 1)),
                      train_index + 1 + DENSE])
    vals = np.hstack([np.ones((len(y), 1)), xd, np.ones((len(y), CAT))])
    w, z, acc = np.zeros(n), np.zeros(n), np.zeros(n)
    print(f"# {len(y)} training records, {len(ty)} test records, {n_ids} (field, ID) pairs; "
          f"{args.optimizer} lr {args.lr:g} l1 {args.l1:g} l2 {args.l2:g}; read in {time.monotonic() - start:.1f} s")

    def evaluate():
        seen = test_index >= 0
        logit = w[0] + txd @ w[1:1 + DENSE] + np.where(seen, w[np.where(seen, test_index, 0) + 1 + DENSE], 0).sum(1)
        prob = np.clip(1 / (1 + np.exp(-logit)), 1e-7, 1 - 1e-7)
        return auc(ty, prob), float(-np.mean(ty * np.log(prob) + (1 - ty) * np.log(1 - prob)))

    for epoch in range(1, args.epochs + 1):
        t0 = time.monotonic()
        for i in range(len(y)):
            c, v = cols[i], vals[i]
            if args.optimizer == "ftrl":
                zc, nc = z[c], acc[c]
                wc = np.where(np.abs(zc) <= args.l1, 0.0,
                              -(zc - np.sign(zc) * args.l1) / ((args.beta + np.sqrt(nc)) / args.lr + args.l2))
                w[c] = wc
            else:
                wc = w[c]
            g = (1 / (1 + math.exp(-float(wc @ v))) - y[i]) * v
            if args.optimizer == "ftrl":
                sigma = (np.sqrt(nc + g * g) - np.sqrt(nc)) / args.lr
                z[c] = zc + g - sigma * wc
                acc[c] = nc + g * g
            else:
                g = g + args.l2 * wc
                acc[c] += g * g
                w[c] = wc - args.lr * g / (np.sqrt(acc[c]) + 1e-8)
        if args.optimizer == "ftrl":  # the weights as of the last z and n
            w = np.where(np.abs(z) <= args.l1, 0.0,
                         -(z - np.sign(z) * args.l1) / ((args.beta + np.sqrt(acc)) / args.lr + args.l2))
        test_auc, logloss = evaluate()
        print(f"epoch {epoch} test_auc={test_auc:.4f} test_logloss={logloss:.4f} "
              f"train_s={time.monotonic() - t0:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
