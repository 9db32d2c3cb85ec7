#!/usr/bin/env python3
"""compare_params.py DIR_A DIR_B [TOLERANCE]: the parameters two jobs saved with --save-params.

Reads every DIR/<name>.npy (float32, C order, as pstrain writes them) with the standard library
and prints max|a-b| / max|a| over all variables; exits 0 when it is within TOLERANCE (default
1e-5, the launcher tests' mirrored-contract bound), 1 when not, 2 when the sets of files or
shapes differ or a file is unreadable."""

import ast
import os
import struct
import sys


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    header_len = struct.unpack("<H" if major == 1 else "<I", data[8:10] if major == 1 else data[8:12])[0]
    start = (10 if major == 1 else 12) + header_len
    header = ast.literal_eval(data[10 if major == 1 else 12:start].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"]:
        raise ValueError(f"{path}: expected little-endian float32 in C order, got {header}")
    count = 1
    for n in header["shape"]:
        count *= n
    return header["shape"], struct.unpack(f"<{count}f", data[start:start + 4 * count])


def main(a_dir, b_dir, tolerance=1e-5):
    names = sorted(n for n in os.listdir(a_dir) if n.endswith(".npy"))
    if not names or names != sorted(n for n in os.listdir(b_dir) if n.endswith(".npy")):
        print(f"compare_params: {a_dir} and {b_dir} hold different variables")
        return 2
    diff = scale = 0.0
    for name in names:
        (shape_a, a), (shape_b, b) = load(os.path.join(a_dir, name)), load(os.path.join(b_dir, name))
        if shape_a != shape_b:
            print(f"compare_params: {name}: shape {shape_a} vs {shape_b}")
            return 2
        diff = max(diff, max(abs(x - y) for x, y in zip(a, b)))
        scale = max(scale, max(abs(x) for x in a))
    relative = diff / scale if scale else diff
    print(f"compare_params: {len(names)} variables, max|a-b|/max|a| = {relative:.3g} (tolerance {tolerance:g})")
    return 0 if relative <= tolerance else 1


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        sys.exit(2)
    try:
        sys.exit(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) == 4 else 1e-5))
    except (OSError, ValueError, KeyError, SyntaxError) as e:
        print(f"compare_params: {e}")
        sys.exit(2)
