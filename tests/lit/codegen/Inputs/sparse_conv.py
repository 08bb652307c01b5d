"""A 2:4-sparse CNN for sparse_tensor_cores.test, and the checks of its outputs.

make DIR: DIR/sparse_conv.ir (f32 weights pruned to 2 of every 4 along their rows, as
  `kiln train --prune-pattern=2:4` leaves them: some groups keep one value or none) and
  DIR/x.npy.
  conv1 [64, 32, 3, 3]: K = 288, B gathered; conv4 [24, 64, 1, 1] on conv1's bf16 result:
  pointwise (B copied by cp.async), 24 rows in a 64-row tile; conv3 [24, 16, 2, 2], groups 2
  on x: 12 rows per group; conv5 [8, 24, 1, 1]: rows of 24, which stay dense; conv6
  [32, 32, 6, 6] on x: 50 output pixels, K = 1152, split-K (chunks of whole k tiles).
check DIR: the runs' outputs (DIR/<run>/*.npy) agree as the test says.
"""
import sys

import numpy as np


def two_four(rng, shape):
    w = rng.uniform(-1, 1, shape).astype(np.float32)
    rows = w.reshape(shape[0], -1)
    for r in range(rows.shape[0]):
        for g in range(rows.shape[1] // 4):
            group = rows[r, 4 * g:4 * g + 4]
            keep = np.argsort(-np.abs(group), kind="stable")[:2]
            mask = np.zeros(4, bool)
            mask[keep] = True
            if (r + g) % 7 == 3:
                mask[keep[1]] = False  # one value only
            if (r + g) % 11 == 5:
                mask[:] = False  # none
            group[~mask] = 0
    return w


def make(out):
    rng = np.random.default_rng(7)
    w1, w3, w4 = two_four(rng, (64, 32, 3, 3)), two_four(rng, (24, 16, 2, 2)), two_four(rng, (24, 64, 1, 1))
    w5 = two_four(rng, (8, 24, 1, 1))
    w6 = two_four(rng, (32, 32, 6, 6))
    b1 = rng.uniform(-0.5, 0.5, 64).astype(np.float32)
    text = lambda a: ",".join("%.9g" % v for v in a.ravel())
    with open(f"{out}/sparse_conv.ir", "w") as f:
        f.write(f"""graph @sparse_conv(%x: f32[2,32,10,10])
    params(%w1: f32[64,32,3,3] = dense<[{text(w1)}]>, %b1: f32[64] = dense<[{text(b1)}]>,
           %w3: f32[24,16,2,2] = dense<[{text(w3)}]>, %w4: f32[24,64,1,1] = dense<[{text(w4)}]>,
           %w5: f32[8,24,1,1] = dense<[{text(w5)}]>, %w6: f32[32,32,6,6] = dense<[{text(w6)}]>)
    -> (f32[2,8,8,8], f32[2,24,9,9], f32[2,32,5,5]) {{
  %c1 = conv2d(%x, %w1, %b1) : f32[2,64,8,8] loc("conv1")
  %r1 = relu(%c1) : f32[2,64,8,8] loc("relu1")
  %c4 = conv2d(%r1, %w4) : f32[2,24,8,8] loc("conv4")
  %r4 = relu(%c4) : f32[2,24,8,8] loc("relu4")
  %c5 = conv2d(%r4, %w5) : f32[2,8,8,8] loc("conv5")
  %c3 = conv2d(%x, %w3) {{groups = 2}} : f32[2,24,9,9] loc("conv3")
  %c6 = conv2d(%x, %w6) : f32[2,32,5,5] loc("conv6")
  return %c5, %c3, %c6
}}
""")
    np.save(f"{out}/x.npy", rng.uniform(-1, 1, (2, 32, 10, 10)).astype(np.float32))


def check_outputs(out, names):
    """The runs' outputs of `names` agree as sparse_tensor_cores.test and sparse_dense.test say."""
    load = lambda run, name: np.load(f"{out}/{run}/{name}.npy").astype(np.float64)
    for name in names:
        host, cuda = load("host", name), load("host_cuda", name)
        assert np.array_equal(host, cuda), f"{name}: the host body and the CUDA body differ"
        ref, ref_dense = load("ref", name), load("ref_dense", name)
        assert np.array_equal(ref, ref_dense), f"{name}: the reference differs with the weights compressed"
        dense = load("host_dense", name)
        scale = np.abs(ref).max()
        # The sparse GEMM rounds its f32 sum once per 32 k, the dense one per 16: a stored bf16
        # intermediate may round to its neighbour, one bf16 step (2^-8 relative) of the value.
        for other, label in ((dense, "dense kernels"), (ref, "reference")):
            worst = np.abs(host - other).max() / scale
            assert worst <= 2.0 ** -8, f"{name}: {worst} of the scale from the {label}"
        print(f"{name}: host == CUDA bodies, bit for bit; reference unchanged by the compression; "
              f"within 2^-8 of the scale of the dense kernels' and the reference's")


def check(out):
    check_outputs(out, ("c5", "c3", "c6"))


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
