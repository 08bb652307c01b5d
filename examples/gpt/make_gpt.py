#!/usr/bin/env python3
"""Writes a GPT-style decoder as a kiln model (examples/gpt.json is its default output).

The architecture is GPT-2's (Radford et al. 2019), as in nanoGPT: byte embeddings plus learned
positions, pre-norm blocks of causal multi-head attention and a GELU MLP, each added to the
residual stream, a final layer norm, and a language-model head tied to the token embeddings.
The model takes token ids [1, context] (kiln train sets the batch) and returns next-token
probabilities [1, context, vocabulary]; training derives the loss from them (a label per
position). Weights are drawn at load time from kiln's initializers, GPT-2's scheme: N(0, 0.02)
for embeddings and projections, N(0, 0.02 / sqrt(2 * layers)) for the projections that feed
the residual stream, zero biases, unit layer-norm gains. With --weights FILE the parameters
read that safetensors file instead (tests/torch/gpt_check.py uses it to start kiln and PyTorch
from the same weights).

Usage: make_gpt.py [--layers 4] [--d-model 128] [--heads 4] [--context 128] [--vocab 256]
                   [--weights FILE] [-o examples/gpt.json]
"""
import argparse
import json
import math
import sys


def parameter_shapes(layers, d, context, vocab):
    """Every parameter's name and shape, in the order of the model (PyTorch's layout:
    dense weights are [out, in], as nn.Linear's)."""
    shapes = {"wte": [vocab, d], "wpe": [context, d]}
    for l in range(layers):
        p = f"h{l}."
        shapes.update({p + "ln1.weight": [d], p + "ln1.bias": [d],
                       p + "attn.qkv.weight": [3 * d, d], p + "attn.qkv.bias": [3 * d],
                       p + "attn.proj.weight": [d, d], p + "attn.proj.bias": [d],
                       p + "ln2.weight": [d], p + "ln2.bias": [d],
                       p + "mlp.fc.weight": [4 * d, d], p + "mlp.fc.bias": [4 * d],
                       p + "mlp.proj.weight": [d, 4 * d], p + "mlp.proj.bias": [d]})
    shapes.update({"ln_f.weight": [d], "ln_f.bias": [d]})
    return shapes


def initializer(name, layers, seed):
    if name.endswith(".bias"):
        return {"kind": "zeros"}
    if ".ln" in name or name.startswith("ln_f"):
        return {"kind": "ones"}
    std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
    return {"kind": "normal", "std": std, "seed": seed}


def nodes(layers, d, heads, context):
    head = d // heads
    out = []

    def node(op, name, inputs, **attrs):
        entry = {"op": op, "name": name, "inputs": inputs}
        if attrs:
            entry["attrs"] = attrs
        out.append(entry)
        return name

    x = node("gather", "embed", ["wte", "tokens"])                      # [1, T, d]
    x = node("add", "embed_pos", [x, "wpe"])
    for l in range(layers):
        p = f"h{l}."
        h = node("layer_norm", p + "ln1", [x, p + "ln1.weight", p + "ln1.bias"])
        qkv = node("dense", p + "attn.qkv", [h, p + "attn.qkv.weight", p + "attn.qkv.bias"])
        split = []
        for i, part in enumerate("qkv"):
            s = node("slice", p + f"attn.{part}", [qkv], starts=[i * d], ends=[(i + 1) * d], axes=[-1])
            s = node("reshape", p + f"attn.{part}.heads", [s], shape=[1, context, heads, head])
            split.append(node("transpose", p + f"attn.{part}.bhtd", [s], perm=[0, 2, 1, 3]))
        out.append({"op": "attention", "name": p + "attn", "inputs": split,
                    "outputs": [p + "attn.out", p + "attn.lse"], "attrs": {"causal": True}})
        a = node("transpose", p + "attn.bthd", [p + "attn.out"], perm=[0, 2, 1, 3])
        a = node("reshape", p + "attn.merged", [a], shape=[1, context, d])
        a = node("dense", p + "attn.proj", [a, p + "attn.proj.weight", p + "attn.proj.bias"])
        x = node("add", p + "residual1", [x, a])
        h = node("layer_norm", p + "ln2", [x, p + "ln2.weight", p + "ln2.bias"])
        h = node("dense", p + "mlp.fc", [h, p + "mlp.fc.weight", p + "mlp.fc.bias"])
        h = node("gelu", p + "mlp.gelu", [h])
        h = node("dense", p + "mlp.proj", [h, p + "mlp.proj.weight", p + "mlp.proj.bias"])
        x = node("add", p + "residual2", [x, h])
    x = node("layer_norm", "ln_f", [x, "ln_f.weight", "ln_f.bias"])
    logits = node("matmul", "lm_head", [x, "wte"], transpose_b=True)   # tied to the embedding
    node("softmax", "probs", [logits], axis=-1)
    return out


def model(layers, d, heads, context, vocab, weights=None):
    if d % heads:
        sys.exit(f"--d-model {d} must be a multiple of --heads {heads}")
    params = []
    for seed, (name, shape) in enumerate(parameter_shapes(layers, d, context, vocab).items(), 1):
        entry = {"name": name, "shape": shape}
        if weights is None:
            entry["init"] = initializer(name, layers, seed)
        params.append(entry)
    doc = {"format": "kiln.model", "version": 1, "name": "gpt"}
    if weights is not None:
        doc["weights"] = weights
    doc.update({
        "inputs": [{"name": "tokens", "dtype": "i32", "shape": [1, context]}],
        "parameters": params,
        "nodes": nodes(layers, d, heads, context),
        "outputs": ["probs"],
        "metadata": {"description": f"GPT-style decoder: {layers} layers, d_model {d}, {heads} "
                                    f"heads, context {context}, byte vocabulary {vocab}; written "
                                    f"by examples/gpt/make_gpt.py"},
    })
    return doc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--weights", help="read the parameters from this safetensors file")
    parser.add_argument("-o", "--output", default="examples/gpt.json")
    args = parser.parse_args()
    doc = model(args.layers, args.d_model, args.heads, args.context, args.vocab, args.weights)
    with open(args.output, "w") as f:
        f.write("{\n")
        items = list(doc.items())
        for i, (key, value) in enumerate(items):
            end = ",\n" if i + 1 < len(items) else "\n"
            if isinstance(value, list):
                f.write(f'  "{key}": [\n')
                f.write(",\n".join("    " + json.dumps(v) for v in value))
                f.write("\n  ]" + end)
            else:
                f.write(f'  "{key}": {json.dumps(value)}{end}')
        f.write("}\n")


if __name__ == "__main__":
    main()
