#!/usr/bin/python3
"""torchvision's classification zoo through kiln's ONNX importer (issue 15, item 4), and the
transformers of issue 16, item 4: ViT-B/16, ConvNeXt-Tiny and an nn.TransformerEncoder over
token embeddings with a padding mask.

Each model is built with seeded random weights, exported by torch.onnx.export at the opsets
listed below (with a symbolic batch), and then:
  - run by `kiln run --backend=reference` (and `--backend=host` where HOST is set), compared
    with PyTorch's output: max |kiln - torch| <= 1e-4 * max |torch|;
  - compiled by `kiln compile` for sm_80 and sm_90 (NVRTC; no GPU needed);
  - for ResNet-50: `kiln inspect` on the imported model counts as many kernels as
    examples/resnet50.json, the hand-written (torch.fx traced) ResNet-50, before split-k
    (fused_count);
  - for the models marked dynamic: run again with `--dim batch=BOUND` (the batch dynamic up to
    a bound above the batch run, ir/dynamic_dims.h), on the same backends, against PyTorch.
Every opset from 11 to 17 is covered by some model, and one model runs at all of them.

usage: zoo.py --kiln KILN --work DIR [--source SRC] MODEL...   (MODEL: a key of ZOO)
Everything is written under --work (kiln's kernel cache too), which is emptied first; what a
passing (model, opset) wrote is removed after it."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

TOLERANCE = 1e-4
ALL_OPSETS = list(range(11, 18))


class Spec:
    def __init__(self, opsets, size, batch=1, host=False, kernels_like=None, build=None,
                 attention=0, max_kernels=None, dynamic=False):
        self.opsets = opsets          # torch.onnx.export opset_version, one export each
        self.size = size              # the image is BATCHx3xSIZExSIZE
        self.batch = batch            # the export traces one image: a larger batch is symbolic
        self.host = host              # also run on the host backend (one g++ compile)
        self.kernels_like = kernels_like  # a kiln JSON model that must fuse to as many kernels
        self.build = build            # (model, {input: tensor}) for models that take more than
                                      # an image; None: the torchvision model of that name
        self.attention = attention    # attention kernels the compiled model must have
        self.max_kernels = max_kernels  # kernels it may have at most (five per encoder layer)
        self.dynamic = dynamic        # also run with the batch dynamic (--dim batch=BOUND)


def vit_b_16():
    """ViT-B/16 (12 layers, width 768, 12 heads) at 32x32, four patches and the class token.
    Its classifier starts at zero in torchvision, which would hide every error: random instead."""
    import torch
    import torchvision
    model = torchvision.models.vit_b_16(weights=None, image_size=32).eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    return model, {"image": torch.randn(2, 3, 32, 32)}


def text_encoder():
    """Token embeddings, a two-layer nn.TransformerEncoder (GELU, batch first) with a key
    padding mask, and a linear head: the batch and the padding are symbolic in the export."""
    import torch
    import torch.nn as nn

    class TextEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                               activation="gelu")
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 5)

        def forward(self, tokens, padding):
            return self.head(self.encoder(self.embed(tokens), src_key_padding_mask=padding))

    tokens = torch.randint(0, 100, (3, 12))
    padding = torch.zeros(3, 12, dtype=torch.bool)
    padding[1, 8:] = True   # the second sequence has 8 tokens, the third 5
    padding[2, 5:] = True
    return TextEncoder().eval(), {"tokens": tokens, "padding": padding}


# One model at every opset: ShuffleNet, whose channel split and shuffle export as shape
# arithmetic (Shape, Gather, Div, Unsqueeze, Concat, Reshape, Slice) that changed across opsets;
# the others take one opset each, so that every opset from 11 to 17 is met by a real model twice.
# Its exports differ only in names within 11-12 and within 13-17, so the kernel cache (in --work)
# compiles two translation units, not seven. Sizes: the smallest image each model takes. VGG's
# AdaptiveAvgPool2d(7) is exported only when the 1/32 feature map is a multiple of 7, hence 224;
# the other models end in a global pooling. The host backend costs a g++ compile per model
# (5-12 s of CPU): it runs on all but the three largest.
ZOO = {
    "shufflenet_v2_x0_5": Spec(ALL_OPSETS, 64, batch=2, host=True),
    "squeezenet1_1": Spec([12], 64, host=True),
    "mobilenet_v3_small": Spec([14], 64, host=True),
    "mobilenet_v2": Spec([13], 64, host=True),
    "resnet18": Spec([11], 64, host=True, dynamic=True),
    "efficientnet_b0": Spec([15], 64, host=True),
    "regnet_y_400mf": Spec([16], 64, host=True),
    "densenet121": Spec([13], 64),
    "resnet50": Spec([17], 64, kernels_like="examples/resnet50.json"),
    "vgg11": Spec([14], 224),
    # Transformers: one attention kernel and five kernels per encoder layer
    # (docs/transformers.md); ViT adds the patch embedding, class token, position embedding and
    # head, the text encoder the embedding, the padding mask and the head.
    "vit_b_16": Spec([17], 32, batch=2, host=True, build=vit_b_16, attention=12, max_kernels=65,
                     dynamic=True),
    "convnext_tiny": Spec([17], 32, batch=2, host=True, dynamic=True),
    "text_encoder": Spec([17], 0, host=True, build=text_encoder, attention=2, max_kernels=17,
                         dynamic=True),
}


def export(name, opset, spec, directory):
    """Writes model.onnx, image.npy and expected.npy (PyTorch's output) into DIRECTORY. The
    export traces one image with a symbolic batch; the image run has spec.batch."""
    import torch
    import torchvision
    torch.manual_seed(0)
    if spec.build:
        model, inputs = spec.build()
        return export_inputs(model, inputs, opset, directory)
    model = getattr(torchvision.models, name)(weights=None).eval()
    # Batch norms start as identities (mean 0, variance 1, scale 1, shift 0), which would hide a
    # mix-up of their four inputs (DenseNet keeps its BatchNormalization nodes in the export).
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
    x = torch.randn(spec.batch, 3, spec.size, spec.size)
    with torch.no_grad():
        expected = model(x)
    torch.onnx.export(model, x[:1], os.path.join(directory, "model.onnx"), opset_version=opset,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    np.save(os.path.join(directory, "image.npy"), x.numpy())
    np.save(os.path.join(directory, "expected.npy"), expected.numpy())
    return {"image": x}


def export_inputs(model, inputs, opset, directory):
    """The export of a model with named inputs: the first row of each traced, the batch (dim 0)
    symbolic. Returns the inputs, saved as <name>.npy."""
    import torch
    with torch.no_grad():
        expected = model(*inputs.values())
    names = list(inputs)
    axes = {n: {0: "batch"} for n in names + ["logits"]}
    torch.onnx.export(model, tuple(t[:1] for t in inputs.values()),
                      os.path.join(directory, "model.onnx"), opset_version=opset,
                      input_names=names, output_names=["logits"], dynamic_axes=axes)
    for n, t in inputs.items():
        np.save(os.path.join(directory, n + ".npy"), t.numpy())
    np.save(os.path.join(directory, "expected.npy"), expected.numpy())
    return inputs


def relative_error(got, want):
    if got.shape != want.shape:
        raise Failure(f"shape {got.shape} != PyTorch's {want.shape}")
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale


class Failure(Exception):
    pass


def cpu_seconds():
    """CPU time of this process and its finished children: what the test costs on a machine
    shared with other jobs, where wall time says little."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def kiln(args, env, what):
    result = subprocess.run(args, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise Failure(f"{what} failed (exit {result.returncode}): {' '.join(args)}\n"
                      f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return result.stdout


def kernel_names(kiln_path, model, env, extra=()):
    """The kernels of MODEL after kiln's default pipeline, from its CUDA translation unit, as
    `kiln inspect` counts them, without running NVRTC (bench/fusion_report.sh's figure): one
    `extern "C" __global__ void [__launch_bounds__(...)] NAME(` per function, and one
    `// NAME: the same code as OTHER, which it launches` per kernel that shares an earlier one's."""
    source = kiln([kiln_path, "emit", model, "--emit=cuda", *extra], env, f"kiln emit {model}")
    pattern = (r'^extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(|'
               r'^// (\w+): the same code as \w+, which it launches$')
    return [own or shared for own, shared in re.findall(pattern, source, re.MULTILINE)]


def fused_count(names):
    """Kernels as fusion made them. split-k (docs/tensor-cores.md) adds two kernels to each
    convolution it cuts (the partials' reduce_sum, and the epilogue after it) and cuts by size,
    which differs between an import (a small image) and the JSON model (224x224); in these
    convolutional networks a `reduce_sum_N` kernel is only ever such a sum."""
    splits = sum(1 for name in names if re.fullmatch(r"reduce_sum_\d+", name))
    return len(names) - 2 * splits


def check(name, opset, spec, args, env):
    """One (model, opset): returns the figures of the report line; raises Failure."""
    directory = os.path.join(args.work, f"{name}_opset{opset}")
    os.makedirs(directory)
    model = os.path.join(directory, "model.onnx")
    figures = {}
    start = cpu_seconds()
    inputs = export(name, opset, spec, directory)
    figures["export"] = cpu_seconds() - start
    expected = np.load(os.path.join(directory, "expected.npy"))
    input_flags = []
    for n in inputs:
        input_flags += ["--input", f"{n}={os.path.join(directory, n + '.npy')}"]

    backends = ["reference"] + (["host"] if spec.host else [])
    for backend in backends:
        start = cpu_seconds()
        out = os.path.join(directory, backend)
        kiln([args.kiln, "run", model, f"--backend={backend}", *input_flags, "--output-dir", out],
             env, f"kiln run --backend={backend}")
        figures[backend] = relative_error(np.load(os.path.join(out, "logits.npy")), expected)
        figures[backend + "_s"] = cpu_seconds() - start
        if figures[backend] > TOLERANCE:
            raise Failure(f"{backend}: max error {figures[backend]:.3g} of the output's scale "
                          f"(tolerance {TOLERANCE:g})")

    if spec.dynamic:
        # One compile for batches up to a bound above the batch given: the inputs are padded to
        # it and the output sliced back.
        bound = max(inputs[next(iter(inputs))].shape[0] + 1, 4)
        for backend in backends:
            out = os.path.join(directory, backend + "_dynamic")
            kiln([args.kiln, "run", model, f"--backend={backend}", "--dim", f"batch={bound}",
                  *input_flags, "--output-dir", out], env, f"kiln run --backend={backend} --dim batch={bound}")
            error = relative_error(np.load(os.path.join(out, "logits.npy")), expected)
            figures["dynamic"] = max(figures.get("dynamic", 0.0), error)
            if error > TOLERANCE:
                raise Failure(f"{backend} with --dim batch={bound}: max error {error:.3g} of the "
                              f"output's scale (tolerance {TOLERANCE:g})")

    start = cpu_seconds()
    package = os.path.join(directory, "model.kiln")
    shapes = []
    for n, t in inputs.items():
        shapes += ["--input-shape", f"{n}={'x'.join(str(d) for d in t.shape)}"]
    kiln([args.kiln, "compile", model, *shapes, "--arch", "sm_80,sm_90", "-o", package],
         env, "kiln compile --arch sm_80,sm_90")
    figures["compile_s"] = cpu_seconds() - start

    if spec.attention:
        got = kernel_names(args.kiln, model, env, shapes)
        attention = [k for k in got if k.startswith("attention_")]
        figures["kernels"] = f"{len(got)}, {len(attention)} attention"
        if len(attention) != spec.attention:
            raise Failure(f"{len(attention)} attention kernels, expected {spec.attention} (one per "
                          f"encoder layer):\n  {' '.join(got)}")
        if spec.max_kernels and len(got) > spec.max_kernels:
            raise Failure(f"{len(got)} kernels, at most {spec.max_kernels} expected (five per "
                          f"encoder layer):\n  {' '.join(got)}")

    if spec.kernels_like:
        want = kernel_names(args.kiln, os.path.join(args.source, spec.kernels_like), env)
        got = kernel_names(args.kiln, model, env, shapes)
        figures["kernels"] = f"{len(got)} (like {len(want)}; {fused_count(got)} before split-k)"
        if fused_count(got) != fused_count(want):
            raise Failure(f"imported {name} fuses to {fused_count(got)} kernels before split-k, "
                          f"{spec.kernels_like} to {fused_count(want)}:\n  imported: {' '.join(got)}\n  {spec.kernels_like}: {' '.join(want)}")
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kiln")
    parser.add_argument("--work")
    parser.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    parser.add_argument("models", nargs="*")
    args = parser.parse_args()
    if not args.kiln or not args.work or not args.models:
        parser.error("--kiln, --work and at least one MODEL are required")
    unknown = [m for m in args.models if m not in ZOO]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {', '.join(ZOO)}")

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(args.work, "kernel-cache"))
    failures = 0
    for name in args.models:
        spec = ZOO[name]
        for opset in spec.opsets:
            start, wall = cpu_seconds(), time.monotonic()
            try:
                f = check(name, opset, spec, args, env)
            except Failure as failure:
                failures += 1
                print(f"FAIL {name} opset {opset}: {failure}", flush=True)
                continue
            # A passing (model, opset) leaves nothing behind (VGG-11's exports and packages alone
            # are a gigabyte); a failing one keeps its directory to look into.
            shutil.rmtree(os.path.join(args.work, f"{name}_opset{opset}"))
            host = f" host {f['host']:.2g} ({f['host_s']:.0f} s)" if "host" in f else ""
            kernels = f" kernels {f['kernels']}" if "kernels" in f else ""
            kernels += f" dynamic batch {f['dynamic']:.2g}" if "dynamic" in f else ""
            size = f"{spec.batch}x3x{spec.size}x{spec.size}" if spec.size else "tokens"
            print(f"ok   {name} opset {opset} ({size}): reference {f['reference']:.2g} "
                  f"({f['reference_s']:.0f} s){host}, compile sm_80,sm_90 ok ({f['compile_s']:.0f} s),"
                  f"{kernels} export {f['export']:.0f} s, CPU {cpu_seconds() - start:.0f} s "
                  f"(wall {time.monotonic() - wall:.0f} s)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
