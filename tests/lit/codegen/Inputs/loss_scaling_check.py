"""Reads the host and reference outputs of tests/lit/codegen/loss_scaling.ir: the scaler's
state per case, whether the parameters moved, and whether both backends agree: the scaler's
state and a skipped step bit for bit, Adam's arithmetic within 1e-6 (float on the host, double
rounded once in the reference)."""
import os
import sys

import numpy as np

out = sys.argv[1]
names = ["w1n", "m1n", "v1n", "w2n", "m2n", "v2n", "factor", "next_scale", "next_good",
         "next_skipped", "w1", "m2", "v2"]
same = True
for case in ("finite", "grow", "inf"):
    ref = {k: np.load(os.path.join(out, f"reference_{case}", k + ".npy")) for k in names}
    host = {k: np.load(os.path.join(out, f"host_{case}", k + ".npy")) for k in names}
    for k in names:
        exact = k in ("factor", "next_scale", "next_good", "next_skipped") or case == "inf"
        error = np.abs(ref[k].astype(np.float64) - host[k]).max()
        same = same and (np.array_equal(ref[k], host[k]) if exact else error < 1e-6)
    # Updated: every parameter and state tensor moved; skipped: each is exactly as it was.
    moved = [not np.array_equal(ref[k + "n"], ref[k]) for k in ("w1", "m2", "v2")]
    kept = [np.array_equal(ref[k + "n"], ref[k]) for k in ("w1", "m2", "v2")]
    state = "updated" if all(moved) else "kept" if all(kept) else "partly updated"
    print(f"{case}: factor {float(ref['factor'][0])} scale {float(ref['next_scale'][0])} "
          f"good {int(ref['next_good'][0])} skipped {int(ref['next_skipped'][0])} {state}")
print("host == reference:", same)
