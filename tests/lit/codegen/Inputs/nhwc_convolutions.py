"""A small CNN for nhwc_convolutions.test, and the checks of its outputs.

make DIR: DIR/nhwc.ir and DIR/x.npy. conv1 3x3 padded with bias and relu (B gathered), a 2x2
  max pool, conv2 1x1 (B is x's rows, contiguous along k: cp.async at tf32) plus a residual
  read from x through an average pool that stays NCHW (transposed to NHWC for the add), conv3
  3x3 stride 2 in 4 groups before a global average pool (which reads NCHW: the region ends),
  an average pool not counting its padding, conv4 1x1 without bias and then a bias_add, and
  conv5 [16, 512, 3, 3] on one image (a long K on few tiles: split-K when split-k may cut it),
  its weight a graph input (transposed to KRSC at run time, not folded).
check DIR: the runs' outputs (DIR/<run>/*.npy) agree as the test says.
"""
import sys

import numpy as np


def make(out):
    rng = np.random.default_rng(11)
    w = lambda *shape: rng.uniform(-1, 1, shape).astype(np.float32) / np.sqrt(np.prod(shape[1:]))
    w1, b1, w2, b2 = w(64, 32, 3, 3), w(64), w(32, 64, 1, 1), w(32)
    w3, w4, b4 = w(32, 8, 3, 3), w(16, 32, 1, 1), w(16)
    text = lambda a: ",".join("%.9g" % v for v in a.ravel())
    with open(f"{out}/nhwc.ir", "w") as f:
        f.write(f"""graph @small_cnn(%x: f32[2,32,10,10], %y: f32[1,512,8,8], %w5: f32[16,512,3,3])
    params(%w1: f32[64,32,3,3] = dense<[{text(w1)}]>, %b1: f32[64] = dense<[{text(b1)}]>,
           %w2: f32[32,64,1,1] = dense<[{text(w2)}]>, %b2: f32[32] = dense<[{text(b2)}]>,
           %w3: f32[32,8,3,3] = dense<[{text(w3)}]>, %w4: f32[16,32,1,1] = dense<[{text(w4)}]>,
           %b4: f32[16] = dense<[{text(b4)}]>)
    -> (f32[2,32,1,1], f32[2,16,5,5], f32[1,16,6,6]) {{
  %c1 = conv2d(%x, %w1, %b1) {{pad = [1,1,1,1]}} : f32[2,64,10,10] loc("conv1")
  %r1 = relu(%c1) : f32[2,64,10,10] loc("relu1")
  %p1 = max_pool2d(%r1) {{kernel = [2,2]}} : f32[2,64,5,5] loc("pool1")
  %c2 = conv2d(%p1, %w2, %b2) : f32[2,32,5,5] loc("conv2")
  %xs = avg_pool2d(%x) {{kernel = [2,2]}} : f32[2,32,5,5] loc("shortcut")
  %a2 = add(%c2, %xs) : f32[2,32,5,5] loc("add2")
  %r2 = relu(%a2) : f32[2,32,5,5] loc("relu2")
  %c3 = conv2d(%r2, %w3) {{groups = 4, pad = [1,1,1,1], stride = [2,2]}} : f32[2,32,3,3] loc("conv3")
  %g = global_avg_pool(%c3) : f32[2,32,1,1] loc("gap")
  %q = avg_pool2d(%r2) {{count_include_pad = false, kernel = [3,3], pad = [1,1,1,1], stride = [1,1]}} : f32[2,32,5,5] loc("pool2")
  %c4 = conv2d(%q, %w4) : f32[2,16,5,5] loc("conv4")
  %o4 = bias_add(%c4, %b4) : f32[2,16,5,5] loc("bias4")
  %c5 = conv2d(%y, %w5) : f32[1,16,6,6] loc("conv5")
  return %g, %o4, %c5
}}
""")
    np.save(f"{out}/x.npy", rng.uniform(-1, 1, (2, 32, 10, 10)).astype(np.float32))
    np.save(f"{out}/y.npy", rng.uniform(-1, 1, (1, 512, 8, 8)).astype(np.float32))
    np.save(f"{out}/w5.npy", w(16, 512, 3, 3))


def check(out):
    load = lambda run, name: np.load(f"{out}/{run}/{name}.npy").astype(np.float64)
    for name in ("g", "o4", "c5"):
        ref = load("ref", name)
        scale = np.abs(ref).max()
        # Stored in NHWC, summed in the weight's KRSC order: the reference's values, to f32's
        # rounding of a sum (of up to 4,608 terms) for f32, to TF32's (10 bits) for tf32.
        for run, bound in (("f32", 2.0 ** -18), ("tf32", 2.0 ** -9), ("nchw_tf32", 2.0 ** -9)):
            worst = np.abs(load(run, name) - ref).max() / scale
            assert worst <= bound, f"{name}: {run} is {worst} of the scale from the reference"
        for run in ("f32", "tf32"):
            assert np.array_equal(load(run, name), load(run + "_cuda", name)), \
                f"{name}: {run}: the host body and the CUDA body differ"
        print(f"{name}: NHWC host == CUDA bodies, bit for bit; f32 within 2^-18 and tf32 within 2^-9 "
              f"of the scale of the reference's, as NCHW tf32")


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
