"""usage: vector_loads.py DIR — writes the inputs of vector_loads.ir (seeded normals) into DIR."""
import sys

import numpy as np

rng = np.random.default_rng(7)
shapes = {"x": (2, 70, 48), "y": (20, 30), "img": (2, 16, 8, 8), "odd": (2, 16, 7, 7), "p": (64, 64)}
for name, shape in shapes.items():
    np.save(f"{sys.argv[1]}/{name}.npy", rng.standard_normal(shape).astype(np.float32))
