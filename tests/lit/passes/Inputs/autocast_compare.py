"""Compares autocast runs of autocast.ir's graphs (argv[1]: the directory of its RUN lines).

The reference rounds to bf16 after every op; a fused kernel computes in float and rounds once,
at its store, and its GEMM sums in another order. Both round the same operands, so they differ
by the intermediate roundings one places and the other does not: at most one unit of bf16's
roundoff (u = 2^-8) of the scale per rounded intermediate that reaches the output, 3 here (the
GEMM's result, its epilogue's, the store): bound 3u (measured: under 1u). Against f32, every
GEMM's operands are rounded (2u per product) along a chain of up to 4 GEMMs: bound 8u.
Writes compare.txt, one line per comparison, and fails on the first out of bound.
"""
import os
import sys

import numpy as np

root = sys.argv[1]
U_BF16 = 2.0 ** -8
lines = []


def compare(graph, output, left, right, what, bound_units):
    a = np.load(os.path.join(root, left, output + ".npy")).astype(np.float64)
    b = np.load(os.path.join(root, right, output + ".npy")).astype(np.float64)
    assert a.shape == b.shape, (graph, output, a.shape, b.shape)
    scale = max(float(np.abs(b).max()), 1e-30)
    error = float(np.abs(a - b).max())
    bound = bound_units * scale
    lines.append(f"{graph} {output}: {what} within {error / scale:.2e} of the scale (bound {bound / scale:.2e})")
    assert error <= bound, lines[-1]


for output in ("res", "fc", "probs"):
    compare("cnn", output, "cnn_host", "cnn_ref", "host (bf16 units)", 3 * U_BF16)
for output in ("res", "fc", "probs"):
    compare("cnn", output, "cnn_fma", "cnn_ref", "host (FMA units)", 3 * U_BF16)
for output in ("y", "lse"):
    compare("block", output, "block_host", "block_ref", "host (bf16 units)", 3 * U_BF16)
for output in ("y", "lse"):
    compare("block", output, "block_fma", "block_ref", "host (FMA units)", 3 * U_BF16)
for output in ("y", "lse"):
    compare("block", output, "block_host", "block_f32", "bf16 against f32:", 8 * U_BF16)
with open(os.path.join(root, "compare.txt"), "w") as out:
    out.write("\n".join(lines) + "\n")
