#!/usr/bin/python3
"""Times a kiln JSON model's forward pass in PyTorch on this machine's CPU: the anchor that
bench/inference_vs_torch.sh sets beside `kiln bench`.

The graph is rebuilt op by op with torch.nn.functional (the semantics of docs/ops.md); weights
are random with the declared shapes (timing does not depend on their values). Prints one JSON
object: {"latency_ms": {"min", "median", "p90", "max"}, "runs", "threads"}.

Usage: torch_run_model.py MODEL.json [--batch N] [--warmup N] [--iterations N] [--threads N]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def pads(attrs):
    top, left, bottom, right = attrs.get("pad", [0, 0, 0, 0])
    return (left, right, top, bottom)


def conv2d(x, w, b=None, **a):
    x = F.pad(x, pads(a))
    return F.conv2d(x, w, b, stride=a.get("stride", [1, 1]), dilation=a.get("dilation", [1, 1]),
                    groups=a.get("groups", 1))


def max_pool2d(x, **a):
    kernel = a["kernel"]
    x = F.pad(x, pads(a), value=float("-inf"))
    return F.max_pool2d(x, kernel, stride=a.get("stride") or kernel,
                        dilation=a.get("dilation", [1, 1]))


def avg_pool2d(x, **a):
    kernel = a["kernel"]
    x = F.pad(x, pads(a))
    return F.avg_pool2d(x, kernel, stride=a.get("stride") or kernel)


def batch_norm(x, scale, bias, mean, var, **a):
    return F.batch_norm(x, mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))


def layer_norm(x, scale, bias, **a):
    axis = a.get("axis", -1) % x.dim()
    return F.layer_norm(x, x.shape[axis:], scale, bias, a.get("epsilon", 1e-5))


def bias_add(x, b, **a):
    axis = a.get("axis", 1) % x.dim()
    return x + b.reshape([-1] + [1] * (x.dim() - axis - 1))


OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu": lambda x, **a: F.gelu(x, approximate=a.get("approximate", "none")),
    "silu": F.silu,
    "conv2d": conv2d,
    "dense": F.linear,
    "matmul": lambda a, b, **t: torch.matmul(a.mT if t.get("transpose_a") else a,
                                             b.mT if t.get("transpose_b") else b),
    "bias_add": bias_add,
    "max_pool2d": max_pool2d,
    "avg_pool2d": avg_pool2d,
    "global_avg_pool": lambda x: x.mean(dim=(2, 3), keepdim=True),
    "batch_norm": batch_norm,
    "layer_norm": layer_norm,
    "softmax": lambda x, **a: torch.softmax(x, a.get("axis", -1)),
    "log_softmax": lambda x, **a: torch.log_softmax(x, a.get("axis", -1)),
    "flatten": lambda x, **a: x.reshape(
        [int(torch.tensor(x.shape[:a.get("axis", 1)]).prod()), -1]),
    "reshape": lambda x, **a: x.reshape(a["shape"]),
    "dropout": lambda x, **a: x,  # inference
}


def build(model, batch):
    values = {}
    for spec in model["inputs"]:
        shape = list(spec["shape"])
        if batch:
            shape[0] = batch
        values[spec["name"]] = torch.rand(shape) * 2 - 1
    for spec in model.get("parameters", []):
        values[spec["name"]] = torch.randn(spec["shape"]) * 0.05
        if spec["name"].endswith("var"):
            values[spec["name"]] = values[spec["name"]].abs() + 1
    nodes = []
    for node in model["nodes"]:
        if node["op"] not in OPS:
            sys.exit(f"torch_run_model.py: op '{node['op']}' of node '{node['name']}' has no "
                     "PyTorch mapping here; add it to OPS")
        nodes.append(node)

    def forward():
        env = dict(values)
        for node in nodes:
            args = [env[name] for name in node["inputs"]]
            env[node["name"]] = OPS[node["op"]](*args, **node.get("attrs", {}))
        return [env[name] for name in model["outputs"]]
    return forward


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--batch", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.model) as f:
        forward = build(json.load(f), args.batch)
    times = []
    with torch.inference_mode():
        for _ in range(args.warmup):
            forward()
        for _ in range(args.iterations):
            start = time.perf_counter()
            forward()
            times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(json.dumps({
        "latency_ms": {"min": times[0], "median": statistics.median(times),
                       "p90": times[min(len(times) - 1, int(0.9 * (len(times) - 1) + 0.5))],
                       "max": times[-1]},
        "runs": len(times), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
