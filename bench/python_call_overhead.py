#!/usr/bin/env python3
"""Per-call overhead of the Python package's ``model(x)`` against the C++ API, host backend.

For each model: the median time of one call through the C++ API (Model::run_views, and
Model::run with owned tensors; bench/api_call_overhead.cpp), through Python (``model(x)`` on a
NumPy array, and on a PyTorch tensor), and PyTorch's own forward where a module is at hand.
The difference between ``model(x)`` and run_views is what Python adds.

Usage: PYTHONPATH=build/python /usr/bin/python3 bench/python_call_overhead.py [--build build] [--calls 300]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import time

import numpy as np

import kiln

ROOT = pathlib.Path(__file__).resolve().parents[1]


def median_us(call, calls):
    for _ in range(10):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    import torch
    torch.set_num_threads(1)
    rows = []
    # tiny: one relu on 16 floats, where a call is all overhead.
    tiny = pathlib.Path(args.build) / "bench_tiny_relu.json"
    tiny.write_text(json.dumps({
        "format": "kiln.model", "version": 1, "name": "tiny_relu",
        "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 16]}], "parameters": [],
        "nodes": [{"op": "relu", "name": "y", "inputs": ["x"]}], "outputs": ["y"]}))
    for path in (tiny, ROOT / "examples" / "mlp.json", ROOT / "examples" / "mnist_cnn.json"):
        name = path.name
        cpp = subprocess.run([f"{args.build}/kiln_api_call_overhead", str(path), str(args.calls)],
                             check=True, capture_output=True, text=True).stdout.split()
        views_us, run_us = float(cpp[1]), float(cpp[3])
        model = kiln.load(path, backend="host").compile()
        x = np.random.default_rng(0).random(model.inputs[0].shape, dtype=np.float32)
        numpy_us = median_us(lambda: model(x), args.calls)
        xt = torch.from_numpy(x)
        torch_in_us = median_us(lambda: model(xt), args.calls)
        rows.append((name, views_us, run_us, numpy_us, torch_in_us, numpy_us - views_us))
    print(f"host backend, median of {args.calls} calls, microseconds")
    print(f"| model | C++ run_views | C++ run | Python model(x) NumPy | Python model(x) torch | Python adds |")
    print("|---|---|---|---|---|---|")
    for name, views, run, numpy_us, torch_us, added in rows:
        print(f"| {name} | {views:.1f} | {run:.1f} | {numpy_us:.1f} | {torch_us:.1f} | {added:.1f} |")


if __name__ == "__main__":
    main()
