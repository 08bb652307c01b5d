"""Inputs of tests/lit/codegen/loss_scaling.ir, one folder per case: finite gradients, the
third finite step in a row (the scale grows), and an inf gradient (the step is skipped)."""
import os
import sys

import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(5)
g1 = (rng.standard_normal((4, 5)) * 1024).astype(np.float32)
g2 = (rng.standard_normal(7) * 1024).astype(np.float32)
bad = g2.copy()
bad[3] = np.inf
cases = {"finite": (0, g2), "grow": (2, g2), "inf": (1, bad)}
for case, (good, grad2) in cases.items():
    folder = os.path.join(out, case)
    os.makedirs(folder)
    arrays = {"scale": np.array([1024], np.float32), "good": np.array([good], np.int32),
              "skipped": np.array([2], np.int32), "step": np.array([7], np.int32),
              "g1": g1, "g2": grad2}
    for name, array in arrays.items():
        np.save(os.path.join(folder, name + ".npy"), array)
