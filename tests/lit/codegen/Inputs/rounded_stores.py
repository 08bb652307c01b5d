"""Inputs and checks for rounded_stores.test.

make DIR: the graph's inputs (x's batch statistics as mean and var, so xhat is what a forward
batch norm saw). check DIR: the host backend's fused results against its unfused ones (bit for
bit) and the reference's (the 16-bit ones within one rounding: |got - want| <= 2^-p |want| plus
the f32 sums' reordering, p = 7 for bf16 and 10 for f16)."""
import sys

import numpy as np

NAMES = ["dx16", "dscale", "dbias", "cx16", "cscale", "cbias", "ldx16", "ldxhat"]
MANTISSA = {"dx16": 7, "cx16": 10, "ldx16": 7}

mode, d = sys.argv[1], sys.argv[2]
if mode == "make":
    r = np.random.default_rng(5)
    x = r.standard_normal((4, 6, 9, 9)).astype("f4")
    inputs = {
        "dy": r.standard_normal((4, 6, 9, 9)), "x": x, "scale": 1 + 0.5 * r.standard_normal(6),
        "mean": x.mean(axis=(0, 2, 3)), "var": x.var(axis=(0, 2, 3)),
        "ly": r.standard_normal((12, 40)), "lx": r.standard_normal((12, 40)),
        "g": 1 + 0.5 * r.standard_normal(40),
    }
    for name, value in inputs.items():
        np.save(f"{d}/{name}.npy", np.asarray(value, dtype="f4"))
    sys.exit(0)

same = [n for n in NAMES
        if np.load(f"{d}/fused/{n}.npy").tobytes() == np.load(f"{d}/unfused/{n}.npy").tobytes()]
print("fused == unfused, bit for bit: " + " ".join(same))
bad = []
for name, p in MANTISSA.items():
    got = np.load(f"{d}/fused/{name}.npy").astype(np.float64)
    want = np.load(f"{d}/ref/{name}.npy").astype(np.float64)
    if not np.all(np.abs(got - want) <= 2.0 ** -p * np.abs(want) + 1e-5):
        bad.append(f"{name} off by {np.abs(got - want).max()}")
print("16-bit results within one rounding of the reference's" if not bad else "; ".join(bad))
