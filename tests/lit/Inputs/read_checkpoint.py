"""Prints tensors of a kiln train checkpoint (safetensors), or compares two checkpoints.

usage: read_checkpoint.py FILE NAME...      one line per tensor: NAME DTYPE VALUES (small ones)
       read_checkpoint.py --same A B        whether the tensors A and B share are bitwise equal
       read_checkpoint.py --pruned FILE     per pruned weight P: its zeros, and whether they are
                                            exactly where prune.mask.P is 0
       read_checkpoint.py --two-four FILE   per pruned weight: at most 2 nonzeros per 4 in a row
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return tensors


def pruned(tensors):
    return [(name[len("prune.mask."):], mask) for name, mask in sorted(tensors.items())
            if name.startswith("prune.mask.")]


if sys.argv[1] == "--pruned":
    tensors = read(sys.argv[2])
    for name, mask in pruned(tensors):
        w = tensors[name]
        exact = np.array_equal(w == 0, mask == 0)
        print(f"{name}: {100 * np.mean(w == 0):.1f} % zeros, {'masked exactly' if exact else 'NOT the mask'}")
elif sys.argv[1] == "--two-four":
    tensors = read(sys.argv[2])
    for name, mask in pruned(tensors):
        w = tensors[name]
        groups = (w.reshape(w.shape[0], -1, 4) != 0).sum(axis=-1)
        print(f"{name}: at most 2 nonzeros in every group of 4: {bool((groups <= 2).all())}")
elif sys.argv[1] == "--same":
    a, b = read(sys.argv[2]), read(sys.argv[3])
    shared = sorted(set(a) & set(b))
    same = all(np.array_equal(a[k], b[k]) for k in shared)
    print(f"{len(shared)} shared tensors, bitwise equal: {same}")
else:
    tensors = read(sys.argv[1])
    for name in sys.argv[2:]:
        print(name, tensors[name].dtype, " ".join(f"{v:g}" for v in tensors[name].reshape(-1)))
