#!/usr/bin/env bash
# Inference latency side by side: `kiln bench` (host backend: the generated CUDA kernels on this
# machine's CPU; and the reference interpreter) against the same graph in PyTorch on the same
# CPU (bench/torch_run_model.py), in one run, as a markdown table. Figures only; nothing is
# asserted. On a machine with a GPU, add --backend=cuda to the kiln lines.
# Usage: bench/inference_vs_torch.sh [build/kiln] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${1:-build/kiln}
iterations=${2:-10}
models=(examples/mlp.json examples/mnist_cnn.json examples/resnet_block.json examples/resnet50.json)
median() { /usr/bin/python3 -c "import json, sys; print('%.3f' % json.load(sys.stdin)['latency_ms']['median'])"; }
echo "Machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $iterations timed runs after 3 warm-up, median latency in ms"
echo
echo "| model | kiln host | kiln reference | PyTorch CPU ($(nproc) threads) | kiln host / PyTorch |"
echo "|---|---|---|---|---|"
for model in "${models[@]}"; do
  host=$("$kiln" bench "$model" --backend=host --iterations "$iterations" --json | median)
  # The reference interpreter is the oracle, not a fast path: ResNet-50 takes minutes per run.
  if [ "$model" = examples/resnet50.json ]; then
    reference="—"
  else
    reference=$("$kiln" bench "$model" --backend=reference --iterations 3 --warmup 1 --json | median)
  fi
  torch=$(/usr/bin/python3 bench/torch_run_model.py "$model" --iterations "$iterations" --threads "$(nproc)" | median)
  ratio=$(/usr/bin/python3 -c "print('%.1fx' % ($host / $torch))")
  echo "| $(basename "$model" .json) | $host | $reference | $torch | $ratio |"
done
