#!/usr/bin/env bash
# kiln compile --emit=cuda-project: the generated project builds with CMake and nvcc (for every
# arch of the package; no GPU needed). With a GPU, its outputs match `kiln run --backend=cuda`;
# without one, it stops with the CUDA runtime's one-line reason and exit 1.
# Usage: check_cuda_project.sh KILN EXAMPLES_DIR WORK_DIR
set -euo pipefail
kiln=$1 examples=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
nvcc=/usr/local/cuda/bin/nvcc
[ -x "$nvcc" ] || nvcc=$(command -v nvcc)

check() {  # MODEL INPUT_NAME INPUT_FILE
  local model=$1 name=$2 input=$3 stem
  stem=$(basename "$model" .json)
  "$kiln" compile "$model" --emit=cuda-project -o "$work/$stem" >/dev/null
  cmake -S "$work/$stem" -B "$work/$stem/build" -G Ninja -DCMAKE_CUDA_COMPILER="$nvcc" \
        >"$work/$stem.configure.log" 2>&1 || { cat "$work/$stem.configure.log"; exit 1; }
  cmake --build "$work/$stem/build" >"$work/$stem.build.log" 2>&1 || { cat "$work/$stem.build.log"; exit 1; }
  if grep -qi "warning" "$work/$stem.build.log"; then cat "$work/$stem.build.log"; exit 1; fi
  echo "$stem: built with nvcc"
  mkdir -p "$work/$stem/out" "$work/$stem/ref"
  if "$work/$stem/build/$stem" --input "$name=$input" --weights "$work/$stem/weights.bin" \
        --output-dir "$work/$stem/out" 2>"$work/$stem.run.log"; then
    "$kiln" run "$model" --backend=cuda --library=none --input "$name=$input" --output-dir "$work/$stem/ref" >/dev/null
    /usr/bin/python3 - "$work/$stem/out" "$work/$stem/ref" <<'PY'
import sys, pathlib, numpy as np
for ref in pathlib.Path(sys.argv[2]).glob("*.npy"):
    got = np.load(pathlib.Path(sys.argv[1]) / ref.name)
    assert np.allclose(got, np.load(ref), rtol=1e-5, atol=1e-6), ref.name
PY
    echo "$stem: outputs match kiln run --backend=cuda"
  else
    status=$?
    cat "$work/$stem.run.log"
    # Exactly exit 1 with the reason: a crash (or a sanitizer's report) after it is a failure.
    if [ "$status" != 1 ] || ! grep -q "^$stem: cudaGetDeviceCount: " "$work/$stem.run.log"; then
      echo "$stem: exited $status without a GPU; expected exit 1 after '$stem: cudaGetDeviceCount: ...'" >&2
      exit 1
    fi
    echo "$stem: no GPU here; the program said why and exited 1"
  fi
}

check "$examples/mnist_cnn.json" image "$examples/data/mnist_cnn.image.npy"
check "$examples/resnet_block.json" x "$examples/data/resnet_block.x.npy"
