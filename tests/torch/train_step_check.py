"""Whole-model training checks against PyTorch autograd and torch.optim.

For each model (an MLP and a small CNN with the seed CNN's ops, dropout included, and a token
classifier whose embedding table trains through gather_elements_grad and rms_norm_grad) this script
writes random weights, lets kiln build the training graph (`kiln opt --training-graph`), and
compares with the same model in PyTorch (float64):
  1. the loss and every parameter's gradient (kiln's autodiff pass, reference interpreter);
  2. the same on the host backend after fusion and memory planning;
  3. the parameters and Adam state after one optimizer step (append-optimizer) against
     torch.optim.Adam;
and trains the MLP (without dropout) for 14 steps with `kiln train`, AdamW, a warmup + cosine
learning-rate schedule and clipping by global norm, against torch.optim.AdamW, LambdaLR and
torch.nn.utils.clip_grad_norm_; and trains it with dynamic loss scaling from a scale that overflows
f32, against torch.optim.Adam over the steps the scaler did not skip.
Dropout masks come from a Python copy of kiln's Philox 4x32-10 stream (ir/philox.h), so the
comparison also checks that stream end to end.

Usage: train_step_check.py --kiln build/kiln --work DIR
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

BATCH = 4
MASK32 = 0xFFFFFFFF


# ---- Philox 4x32-10 (ir/philox.h) ----------------------------------------------------------
def philox_block(counter, key):
    c0, c1, c2, c3 = counter
    k0, k1 = key & MASK32, (key >> 32) & MASK32
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, \
                         ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return (c0, c1, c2, c3)


def dropout_mask(count, rate, seed, step):
    threshold = math.ceil(rate * 16777216.0)
    mask = np.zeros(count)
    for block in range((count + 3) // 4):
        words = philox_block((block & MASK32, block >> 32, step & MASK32, step >> 32), seed)
        for lane in range(4):
            i = block * 4 + lane
            if i < count:
                mask[i] = 1.0 if (words[lane] >> 8) >= threshold else 0.0
    return mask


# ---- files -----------------------------------------------------------------------------------
def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    size = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + size])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = {"F32": "<f4", "I32": "<i4", "I64": "<i8"}[entry["dtype"]]
        out[name] = np.frombuffer(blob[8 + size + begin:8 + size + end], dtype=dtype).reshape(
            entry["shape"])
    return out


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")
    return result.stdout


# ---- models ----------------------------------------------------------------------------------
def mlp():
    params = {"fc1.weight": (16, 36), "fc1.bias": (16,), "fc2.weight": (10, 16), "fc2.bias": (10,)}
    nodes = [
        {"op": "flatten", "name": "flatten", "inputs": ["image"]},
        {"op": "dense", "name": "fc1", "inputs": ["flatten", "fc1.weight", "fc1.bias"]},
        {"op": "relu", "name": "relu1", "inputs": ["fc1"]},
        {"op": "dropout", "name": "dropout", "inputs": ["relu1"], "attrs": {"rate": 0.25}},
        {"op": "dense", "name": "fc2", "inputs": ["dropout", "fc2.weight", "fc2.bias"]},
        {"op": "softmax", "name": "probs", "inputs": ["fc2"], "attrs": {"axis": -1}},
    ]

    def forward(p, x, masks):
        h = F.relu(F.linear(x.flatten(1), p["fc1.weight"], p["fc1.bias"]))
        h = h * masks["dropout"].reshape(h.shape) / 0.75
        return F.linear(h, p["fc2.weight"], p["fc2.bias"])
    return "train_mlp", (1, 1, 6, 6), params, nodes, forward, {"dropout": 0.25}


def cnn():
    params = {"conv1.weight": (4, 1, 3, 3), "conv1.bias": (4,), "conv2.weight": (6, 4, 3, 3),
              "conv2.bias": (6,), "fc1.weight": (16, 24), "fc1.bias": (16,),
              "fc2.weight": (10, 16), "fc2.bias": (10,)}
    nodes = [
        {"op": "conv2d", "name": "conv1", "inputs": ["image", "conv1.weight"]},
        {"op": "bias_add", "name": "conv1_bias", "inputs": ["conv1", "conv1.bias"]},
        {"op": "relu", "name": "relu1", "inputs": ["conv1_bias"]},
        {"op": "max_pool2d", "name": "pool1", "inputs": ["relu1"], "attrs": {"kernel": [2, 2]}},
        {"op": "conv2d", "name": "conv2", "inputs": ["pool1", "conv2.weight"]},
        {"op": "bias_add", "name": "conv2_bias", "inputs": ["conv2", "conv2.bias"]},
        {"op": "relu", "name": "relu2", "inputs": ["conv2_bias"]},
        {"op": "max_pool2d", "name": "pool2", "inputs": ["relu2"], "attrs": {"kernel": [2, 2]}},
        {"op": "flatten", "name": "flatten", "inputs": ["pool2"]},
        {"op": "dense", "name": "fc1", "inputs": ["flatten", "fc1.weight", "fc1.bias"]},
        {"op": "relu", "name": "relu3", "inputs": ["fc1"]},
        {"op": "dropout", "name": "dropout", "inputs": ["relu3"], "attrs": {"rate": 0.5}},
        {"op": "dense", "name": "fc2", "inputs": ["dropout", "fc2.weight", "fc2.bias"]},
        {"op": "softmax", "name": "probs", "inputs": ["fc2"], "attrs": {"axis": -1}},
    ]

    def forward(p, x, masks):
        h = F.max_pool2d(F.relu(F.conv2d(x, p["conv1.weight"], p["conv1.bias"])), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"])), 2)
        h = F.relu(F.linear(h.flatten(1), p["fc1.weight"], p["fc1.bias"]))
        h = h * masks["dropout"].reshape(h.shape) / 0.5
        return F.linear(h, p["fc2.weight"], p["fc2.bias"])
    return "train_cnn", (1, 1, 14, 14), params, nodes, forward, {"dropout": 0.5}


def embedding():
    """Token ids -> an embedding table (gather_elements on the table's rows, as ONNX Gather
    imports) -> rms_norm -> dense. Ids repeat (20 lookups in 7 rows), so rows sum several
    gradients."""
    vocab, tokens, width = 7, 5, 3
    params = {"embed.weight": (vocab, width), "norm.weight": (width,),
              "fc.weight": (10, tokens * width), "fc.bias": (10,)}
    nodes = [
        {"op": "reshape", "name": "ids", "inputs": ["tokens"], "attrs": {"shape": [BATCH * tokens, 1]}},
        {"op": "broadcast_to", "name": "ids_wide", "inputs": ["ids"],
         "attrs": {"shape": [BATCH * tokens, width]}},
        {"op": "gather_elements", "name": "embed", "inputs": ["embed.weight", "ids_wide"]},
        {"op": "rms_norm", "name": "norm", "inputs": ["embed", "norm.weight"], "attrs": {"epsilon": 1e-5}},
        {"op": "reshape", "name": "flat", "inputs": ["norm"], "attrs": {"shape": [BATCH, tokens * width]}},
        {"op": "dense", "name": "fc", "inputs": ["flat", "fc.weight", "fc.bias"]},
        {"op": "softmax", "name": "probs", "inputs": ["fc"], "attrs": {"axis": -1}},
    ]

    def forward(p, ids, masks):
        e = F.embedding(ids, p["embed.weight"])
        e = e * torch.rsqrt(e.pow(2).mean(-1, keepdim=True) + 1e-5) * p["norm.weight"]
        return F.linear(e.flatten(1), p["fc.weight"], p["fc.bias"])
    return "train_embedding", (BATCH, tokens), params, nodes, forward, {}, vocab


# ---- the check -------------------------------------------------------------------------------
# Element by element, |kiln - torch| <= atol + rtol * |torch|, per kind of result (a new kind is
# one line). kiln computes in float32 and rounds each node's result (the host backend also sums
# in float32); PyTorch runs in float64. So a result is off by a few float32 ulps of the terms
# that made it: rtol covers results of the size of their terms, atol those that cancel to near
# zero (a gradient summed over a batch; terms here are at most about 1). Measured worst errors
# are printed as a fraction of the allowance; a scale error of 1e-3 or a zeroed gradient fails.
TOLERANCES = {              # (atol, rtol)
    "loss": (1e-6, 1e-6),
    "grad": (1e-6, 1e-5),
    "adam step": (1e-7, 1e-6),   # p - lr * m / (sqrt(v) + eps): lr = 0.01 scales the error
    "adam m": (1e-7, 1e-5),      # 0.1 * grad
}


def worst_ratio(actual, expected, atol, rtol):
    """max |actual - expected| / (atol + rtol * |expected|), over all elements."""
    if actual.shape != expected.shape:
        return math.inf
    if expected.size == 0:
        return 0.0
    return float((np.abs(actual - expected) / (atol + rtol * np.abs(expected))).max())


def check_model(kiln, work, model):
    name, input_shape, shapes, nodes, forward, dropout_rates, *tokens = model
    vocab = tokens[0] if tokens else None  # a token model's input: i64 ids below vocab
    input_name = "image" if vocab is None else "tokens"
    rng = np.random.default_rng(7)
    weights = {k: (rng.standard_normal(s) * (0.5 if len(s) > 1 else 0.1)).astype(np.float32)
               for k, s in shapes.items()}
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "w.safetensors"), weights)
    with open(os.path.join(folder, "model.json"), "w") as f:
        json.dump({"format": "kiln.model", "version": 1, "name": name, "weights": "w.safetensors",
                   "inputs": [{"name": input_name, "dtype": "f32" if vocab is None else "i64",
                               "shape": list(input_shape)}],
                   "parameters": [{"name": k, "shape": list(s)} for k, s in shapes.items()],
                   "nodes": nodes, "outputs": ["probs"]}, f)
    x = (rng.random((BATCH,) + input_shape[1:]).astype(np.float32) if vocab is None
         else rng.integers(0, vocab, (BATCH,) + input_shape[1:]).astype(np.int64))
    y = rng.integers(0, 10, BATCH).astype(np.int32)
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "y.npy"), y)
    model_path = os.path.join(folder, "model.json")
    inputs = ["-i", f"{input_name}={folder}/x.npy", "-i", f"label={folder}/y.npy"]

    failures = []

    def expect(what, kind, actual, expected):
        atol, rtol = TOLERANCES[kind]
        ratio = worst_ratio(actual, expected, atol, rtol)
        status = "ok" if ratio <= 1 else "FAIL"
        print(f"  {name}: {what}: worst error {ratio:.2f} of atol {atol:.0e} + rtol {rtol:.0e} "
              f"* |want| {status}")
        if not ratio <= 1:
            failures.append(f"{name}: {what}")

    # The training graph, with its dropout seeds (kiln assigns one per dropout node).
    grads_ir = os.path.join(folder, "grads.ir")
    run([kiln, "opt", model_path, "--training-graph", str(BATCH), "--passes=autodiff", "-o", grads_ir])
    seeds = {}
    for line in open(grads_ir):
        m = re.search(r'dropout\(%[^,]+, %train\.step\) \{[^}]*seed = (\d+)[^}]*\}.*loc\("([^"]+)"\)', line)
        if m and not m.group(2).startswith("grad."):
            seeds[m.group(2)] = int(m.group(1))
    assert set(seeds) == set(dropout_rates), f"dropout seeds found: {seeds}"

    # PyTorch, float64, with kiln's masks (step 1).
    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    masks = {}
    for node, rate in dropout_rates.items():
        count = BATCH * shapes["fc1.bias"][0]
        masks[node] = torch.tensor(dropout_mask(count, rate, seeds[node], 1), dtype=torch.float64)
    logits = forward(params, torch.tensor(x, dtype=torch.float64 if vocab is None else torch.int64), masks)
    loss = F.cross_entropy(logits, torch.tensor(y, dtype=torch.int64))
    loss.backward()

    for backend, passes in (("reference", []),
                            ("host", ["--passes=cse,dce,fuse-conv-bias-relu,fuse-elementwise,plan-memory"])):
        out = os.path.join(folder, "out_" + backend)
        run([kiln, "run", grads_ir, "--backend", backend, "-O0", *passes, *inputs, "-o", out])
        expect(f"{backend} loss", "loss", np.load(f"{out}/loss.npy").astype(np.float64),
               loss.detach().numpy())
        for k in shapes:
            expect(f"{backend} grad {k}", "grad", np.load(f"{out}/grad.{k}.npy").astype(np.float64),
                   params[k].grad.numpy())

    # One Adam step (append-optimizer) against torch.optim.Adam.
    step_ir = os.path.join(folder, "step.ir")
    run([kiln, "opt", model_path, "--training-graph", str(BATCH),
         "--passes=autodiff,append-optimizer{optimizer=adam lr=0.01}", "-o", step_ir])
    out = os.path.join(folder, "out_step")
    run([kiln, "run", step_ir, "--backend", "reference", "-O0", *inputs, "-o", out])
    optimizer = torch.optim.Adam(params.values(), lr=0.01)
    optimizer.step()
    state = optimizer.state
    for k, p in params.items():
        expect(f"adam step {k}", "adam step", np.load(f"{out}/next.{k}.npy").astype(np.float64),
               p.detach().numpy())
        expect(f"adam m {k}", "adam m", np.load(f"{out}/next.optimizer.m.{k}.npy").astype(np.float64),
               state[p]["exp_avg"].numpy())
    return failures


# ---- a schedule and a clip over many steps ------------------------------------------------
def lr_factor(taken, warmup, total, min_scale):
    """lr_schedule's cosine factor after `taken` steps (ir/eval/kernels_optimizer.cpp)."""
    if taken < warmup:
        return (taken + 1) / warmup
    progress = min(max((taken - warmup) / (total - warmup), 0.0), 1.0)
    return min_scale + (1 - min_scale) * 0.5 * (1 + math.cos(math.pi * progress))


def full_batch_mlp(work, tag, rng):
    """The MLP without dropout, random weights and one full batch of 16 samples as a .npy data
    folder: (folder, model_path, data, weights, forward, x, y)."""
    name, input_shape, shapes, nodes, _, _ = mlp()

    def forward(p, x):
        h = F.relu(F.linear(x.flatten(1), p["fc1.weight"], p["fc1.bias"]))
        return F.linear(h, p["fc2.weight"], p["fc2.bias"])
    nodes = [n for n in nodes if n["op"] != "dropout"]
    nodes[[n["name"] for n in nodes].index("fc2")]["inputs"][0] = "relu1"
    folder = os.path.join(work, tag)
    data = os.path.join(folder, "data")
    os.makedirs(data, exist_ok=True)
    weights = {k: (rng.standard_normal(s) * (0.5 if len(s) > 1 else 0.1)).astype(np.float32)
               for k, s in shapes.items()}
    write_safetensors(os.path.join(folder, "w.safetensors"), weights)
    model_path = os.path.join(folder, "model.json")
    with open(model_path, "w") as f:
        json.dump({"format": "kiln.model", "version": 1, "name": tag + "_mlp",
                   "weights": "w.safetensors",
                   "inputs": [{"name": "image", "dtype": "f32", "shape": list(input_shape)}],
                   "parameters": [{"name": k, "shape": list(s)} for k, s in shapes.items()],
                   "nodes": nodes, "outputs": ["probs"]}, f)
    x = rng.random((16,) + input_shape[1:]).astype(np.float32)
    y = rng.integers(0, 10, 16).astype(np.int32)
    for split in ("train", "test"):
        np.save(os.path.join(data, f"{split}.x.npy"), x)
        np.save(os.path.join(data, f"{split}.y.npy"), y)
    return folder, model_path, data, weights, forward, x, y


def check_schedule_and_clip(kiln, work):
    """`kiln train` with AdamW, warmup + cosine decay and clipping by global norm for 14 steps
    (full batch: one step per epoch, so the shuffled order only changes rounding) against
    torch.optim.AdamW + LambdaLR + clip_grad_norm_ from the same weights, in float64. The
    decay ends at step 10, so the last steps run at min_lr_scale."""
    rng = np.random.default_rng(11)
    folder, model_path, data, weights, forward, x, y = full_batch_mlp(work, "train_schedule", rng)
    count, steps, warmup, total, min_scale, max_norm, lr = 16, 14, 3, 10, 0.1, 0.5, 0.05
    checkpoint = os.path.join(folder, "state.safetensors")
    run([kiln, "train", model_path, "--data", data, "--backend", "host", "--batch-size", str(count),
         "--epochs", str(steps), "--optimizer", "adamw", "--lr", str(lr), "--lr-schedule", "cosine",
         "--warmup-steps", str(warmup), "--total-steps", str(total), "--min-lr-scale",
         str(min_scale), "--clip-grad-norm", str(max_norm), "--checkpoint", checkpoint, "-q"])
    state = read_safetensors(checkpoint)

    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    optimizer = torch.optim.AdamW(params.values(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: lr_factor(k, warmup, total, min_scale))
    clipped = 0
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(forward(params, xt), yt).backward()
        clipped += float(torch.nn.utils.clip_grad_norm_(params.values(), max_norm)) > max_norm
        optimizer.step()
        schedule.step()
    # The check must exercise the clip, and the weights must have moved far beyond the allowance.
    assert clipped >= 3, f"only {clipped} of {steps} steps clipped: raise the learning rate"
    failures = []
    for k, p in params.items():
        moved = float(np.abs(p.detach().numpy() - weights[k]).max())
        error = float(np.abs(state[k].astype(np.float64) - p.detach().numpy()).max())
        ok = error <= 2e-5 and moved > 100 * 2e-5
        print(f"  schedule+clip: {k} after {steps} steps: worst error {error:.1e} (allowance "
              f"2e-5; the weights moved {moved:.3f}) {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"schedule+clip {k}")
    print(f"  schedule+clip: {clipped} of {steps} steps clipped")
    return failures


def check_loss_scaling(kiln, work):
    """`kiln train` with dynamic loss scaling from 2^127, where the scaled gradients overflow
    f32: the first steps are skipped, the scale halving each time, until they fit. The batch is
    the same every step (full batch), so a skipped step must change nothing, and the steps
    taken must be Adam's steps as torch counts them under a GradScaler (bias correction after
    t taken steps, not t steps of the loop): the weights after 14 steps of which k were
    skipped equal torch.optim.Adam's after 14 - k steps, and the scale is 2^127 / 2^k."""
    rng = np.random.default_rng(12)
    folder, model_path, data, weights, forward, x, y = full_batch_mlp(work, "train_loss_scale", rng)
    # Hidden activations near 10 (and a small fc2 to keep the logits moderate) make fc2's
    # weight gradient ~100x the logits': f32 overflows at scales near its top, and the scaler
    # has to find its way down.
    weights["fc1.bias"] += 10
    weights["fc2.weight"] *= 0.05
    write_safetensors(os.path.join(folder, "w.safetensors"), weights)
    steps, lr, scale = 14, 0.02, 2.0 ** 127
    checkpoint = os.path.join(folder, "state.safetensors")
    run([kiln, "train", model_path, "--data", data, "--backend", "host", "--batch-size", "16",
         "--epochs", str(steps), "--optimizer", "adam", "--lr", str(lr), "--loss-scale", "dynamic",
         "--loss-scale-init", repr(scale), "--loss-scale-growth-interval", "1000",
         "--checkpoint", checkpoint, "-q"])
    state = read_safetensors(checkpoint)
    skipped = int(state["train.loss_scale.skipped"][0])
    failures = []
    if not 1 <= skipped <= steps - 5:
        failures.append(f"loss scaling skipped {skipped} of {steps} steps (expected some, not all)")
    if float(state["train.loss_scale"][0]) != scale / 2 ** skipped:
        failures.append(f"loss scale {state['train.loss_scale'][0]} after {skipped} skips")
    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in weights.items()}
    optimizer = torch.optim.Adam(params.values(), lr=lr)
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)
    for _ in range(steps - skipped):
        optimizer.zero_grad()
        F.cross_entropy(forward(params, xt), yt).backward()
        optimizer.step()
    for k, p in params.items():
        moved = float(np.abs(p.detach().numpy() - weights[k]).max())
        error = float(np.abs(state[k].astype(np.float64) - p.detach().numpy()).max())
        ok = error <= 2e-5 * max(1.0, moved) and moved > 100 * 2e-5
        print(f"  loss scaling: {k} after {steps} steps, {skipped} skipped: worst error "
              f"{error:.1e} (the weights moved {moved:.3f}) {'ok' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"loss scaling {k}")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    failures = []
    for model in (mlp(), cnn(), embedding()):
        failures += check_model(args.kiln, args.work, model)
    failures += check_schedule_and_clip(args.kiln, args.work)
    failures += check_loss_scaling(args.kiln, args.work)
    if failures:
        sys.exit("FAILED: " + ", ".join(failures))
    print("all training checks passed")


if __name__ == "__main__":
    main()
