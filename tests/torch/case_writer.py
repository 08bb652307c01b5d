"""Writing one differential-test case: inputs, PyTorch's float64 answer, a manifest entry.

Shared by gen_cases.py (the driver) and the per-family case modules. See gen_cases.py for the
file layout and why the oracle runs in float64.
"""
import json
import os

import numpy as np
import torch

CASES = []  # manifest entries, in generation order
OUT_DIR = "."


def start(out_dir):
    """Empties out_dir of an earlier run's files, so it holds exactly this run's cases."""
    global OUT_DIR
    OUT_DIR = out_dir
    os.makedirs(OUT_DIR, exist_ok=True)
    for entry in os.listdir(OUT_DIR):
        if entry.endswith(".npy") or entry == "cases.json":
            os.remove(os.path.join(OUT_DIR, entry))


def finish():
    """Writes the manifest; returns the number of cases."""
    with open(os.path.join(OUT_DIR, "cases.json"), "w") as f:
        json.dump(CASES, f, indent=1)
    return len(CASES)


FLOAT_DTYPES = (torch.float32, torch.float16)
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "i32": torch.int32,
                "i64": torch.int64, "bool": torch.bool, "u8": torch.uint8}


def kiln_dtype(t):
    return {v: k for k, v in TORCH_DTYPES.items()}[t.dtype]


def add_case(name, op, attrs, inputs, oracle, out_dtype=None):
    """Saves `inputs` and oracle(*inputs_in_float64) rounded to out_dtype (default: input 0's).

    An oracle of a multi-result op returns a tuple: the manifest's "expected" is then a list of
    files, <name>.out.npy for result 0 and <name>.out<i>.npy for result i; out_dtype may then be
    a list, one dtype per result.
    """
    assert all(c["name"] != name for c in CASES), f"duplicate case name {name}"
    # Inputs may be NumPy arrays of dtypes this PyTorch lacks (u16): saved and passed as they are.
    wide = [t.double() if isinstance(t, torch.Tensor) and t.dtype in FLOAT_DTYPES else t for t in inputs]
    result = oracle(*wide)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    out_dtype = out_dtype or kiln_dtype(inputs[0])
    out_dtypes = out_dtype if isinstance(out_dtype, list) else [out_dtype] * len(results)
    outputs = []
    for i, r in enumerate(results):
        outputs.append(f"{name}.out{i if i else ''}.npy")
        # Contiguous copies: NumPy saves a transposed view in Fortran order, which kiln rejects.
        expected = r.to(TORCH_DTYPES[out_dtypes[i]]).contiguous().numpy()
        np.save(os.path.join(OUT_DIR, outputs[-1]), expected)
    files = []
    for i, t in enumerate(inputs):
        files.append(f"{name}.in{i}.npy")
        np.save(os.path.join(OUT_DIR, files[-1]), t.contiguous().numpy() if isinstance(t, torch.Tensor) else t)
    CASES.append({"name": name, "op": op, "attrs": attrs, "inputs": files,
                  "expected": outputs if len(outputs) > 1 else outputs[0]})


def randn(*shape, scale=1.0):
    return torch.randn(shape, dtype=torch.float32) * scale


def positive(*shape):
    """Values in [0.1, 4.1): safe for log, sqrt, rsqrt and non-integer powers."""
    return torch.rand(shape, dtype=torch.float32) * 4 + 0.1


def randint(low, high, *shape, dtype=torch.int32):
    return torch.randint(low, high, shape, dtype=dtype)


def shape_tag(*shapes):
    return "_".join("x".join(map(str, s)) if len(s) else "scalar" for s in shapes)
