#!/usr/bin/python3
"""Writes examples/resnet50.json from torchvision's ResNet-50 (Debian's python3-torchvision).

The graph is traced with torch.fx and each module mapped to a kiln op. Parameters become seeded
initializer specs (he_normal for convolutions, glorot_uniform for the classifier, the identity
for batch norm), so no weight file is committed and the model is ResNet-50-sized for
compile-time benchmarks. Rerun only to change the model:
    /usr/bin/python3 scripts/make_resnet50.py examples/resnet50.json
"""
import json
import sys

import torch
import torch.fx
import torchvision


def main(out_path):
    model = torchvision.models.resnet50(weights=None).eval()
    traced = torch.fx.symbolic_trace(model)
    modules = dict(traced.named_modules())
    names = {}  # fx node -> kiln value name
    params, nodes = [], []
    seed = [0]

    def param(name, shape, init):
        spec = dict(init)
        if spec["kind"] in ("he_normal", "glorot_uniform"):
            seed[0] += 1
            spec["seed"] = seed[0]
        params.append({"name": name, "shape": list(shape), "init": spec})
        return name

    def value(arg):
        return names[arg]

    for node in traced.graph.nodes:
        kiln_name = node.name
        if node.op == "placeholder":
            inputs = [{"name": "image", "dtype": "f32", "shape": [1, 3, 224, 224]}]
            names[node] = "image"
            continue
        if node.op == "output":
            outputs = [value(node.args[0])]
            continue
        if node.op == "call_module":
            m = modules[node.target]
            x = value(node.args[0])
            if isinstance(m, torch.nn.Conv2d):
                w = param(node.target + ".weight", m.weight.shape, {"kind": "he_normal"})
                ph, pw = m.padding
                nodes.append({"op": "conv2d", "name": kiln_name, "inputs": [x, w],
                              "attrs": {"stride": list(m.stride), "pad": [ph, pw, ph, pw],
                                        "dilation": list(m.dilation), "groups": m.groups}})
            elif isinstance(m, torch.nn.BatchNorm2d):
                c = [m.num_features]
                ins = [x, param(node.target + ".weight", c, {"kind": "ones"}),
                       param(node.target + ".bias", c, {"kind": "zeros"}),
                       param(node.target + ".running_mean", c, {"kind": "zeros"}),
                       param(node.target + ".running_var", c, {"kind": "ones"})]
                nodes.append({"op": "batch_norm", "name": kiln_name, "inputs": ins,
                              "attrs": {"epsilon": m.eps}})
            elif isinstance(m, torch.nn.ReLU):
                nodes.append({"op": "relu", "name": kiln_name, "inputs": [x]})
            elif isinstance(m, torch.nn.MaxPool2d):
                k, s, p = m.kernel_size, m.stride, m.padding
                nodes.append({"op": "max_pool2d", "name": kiln_name, "inputs": [x],
                              "attrs": {"kernel": [k, k], "stride": [s, s], "pad": [p] * 4}})
            elif isinstance(m, torch.nn.AdaptiveAvgPool2d):
                nodes.append({"op": "global_avg_pool", "name": kiln_name, "inputs": [x]})
            elif isinstance(m, torch.nn.Linear):
                w = param(node.target + ".weight", m.weight.shape, {"kind": "glorot_uniform"})
                b = param(node.target + ".bias", m.bias.shape, {"kind": "zeros"})
                nodes.append({"op": "dense", "name": kiln_name, "inputs": [x, w, b]})
            else:
                sys.exit(f"unmapped module {node.target}: {type(m).__name__}")
        elif node.op == "call_function" and node.target in (torch.add,) or \
                (node.op == "call_function" and getattr(node.target, "__name__", "") == "add"):
            nodes.append({"op": "add", "name": kiln_name,
                          "inputs": [value(node.args[0]), value(node.args[1])]})
        elif node.op == "call_function" and node.target is torch.flatten:
            nodes.append({"op": "flatten", "name": kiln_name, "inputs": [value(node.args[0])],
                          "attrs": {"axis": node.args[1]}})
        else:
            sys.exit(f"unmapped fx node {node.op} {node.target}")
        names[node] = kiln_name

    model_json = {"format": "kiln.model", "version": 1, "name": "resnet50",
                  "metadata": {"source": "torchvision.models.resnet50, traced with torch.fx"},
                  "inputs": inputs, "parameters": params, "nodes": nodes, "outputs": outputs}
    with open(out_path, "w") as f:
        f.write("{\n")
        items = list(model_json.items())
        for i, (k, v) in enumerate(items):
            if isinstance(v, list) and v and isinstance(v[0], dict):
                f.write(f'  "{k}": [\n' + ",\n".join("    " + json.dumps(x) for x in v) + "\n  ]")
            else:
                f.write(f'  "{k}": {json.dumps(v)}')
            f.write(",\n" if i + 1 < len(items) else "\n")
        f.write("}\n")
    print(f"{out_path}: {len(nodes)} nodes, {len(params)} parameters")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "examples/resnet50.json")
