#!/usr/bin/python3
"""ResNet-50 on cuDNN's tensor cores, NCHW against NHWC: what kiln emits and what the cost model says.

Usage: /usr/bin/python3 bench/nhwc_library.py [--kiln build/kiln] [--batch 32]

For examples/resnet50.json at batch `--batch`, compares `kiln inspect --library=cudnn --arch
sm_90` with the default pipeline (layout-nhwc keeps the convolutions NHWC where it pays) against
the same pipeline without layout-nhwc (NCHW: cuDNN may transform each convolution's tensors to
NHWC and back), at --precision=tf32 and bf16: kernels, the library calls and how many take NHWC,
the transposes kiln adds, the modeled time and the bound on cuDNN's layout transforms. No GPU:
the times are kiln's cost model of an H100 SXM (docs/inspect.md).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

NCHW_PIPELINE = {
    "tf32": "canonicalize,fold-batch-norm,constant-fold,cse,fuse-gelu,fuse-attention,dce,fuse-attention-views,"
            "split-k{whole=conv2d},fuse-conv-bias-relu,fuse-gemm-views,fuse-norm-residual,fuse-norm-prologue,"
            "fuse-elementwise,plan-memory",
    "bf16": "canonicalize,fold-batch-norm,constant-fold,cse,fuse-gelu,fuse-attention,autocast{to=bf16},constant-fold,"
            "dce,fuse-attention-views,split-k{whole=conv2d},fuse-conv-bias-relu,fuse-gemm-views,fuse-norm-residual,"
            "fuse-norm-prologue,fuse-elementwise,plan-memory",
}


def inspect(kiln, model, precision, passes):
    command = [kiln, "inspect", model, "--precision=" + precision, "--library=cudnn", "--arch", "sm_90",
               "--format=json"] + (["--passes=" + passes] if passes else [])
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--kiln", default=os.path.join(root, "build", "kiln"))
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    model = json.load(open(os.path.join(root, "examples", "resnet50.json")))
    model["inputs"][0]["shape"][0] = args.batch
    path = os.path.join(tempfile.mkdtemp(prefix="kiln_nhwc_"), "resnet50.json")
    json.dump(model, open(path, "w"))
    print(f"resnet50, batch {args.batch}, --library=cudnn, modeled H100 SXM (sm_90)")
    print(f"{'':36} {'kernels':>8} {'cuDNN':>6} {'NHWC':>5} {'transposes':>11} {'modeled':>10} {'+ transforms':>13}")
    for precision in ("tf32", "bf16"):
        for label, passes in (("NCHW (without layout-nhwc)", NCHW_PIPELINE[precision]), ("default pipeline", None)):
            report = inspect(args.kiln, path, precision, passes)
            kernels = report["kernels"]
            calls = [k for k in kernels if k["implementation"]["kind"] == "library"]
            nhwc = [k for k in calls if " nhwc" in k["implementation"]["descriptor"]]
            transposes = [k for k in kernels if k["name"].startswith("transpose")]
            totals = report["totals"]
            print(f"{precision + ', ' + label:36} {len(kernels):8} {len(calls):6} {len(nhwc):5} {len(transposes):11} "
                  f"{totals['modeled_seconds'] * 1e3:7.3f} ms {totals['layout_transform_seconds'] * 1e3:10.3f} ms")


if __name__ == "__main__":
    sys.exit(main())
