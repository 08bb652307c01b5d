#!/usr/bin/env bash
# The main job: install what is missing, build kiln, and train the seed CNN
# (examples/mnist_cnn.json) on MNIST: one epoch over the first 12,000 training images, then the
# test accuracy on the first 1,000 test images (about 96%). On the GPU when there is one, else
# on the CPU through the host backend (about two minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
echo "== kiln train examples/mnist_cnn.json --data mnist"
build/kiln train examples/mnist_cnn.json --data mnist --train-samples 12000 --test-samples 1000 \
  --epochs 1 --batch-size 16 --optimizer adam --lr 1e-3 --backend auto \
  --checkpoint out/mnist_cnn.safetensors
