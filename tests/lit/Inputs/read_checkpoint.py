"""Prints tensors of a kiln train checkpoint (safetensors), or compares two checkpoints.

usage: read_checkpoint.py FILE NAME...      one line per tensor: NAME DTYPE VALUES (small ones)
       read_checkpoint.py --same A B        whether the tensors A and B share are bitwise equal
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


if sys.argv[1] == "--same":
    a, b = read(sys.argv[2]), read(sys.argv[3])
    shared = sorted(set(a) & set(b))
    same = all(np.array_equal(a[k], b[k]) for k in shared)
    print(f"{len(shared)} shared tensors, bitwise equal: {same}")
else:
    tensors = read(sys.argv[1])
    for name in sys.argv[2:]:
        print(name, tensors[name].dtype, " ".join(f"{v:g}" for v in tensors[name].reshape(-1)))
