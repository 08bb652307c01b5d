#!/usr/bin/env bash
# The main job: install what is missing, build kiln, and run the seed CNN
# (examples/mnist_cnn.json) on a sample digit with the reference interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
echo "== kiln opt examples/mnist_cnn.json (first lines)"
build/kiln opt examples/mnist_cnn.json | head -n 12
echo "== kiln run examples/mnist_cnn.json --backend=reference"
build/kiln run examples/mnist_cnn.json --backend=reference \
  --input image=examples/data/mnist_cnn.image.npy --output-dir out/mnist_cnn
