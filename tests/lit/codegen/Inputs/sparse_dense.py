"""2:4-sparse dense layers for sparse_dense.test, and the checks of its outputs.

make DIR: DIR/sparse_dense.ir (f32 weights [features, K] pruned to 2 of every 4 along K, as
  `kiln train --prune-pattern=2:4` leaves them) and its inputs DIR/{x,t,u,v,r}.npy.
  fc1 [96, 64] + bias + relu on x [3, 7, 64] (f32, rounded to bf16 as B is staged: a k-major
  B tile); fc2 [40, 96] on fc1's bf16 result (B copied by cp.async: an outer-major B tile), 40
  rows in a 64-row tile; fc3 [32, 64] after a layer_norm of x (a norm prologue would compute x's
  rows, which the transposed product reads as its columns: the norm stays its own kernel); fc4
  [16, 8192] on t [4, 8192] (split-K; 3 of its 4 groups empty); fc5 [16, 48] on u [5, 48]: rows
  of 48, which stay dense; fc6 [32, 64] on v [21, 64], sequence-first, its result stored
  through a reshape to [7, 3, 32] and a transpose to [3, 7, 32], then a residual r added in
  that layout; fc7, a matmul of fc1's [3, 7, 96] result by [96, 24] whose columns are 2:4
  (PyTorch's export of a Linear on 3-D inputs: MatMul by the weight transposed), which becomes a
  dense.
  Also DIR/dynamic.json: fc1 [160, 64] + bias + relu and fc2 [96, 160] on x [batch, 64], batch
  a dynamic dim bounded by 256, and DIR/x100.npy (100 rows): the transposed product's columns
  are x's rows, so grid x is the one that shrinks with the batch.
check DIR: the runs' outputs (DIR/<run>/*.npy) agree as the test says.
check-dynamic DIR: DIR/dynamic_{host,cuda,ref}/fc2.npy agree as the test says.
"""
import json
import sys

import numpy as np

from sparse_conv import check_outputs, two_four


def make(out):
    rng = np.random.default_rng(11)
    w1, w2, w3 = two_four(rng, (96, 64)), two_four(rng, (40, 96)), two_four(rng, (32, 64))
    w4, w5, w6 = two_four(rng, (16, 8192)), two_four(rng, (16, 48)), two_four(rng, (32, 64))
    w4.reshape(16, -1, 4)[:, np.arange(2048) % 4 != 0] = 0  # 3 of 4 groups empty: a smaller file
    w7 = np.ascontiguousarray(two_four(rng, (24, 96)).T)
    b1 = rng.uniform(-0.5, 0.5, 96).astype(np.float32)
    g3 = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    s3 = rng.uniform(-0.5, 0.5, 64).astype(np.float32)
    # Four digits: the values need not be f32s exactly, and the file stays small.
    text = lambda a: ",".join("%.4g" % v for v in a.ravel())
    with open(f"{out}/sparse_dense.ir", "w") as f:
        f.write(f"""graph @sparse_dense(%x: f32[3,7,64], %t: f32[4,8192], %u: f32[5,48], %v: f32[21,64], %r: f32[3,7,32])
    params(%w1: f32[96,64] = dense<[{text(w1)}]>, %b1: f32[96] = dense<[{text(b1)}]>,
           %w2: f32[40,96] = dense<[{text(w2)}]>, %w3: f32[32,64] = dense<[{text(w3)}]>,
           %g3: f32[64] = dense<[{text(g3)}]>, %s3: f32[64] = dense<[{text(s3)}]>,
           %w4: f32[16,8192] = dense<[{text(w4)}]>, %w5: f32[16,48] = dense<[{text(w5)}]>,
           %w6: f32[32,64] = dense<[{text(w6)}]>, %w7: f32[96,24] = dense<[{text(w7)}]>)
    -> (f32[3,7,40], f32[3,7,32], f32[4,16], f32[5,16], f32[3,7,32], f32[3,7,24]) {{
  %d1 = dense(%x, %w1, %b1) : f32[3,7,96] loc("fc1")
  %r1 = relu(%d1) : f32[3,7,96] loc("relu1")
  %d2 = dense(%r1, %w2) : f32[3,7,40] loc("fc2")
  %n3 = layer_norm(%x, %g3, %s3) : f32[3,7,64] loc("ln3")
  %d3 = dense(%n3, %w3) : f32[3,7,32] loc("fc3")
  %d4 = dense(%t, %w4) : f32[4,16] loc("fc4")
  %d5 = dense(%u, %w5) : f32[5,16] loc("fc5")
  %d6 = dense(%v, %w6) : f32[21,32] loc("fc6")
  %tb6 = reshape(%d6) {{shape = [7, 3, 32]}} : f32[7,3,32] loc("tb6")
  %bt6 = transpose(%tb6) {{perm = [1, 0, 2]}} : f32[3,7,32] loc("bt6")
  %a6 = add(%bt6, %r) : f32[3,7,32] loc("res6")
  %d7 = matmul(%r1, %w7) : f32[3,7,24] loc("fc7")
  return %d2, %d3, %d4, %d5, %a6, %d7
}}
""")
    np.save(f"{out}/x.npy", rng.uniform(-1, 1, (3, 7, 64)).astype(np.float32))
    np.save(f"{out}/t.npy", rng.uniform(-1, 1, (4, 8192)).astype(np.float32))
    np.save(f"{out}/u.npy", rng.uniform(-1, 1, (5, 48)).astype(np.float32))
    np.save(f"{out}/v.npy", rng.uniform(-1, 1, (21, 64)).astype(np.float32))
    np.save(f"{out}/r.npy", rng.uniform(-1, 1, (3, 7, 32)).astype(np.float32))

    w1, w2 = two_four(rng, (160, 64)), two_four(rng, (96, 160))
    model = {"format": "kiln.model", "version": 1, "name": "dynamic", "dims": {"batch": 256},
             "inputs": [{"name": "x", "dtype": "f32", "shape": ["batch", 64]}],
             "parameters": [{"name": "w1", "shape": [160, 64], "data": w1.ravel().tolist()},
                            {"name": "b1", "shape": [160], "data": rng.uniform(-1, 1, 160).tolist()},
                            {"name": "w2", "shape": [96, 160], "data": w2.ravel().tolist()}],
             "nodes": [{"op": "dense", "name": "fc1", "inputs": ["x", "w1", "b1"]},
                       {"op": "relu", "name": "r1", "inputs": ["fc1"]},
                       {"op": "dense", "name": "fc2", "inputs": ["r1", "w2"]}],
             "outputs": ["fc2"]}
    json.dump(model, open(f"{out}/dynamic.json", "w"))
    np.save(f"{out}/x100.npy", rng.uniform(-1, 1, (100, 64)).astype(np.float32))


def check(out):
    check_outputs(out, ("d2", "d3", "d4", "d5", "a6", "d7"))


def check_dynamic(out):
    load = lambda run: np.load(f"{out}/dynamic_{run}/fc2.npy").astype(np.float64)
    host, cuda, ref = load("host"), load("cuda"), load("ref")
    assert host.shape == (100, 96), host.shape
    assert np.array_equal(host, cuda), "the host body and the CUDA body differ"
    # fc1's result is stored in bf16 by the kernels and by the reference alike, but rounded from
    # sums taken in another order: a value may round to its neighbour, one bf16 step of fc1
    # (2^-8 relative), which fc2 carries into its sums.
    worst = np.abs(host - ref).max() / np.abs(ref).max()
    assert worst <= 2.0 ** -7, f"{worst} of the scale from the reference"
    print("dynamic: 100 of 256 rows; host == CUDA bodies, bit for bit; within 2^-7 of the scale of the reference's")


if __name__ == "__main__":
    {"make": make, "check": check, "check-dynamic": check_dynamic}[sys.argv[1]](sys.argv[2])
