#!/usr/bin/python3
"""usage: compare_npy.py GOT.npy WANT.npy [TOLERANCE]  — succeeds when GOT matches WANT in shape
and max |GOT - WANT| <= TOLERANCE * max(|WANT|) (relative to the output's scale; 1e-4 unless
given; integers with tolerance 0 compare exactly, dtype included); prints the error either way.
       compare_npy.py --all GOT_DIR WANT_DIR [TOLERANCE]  — the same for every WANT_DIR/want_NAME.npy
against GOT_DIR/NAME.npy (at least one), one line each."""
import glob
import os
import sys

import numpy as np


def compare(got_path, want_path, tolerance):
    got, want = np.load(got_path), np.load(want_path)
    if got.shape != want.shape:
        print(f"{got_path}: shape {got.shape} != expected {want.shape}")
        return False
    if want.dtype.kind in "iub" and tolerance == 0:  # integers exactly (u64 does not fit a double)
        same = got.dtype == want.dtype and np.array_equal(got, want)
        print(f"{os.path.basename(got_path)}: {'equal' if same else 'differs from'} the expected {want.dtype} values")
        return same
    scale = max(float(np.abs(want).max()), 1e-30)
    error = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale
    print(f"{os.path.basename(got_path)}: max error {error:.3g} of the output's scale (tolerance {tolerance:g})")
    return error <= tolerance


if sys.argv[1] == "--all":
    got_dir, want_dir = sys.argv[2], sys.argv[3]
    tolerance = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-4
    wanted = sorted(glob.glob(os.path.join(want_dir, "want_*.npy")))
    if not wanted:
        sys.exit(f"no want_*.npy in {want_dir}")
    results = [compare(os.path.join(got_dir, os.path.basename(w)[len("want_"):]), w, tolerance) for w in wanted]
    sys.exit(0 if all(results) else 1)
tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
sys.exit(0 if compare(sys.argv[1], sys.argv[2], tolerance) else 1)
