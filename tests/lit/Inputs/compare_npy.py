#!/usr/bin/python3
"""usage: compare_npy.py GOT.npy WANT.npy [TOLERANCE]  — succeeds when GOT matches WANT in shape
and max |GOT - WANT| <= TOLERANCE * max(|WANT|) (relative to the output's scale; 1e-4 unless
given); prints the error either way."""
import sys

import numpy as np

got, want = np.load(sys.argv[1]), np.load(sys.argv[2])
tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
if got.shape != want.shape:
    sys.exit(f"shape {got.shape} != expected {want.shape}")
scale = max(float(np.abs(want).max()), 1e-30)
error = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale
print(f"max error {error:.3g} of the output's scale (tolerance {tolerance:g})")
sys.exit(0 if error <= tolerance else 1)
