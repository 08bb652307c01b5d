#!/usr/bin/env bash
# Runs one example model on the reference interpreter with its sample inputs
# (examples/data/<model>.<input name>.npy) and checks that every output was written.
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
"$kiln" run "$model" --backend=reference "${args[@]}" --output-dir "$out"
count=$(find "$out" -name '*.npy' | wc -l)
[ "$count" -ge 1 ] || { echo "no outputs written to $out" >&2; exit 1; }
