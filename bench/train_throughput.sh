#!/usr/bin/env bash
# Training throughput of the seed CNN: kiln's fused training step on the host backend against
# the same network in PyTorch on this machine's CPU (bench/torch_train_mnist_cnn.py), on the
# same 12,000 MNIST images, batch 16, Adam. Figures only; nothing is asserted.
# Usage: bench/train_throughput.sh [build/kiln]
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${1:-build/kiln}
echo "== kiln (host backend, $(nproc) cores)"
"$kiln" train examples/mnist_cnn.json --data mnist --train-samples 12000 --test-samples 1000 \
  --epochs 1 --batch-size 16 --backend host --print-plan
echo "== PyTorch CPU"
/usr/bin/python3 bench/torch_train_mnist_cnn.py --train-samples 12000 --batch-size 16 --threads "$(nproc)"
