"""Inputs for tensor_cores_norms.ir, and the check of kiln's TF32 results against the exact
ones: |got - exact| <= 2^-10 * sum |a b| + 1e-5 * sqrt(K) * (1 + |exact|) (docs/tensor-cores.md)."""
import os
import sys

import numpy as np


def main():
    mode, directory = sys.argv[1], sys.argv[2]
    names = ("x", "a", "w1", "w2", "gamma", "beta")
    if mode == "write":
        os.makedirs(directory, exist_ok=True)
        r = np.random.default_rng(11)
        shapes = {"x": (16896, 16), "a": (16896, 16), "w1": (128, 16), "w2": (16, 16),
                  "gamma": (16,), "beta": (16,)}
        for name in names:
            values = r.standard_normal(shapes[name]) * (0.1 if name.startswith("w") else 1)
            if name == "x":
                values = 2 + 3 * values  # a mean and a scale for the norm to remove
            np.save(os.path.join(directory, name + ".npy"), values.astype(np.float32))
        return
    v = {name: np.load(os.path.join(directory, name + ".npy")).astype(np.float64) for name in names}
    x = v["x"]
    mean = x.mean(axis=1, keepdims=True)
    n = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5) * v["gamma"] + v["beta"]
    checks = {
        "q": (n @ v["w1"].T, np.abs(n) @ np.abs(v["w1"]).T, 16),
        "o": (v["a"] @ v["w2"].T + n, np.abs(v["a"]) @ np.abs(v["w2"]).T + np.abs(n), 16),
    }
    for name, (exact, magnitude, terms) in checks.items():
        got = np.load(os.path.join(directory, "out", name + ".npy")).astype(np.float64)
        bound = 2.0 ** -10 * magnitude + 1e-5 * np.sqrt(terms) * (1 + np.abs(exact))
        excess = np.abs(got - exact) - bound
        worst = np.unravel_index(np.argmax(excess), excess.shape)
        if excess[worst] > 0:
            sys.exit(f"{name}{list(worst)}: {got[worst]} vs exact {exact[worst]}, beyond the TF32 bound {bound[worst]}")
        print(f"{name}: max error {np.abs(got - exact).max():.3g}, within the TF32 bound")


if __name__ == "__main__":
    main()
