#!/usr/bin/env bash
# Fusion and memory-plan figures per example, from `kiln inspect --format=json` at -O1 and -O0:
# kernels before/after fusion, modeled DRAM bytes before/after, and the memory plan.
# Usage: bench/fusion_report.sh [KILN] [MODEL.json ...]   (defaults: build/kiln, three examples)
set -euo pipefail
kiln=${1:-build/kiln}
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(examples/mnist_cnn.json examples/resnet_block.json examples/resnet50.json)
for model in "${models[@]}"; do
  "$kiln" inspect "$model" -O0 --format=json > /tmp/kiln_fusion_O0.json
  "$kiln" inspect "$model" --format=json > /tmp/kiln_fusion_O1.json
  /usr/bin/python3 - "$model" /tmp/kiln_fusion_O0.json /tmp/kiln_fusion_O1.json <<'PY'
import json, sys
model, o0, o1 = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
t0, t1, m = o0["totals"], o1["totals"], o1["memory"]
print(f"{model}: kernels -O0 {t0['kernels']}, -O1 {t1['kernels_before_fusion']} before fusion -> "
      f"{t1['kernels']} after; DRAM bytes {t1['dram_bytes_before_fusion']} -> {t1['dram_bytes']} "
      f"({t1['dram_bytes_before_fusion'] / t1['dram_bytes']:.2f}x; -O0 {t0['dram_bytes']}); "
      f"arena naive {m['naive_bytes']} / planned {m['planned_bytes']} / lower bound "
      f"{m['lower_bound_bytes']}: planned/lower bound {m['ratio_to_lower_bound']:.2f}, "
      f"naive/planned {m['naive_over_planned']:.2f}; modeled H100 {t1['modeled_seconds'] * 1e6:.2f} us "
      f"(-O0 {t0['modeled_seconds'] * 1e6:.2f} us)")
PY
done
