"""The bf16 outputs of epilogue_cast.test against the reference's.

f32 GEMM: the reference and the host backend round gelu(x w^T + b) to bf16 once each, from f32
sums added in different orders: they may land on neighbouring bf16 values, never further apart
than 1 ulp (2^-7 of the value's binade: |got - want| <= 2^-7 |want|).
bf16 tensor cores: x and w are rounded to bf16 (u = 2^-8 each) before the products, so the sum
moves by at most 2u sum|x||w| (to first order), GELU's slope (at most 1.13) carries that to the
result, and the store's rounding adds 2^-7 of the result."""
import sys

import numpy as np

d = sys.argv[1]
x, w = np.load(f"{d}/x.npy").astype(np.float64), np.load(f"{d}/w.npy").astype(np.float64)
want = np.load(f"{d}/ref/h.npy").astype(np.float64)
host = np.load(f"{d}/host/h.npy").astype(np.float64)
bf16 = np.load(f"{d}/bf16/h.npy").astype(np.float64)

f32_ok = np.all(np.abs(host - want) <= 2.0 ** -7 * np.abs(want))
print("f32: within 1 bf16 ulp of the reference" if f32_ok else
      f"f32: off by {np.abs(host - want).max()}")
bound = 1.13 * 2 * 2.0 ** -8 * (np.abs(x) @ np.abs(w).T) + 2.0 ** -7 * np.abs(want) + 1e-6
excess = np.abs(bf16 - want) - bound
print("bf16 tensor cores: within the derived bound" if np.all(excess <= 0) else
      f"bf16 tensor cores: beyond the bound by {excess.max()}")
