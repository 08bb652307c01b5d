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
"$kiln" run "$model" --backend=reference "${args[@]}" --output-dir "$out/reference"
"$kiln" run "$model" --backend=host "${args[@]}" --output-dir "$out/host"
# Float accumulation order differs between the kernels and the interpreter (which sums in
# double): agree to 1e-4 relative to each output's scale.
/usr/bin/python3 - "$out" <<'PY'
import glob, os, sys
import numpy as np
out = sys.argv[1]
refs = sorted(glob.glob(os.path.join(out, "reference", "*.npy")))
assert refs, "no outputs written"
for ref_path in refs:
    host_path = os.path.join(out, "host", os.path.basename(ref_path))
    ref, host = np.load(ref_path), np.load(host_path)
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(ref.astype(np.float64) - host).max())
    print(f"{os.path.basename(ref_path)}: host vs reference max error {err:.3g} (scale {scale:.3g})")
    assert err <= 1e-4 * scale, f"{ref_path}: host backend differs from the reference"
PY
