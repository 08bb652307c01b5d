#!/usr/bin/env bash
# Runs one example model with its sample inputs (examples/data/<model>.<input name>.npy) on
# the reference interpreter and on the host backend (the generated CUDA kernels on the CPU),
# and checks that both wrote every output and that they agree.
# Usage: run_example.sh KILN MODEL.json OUTPUT_DIR
set -euo pipefail
kiln=$1 model=$2 out=$3
stem=$(basename "$model" .json)
data_dir=$(dirname "$model")/data
args=()
for file in "$data_dir/$stem".*.npy; do
  [ -e "$file" ] || { echo "no sample input for $stem in $data_dir" >&2; exit 1; }
  name=${file#"$data_dir/$stem."}
  args+=(--input "${name%.npy}=$file")
done
rm -rf "$out"
# The oracle: the reference interpreter on the graph as written (-O0). Then the optimized graph
# on the interpreter, and the generated kernels on the host backend, unoptimized and optimized.
"$kiln" run "$model" --backend=reference -O0 "${args[@]}" --output-dir "$out/reference"
"$kiln" run "$model" --backend=reference -O1 "${args[@]}" --output-dir "$out/reference-O1"
"$kiln" run "$model" --backend=host -O0 "${args[@]}" --output-dir "$out/host-O0"
"$kiln" run "$model" --backend=host -O1 "${args[@]}" --output-dir "$out/host"
# Float accumulation order differs between the kernels and the interpreter (which sums in
# double), and folding reassociates: agree to 1e-4 relative to each output's scale.
/usr/bin/python3 - "$out" <<'PY'
import glob, os, sys
import numpy as np
out = sys.argv[1]
refs = sorted(glob.glob(os.path.join(out, "reference", "*.npy")))
assert refs, "no outputs written"
for ref_path in refs:
    ref = np.load(ref_path)
    scale = max(1.0, float(np.abs(ref).max()))
    for other in ("reference-O1", "host-O0", "host"):
        got = np.load(os.path.join(out, other, os.path.basename(ref_path)))
        err = float(np.abs(ref.astype(np.float64) - got).max())
        print(f"{os.path.basename(ref_path)}: {other} vs reference -O0: max error {err:.3g} (scale {scale:.3g})")
        assert err <= 1e-4 * scale, f"{ref_path}: {other} differs from the reference"
PY
