#!/usr/bin/python3
"""ResNet-50 and GPT with 2:4 weights on sparse tensor cores: what kiln emits and what the cost model says.

Usage: /usr/bin/python3 bench/sparse_tensor_cores.py [--kiln build/kiln] [--batch 32] [--out DIR]

For examples/resnet50.json (batch `--batch`) and examples/gpt.json (one sequence of 128 tokens,
the batch its reshapes fix), writes the model's parameters (its initializers' distributions, seeded) with every
conv and dense weight whose rows hold a multiple of 4 values projected onto 2:4 (the 2 largest
magnitudes of every 4 along a row, as `kiln train --prune-pattern=2:4` leaves them; GPT's
embeddings, which a gather reads, stay) to a safetensors file, then compares `kiln inspect
--precision=bf16 --library=none --arch sm_90` of the model with the default pipeline (2:4
convolutions and dense layers compressed, mma.sp) against the same pipeline without
sparsify-two-four (dense mma.sync), and counts the tensor-core instructions in the PTX. No GPU:
the times are kiln's cost model of an H100 SXM (docs/inspect.md).
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

DENSE_PIPELINE = ("canonicalize,fold-batch-norm,constant-fold,cse,fuse-gelu,fuse-attention,autocast{to=bf16},"
                  "constant-fold,dce,fuse-attention-views,split-k,fuse-conv-bias-relu,fuse-gemm-views,"
                  "fuse-norm-residual,fuse-norm-prologue,fuse-elementwise,plan-memory")


def initial(parameter, rng):
    shape, init = parameter["shape"], parameter["init"]["kind"]
    if init == "zeros":
        return np.zeros(shape, np.float32)
    if init == "ones":
        return np.ones(shape, np.float32)
    fan_in = int(np.prod(shape[1:]))
    if init == "he_normal":
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    limit = np.sqrt(6.0 / (fan_in + shape[0]))
    return rng.uniform(-limit, limit, shape).astype(np.float32)


def two_four(w):
    rows = w.reshape(w.shape[0], -1)
    if w.ndim < 2 or rows.shape[1] % 4:
        return w
    groups = rows.reshape(rows.shape[0], -1, 4)
    order = np.argsort(-np.abs(groups), axis=2, kind="stable")
    mask = np.zeros_like(groups, bool)
    np.put_along_axis(mask, order[:, :, :2], True, axis=2)
    return np.where(mask, groups, 0).reshape(w.shape).astype(np.float32)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def inspect(kiln, model, passes):
    command = [kiln, "inspect", model, "--precision=bf16", "--library=none", "--arch", "sm_90", "--format=json"]
    report = json.loads(subprocess.run(command + (["--passes=" + passes] if passes else []), check=True,
                                       capture_output=True, text=True).stdout)
    ptx = subprocess.run([kiln, "emit", model, "--precision=bf16", "--library=none", "--emit=ptx"] +
                         (["--passes=" + passes] if passes else []), check=True, capture_output=True, text=True).stdout
    return report, ptx


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--kiln", default=os.path.join(root, "build", "kiln"))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=None, help="directory for the weights and model (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="kiln_sparse_")
    os.makedirs(out, exist_ok=True)
    for name in ("resnet50", "gpt"):
        compare(args, root, out, name)


def compare(args, root, out, name):
    model = json.load(open(os.path.join(root, "examples", name + ".json")))
    rng = np.random.default_rng(0)
    embeddings = {node["inputs"][0] for node in model["nodes"] if node["op"] == "gather"}
    weights = {}
    for p in model["parameters"]:
        weights[p["name"]] = initial(p, rng) if p["name"] in embeddings else two_four(initial(p, rng))
        p.pop("init")
    write_safetensors(os.path.join(out, name + "_2_4.safetensors"), weights)
    model["weights"] = os.path.join(out, name + "_2_4.safetensors")
    if name == "resnet50":  # gpt.json's reshapes fix its batch of one sequence
        model["inputs"][0]["shape"][0] = args.batch
    batch = model["inputs"][0]["shape"][0]
    path = os.path.join(out, name + "_2_4.json")
    json.dump(model, open(path, "w"))

    print(f"{name}, batch {batch}, weights projected onto 2:4, --precision=bf16 --library=none, "
          f"modeled H100 SXM (sm_90)")
    rows = []
    for label, passes in (("dense mma.sync (without sparsify-two-four)", DENSE_PIPELINE), ("default pipeline", None)):
        report, ptx = inspect(args.kiln, path, passes)
        kernels = report["kernels"]
        sparse = [k for k in kernels if "sparse" in k.get("unit", "")]
        rows.append((label, len(kernels), len(sparse), report["totals"]["modeled_seconds"],
                     len(re.findall(r"\bmma\.sp::ordered_metadata", ptx)), len(re.findall(r"\bmma\.sync\.aligned", ptx)),
                     sum(k["modeled_seconds"] for k in sparse)))
    print(f"{'':44} {'kernels':>8} {'sparse':>7} {'modeled':>10} {'mma.sp':>7} {'mma.sync':>9}")
    for label, count, sparse, seconds, sp, dense, _ in rows:
        print(f"{label:44} {count:8} {sparse:7} {seconds * 1e3:8.3f} ms {sp:7} {dense:9}")
    print(f"the sparse kernels' share of the default pipeline's time: {rows[1][6] * 1e3:.3f} ms\n")


if __name__ == "__main__":
    sys.exit(main())
