#!/usr/bin/python3
"""Compares two training runs: their checkpoints (every tensor of the state) and their loss logs
(kiln train --loss-log). Prints the largest differences (absolute for the state, relative for
the losses); exits 1 when one exceeds its bound.

Usage: compare_runs.py A.safetensors A.csv B.safetensors B.csv STATE_BOUND LOSS_BOUND
A bound of 0 asks for bitwise equality."""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def load_state(path):
    raw = open(path, "rb").read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    base = 8 + size
    state = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        state[name] = np.frombuffer(raw[base + begin:base + end],
                                    dtype=DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return state


def load_curve(path):
    lines = [line for line in open(path).read().splitlines()[1:] if line]
    return np.array([float(line.split(",")[2]) for line in lines])


def main():
    a_state, a_log, b_state, b_log = sys.argv[1:5]
    state_bound, loss_bound = float(sys.argv[5]), float(sys.argv[6])
    a, b = load_state(a_state), load_state(b_state)
    if a.keys() != b.keys():
        sys.exit(f"the states differ in their tensors: {sorted(a.keys() ^ b.keys())}")
    worst, worst_name, equal = 0.0, "", 0
    for name in sorted(a):
        equal += bool(np.array_equal(a[name], b[name]))
        if a[name].size:
            diff = float(np.max(np.abs(a[name].astype(np.float64) - b[name].astype(np.float64))))
            if diff > worst:
                worst, worst_name = diff, name
    a_curve, b_curve = load_curve(a_log), load_curve(b_log)
    if len(a_curve) != len(b_curve):
        sys.exit(f"the loss logs have {len(a_curve)} and {len(b_curve)} steps")
    # Relative: a loss near 2.3 has f32 steps of 2.4e-7.
    loss_diff = float(np.max(np.abs(a_curve - b_curve) / np.maximum(1.0, np.abs(a_curve))))
    print(f"  state: {equal}/{len(a)} tensors bitwise equal, largest difference {worst:.3g}"
          f"{' (' + worst_name + ')' if worst_name else ''}; loss curve: {len(a_curve)} steps, "
          f"largest relative difference {loss_diff:.3g}")
    if worst > state_bound or loss_diff > loss_bound:
        sys.exit(f"  beyond the bounds: state {state_bound:g}, loss {loss_bound:g}")


if __name__ == "__main__":
    main()
