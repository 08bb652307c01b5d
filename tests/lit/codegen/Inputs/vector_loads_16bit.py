"""usage: vector_loads_16bit.py KILN MODEL DIR — runs vector_loads_16bit.ir at -O0 on the reference
and, at each precision, on the host backend twice: with the GEMMs' host bodies and with their
CUDA bodies (KILN_HOST_CUDA_BODIES=1). The two must be equal byte for byte; both must match the
reference within the format's rounding: 1e-3 of each output's scale (two chained f16 GEMMs),
1e-2 on bf16 units (8 significant bits). Prints one line per precision."""
import os
import subprocess
import sys

import numpy as np

OUTPUTS = ("down", "square", "conv")
TOLERANCE = {"f32": 1e-3, "tf32": 1e-3, "f16": 1e-3, "bf16": 1e-2}


def run(kiln, model, directory, out, *flags, env=None):
    inputs = [arg for name in ("x", "y", "img") for arg in ("-i", f"{name}={directory}/{name}.npy")]
    subprocess.run([kiln, "run", model, "-O0", *flags, *inputs, "-o", out], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def main():
    kiln, model, directory = sys.argv[1:4]
    os.makedirs(directory, exist_ok=True)
    r = np.random.default_rng(3)
    np.save(f"{directory}/x.npy", r.standard_normal((2, 70, 48)).astype(np.float16))
    np.save(f"{directory}/y.npy", r.standard_normal((64, 64)).astype(np.float32))
    np.save(f"{directory}/img.npy", r.standard_normal((2, 16, 8, 8)).astype(np.float16))
    run(kiln, model, directory, f"{directory}/ref", "--backend=reference")
    cache = {"KILN_CACHE_DIR": f"{directory}/cache"}
    for precision, tolerance in TOLERANCE.items():
        host, cuda = f"{directory}/host_{precision}", f"{directory}/cuda_{precision}"
        run(kiln, model, directory, host, "--backend=host", f"--precision={precision}", env=cache)
        run(kiln, model, directory, cuda, "--backend=host", f"--precision={precision}",
            env={**cache, "KILN_HOST_CUDA_BODIES": "1"})
        errors = []
        for name in OUTPUTS:
            with open(f"{host}/{name}.npy", "rb") as a, open(f"{cuda}/{name}.npy", "rb") as b:
                if a.read() != b.read():
                    sys.exit(f"{precision} {name}: the CUDA bodies differ from the host bodies")
            got = np.load(f"{cuda}/{name}.npy").astype(np.float64)
            want = np.load(f"{directory}/ref/{name}.npy").astype(np.float64)
            error = np.abs(got - want).max() / np.abs(want).max()
            if error > tolerance:
                sys.exit(f"{precision} {name}: max error {error:.3g} of the scale, over {tolerance}")
            errors.append(f"{name} {error:.2g}")
        print(f"{precision}: CUDA bodies == host bodies; reference within {tolerance}: {', '.join(errors)}")


if __name__ == "__main__":
    main()
