#!/usr/bin/env bash
# Figures for AOT artifacts: package and executable sizes, and load times of a package on the
# host backend, cold (an empty kernel cache: the packaged source is compiled) and cached, for
# the seed CNN and ResNet-50. Figures only; nothing is asserted.
# Usage: bench/package_report.sh [build/kiln]
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=$(realpath "${1:-build/kiln}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -c "
import numpy as np
np.save('$work/resnet50.x.npy', np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32))"

ms() { echo $(( ($2 - $1) / 1000000 )); }
report() {  # MODEL INPUT_NAME INPUT_FILE
  local model=$1 name=$2 input=$3 stem t0 t1 t2 t3
  stem=$(basename "$model" .json)
  export KILN_CACHE_DIR=$work/cache-$stem
  t0=$(date +%s%N)
  "$kiln" compile "$model" -o "$work/$stem.kiln" >/dev/null
  t1=$(date +%s%N)
  "$kiln" compile "$model" --emit=exe -o "$work/$stem.exe" >/dev/null
  rm -rf "$KILN_CACHE_DIR"
  t2=$(date +%s%N)
  "$kiln" run "$work/$stem.kiln" --backend=host --input "$name=$input" --timings >/dev/null 2>"$work/cold.txt"
  t3=$(date +%s%N)
  "$kiln" run "$work/$stem.kiln" --backend=host --input "$name=$input" --timings >/dev/null 2>"$work/warm.txt"
  echo "== $stem"
  echo "  package:     $(stat -c %s "$work/$stem.kiln") bytes (kiln compile, empty kernel cache: $(ms "$t0" "$t1") ms)"
  echo "  executable:  $(stat -c %s "$work/$stem.exe") bytes"
  echo "  kiln run on the package, host backend, cold cache (wall $(ms "$t2" "$t3") ms):"
  sed 's/^/    /' "$work/cold.txt"
  echo "  the same, cached:"
  sed 's/^/    /' "$work/warm.txt"
}
report examples/mnist_cnn.json image examples/data/mnist_cnn.image.npy
report examples/resnet50.json image "$work/resnet50.x.npy"
