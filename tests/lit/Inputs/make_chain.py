"""Writes a kiln model that is one chain of N nodes (tests/lit/scale/, bench/pass_scaling.py).

The chain cycles through ops that the passes rewrite (dropout at inference, neg of neg, reshape
of reshape, relu of relu) and ops they keep (add of a parameter, sigmoid), so canonicalize,
CSE, DCE and fusion all see N nodes. --reverse lists the nodes consumers first, so the frontend
must sort them. Also writes the chain's input as .npy when --input is given.

--rewrites makes every node a rewrite of a pass that once cost a scan of the graph per rewrite:
blocks of seven nodes, each with a parameter-only neg (constant-fold), two identical sigmoids
(cse), and a dense followed by an inference batch_norm (fold-batch-norm).

Usage: make_chain.py N OUT.json [--reverse] [--rewrites] [--input OUT.npy]
"""
import argparse
import json
import struct

CYCLE = [
    ("neg", {}), ("neg", {}), ("relu", {}), ("relu", {}),
    ("dropout", {"rate": 0.5, "training": False}),
    ("reshape", {"shape": [8, 1]}), ("reshape", {"shape": [1, 8]}),
    ("add", None), ("sigmoid", {}),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("n", type=int)
    parser.add_argument("out")
    parser.add_argument("--reverse", action="store_true")
    parser.add_argument("--rewrites", action="store_true")
    parser.add_argument("--input")
    args = parser.parse_args()
    nodes = []
    previous = "x"
    for i in range(args.n // 7 if args.rewrites else 0):
        nodes += [
            {"op": "neg", "name": f"c{i}", "inputs": ["b"]},
            {"op": "add", "name": f"a{i}", "inputs": [previous, f"c{i}"]},
            {"op": "sigmoid", "name": f"s{i}", "inputs": [f"a{i}"]},
            {"op": "sigmoid", "name": f"t{i}", "inputs": [f"a{i}"]},
            {"op": "add", "name": f"m{i}", "inputs": [f"s{i}", f"t{i}"]},
            {"op": "dense", "name": f"d{i}", "inputs": [f"m{i}", "w", "wb"]},
            {"op": "batch_norm", "name": f"n{i}", "inputs": [f"d{i}", "g", "beta", "mean", "var"]},
        ]
        previous = f"n{i}"
    for i in range(0 if args.rewrites else args.n):
        op, attrs = CYCLE[i % len(CYCLE)]
        node = {"op": op, "name": f"n{i}", "inputs": [previous] + (["b"] if op == "add" else [])}
        if attrs:
            node["attrs"] = attrs
        nodes.append(node)
        previous = f"n{i}"
    if args.reverse:
        nodes.reverse()
    model = {
        "format": "kiln.model", "version": 1, "name": f"chain{args.n}",
        "inputs": [{"name": "x", "dtype": "f32", "shape": [1, 8]}],
        "parameters": [{"name": "b", "shape": [1, 8], "init": {"kind": "constant", "value": 0.001}}]
        + ([{"name": "w", "shape": [8, 8], "init": {"kind": "glorot_uniform", "seed": 1}},
            {"name": "wb", "shape": [8], "init": {"kind": "zeros"}},
            {"name": "g", "shape": [8], "init": {"kind": "ones"}},
            {"name": "beta", "shape": [8], "init": {"kind": "zeros"}},
            {"name": "mean", "shape": [8], "init": {"kind": "zeros"}},
            {"name": "var", "shape": [8], "init": {"kind": "ones"}}] if args.rewrites else []),
        "nodes": nodes,
        "outputs": [previous],
    }
    with open(args.out, "w") as f:
        json.dump(model, f, separators=(",", ":"))
        f.write("\n")
    if args.input:
        header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 8), }"
        header += " " * (64 - 10 - len(header) - 1) + "\n"
        with open(args.input, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
            f.write(struct.pack("<8f", *[0.5 * i - 2 for i in range(8)]))


if __name__ == "__main__":
    main()
