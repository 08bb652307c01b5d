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

check() {  # MODEL INPUT_NAME INPUT_FILE [PRECISION]
  local model=$1 name=$2 input=$3 precision=${4:-f32} stem dir
  stem=$(basename "$model" .json)  # the program's name
  dir=$stem                        # its project's directory under $work
  [ "$precision" = f32 ] || dir="${stem}_$precision"
  "$kiln" compile "$model" --emit=cuda-project --precision="$precision" -o "$work/$dir" >/dev/null
  cmake -S "$work/$dir" -B "$work/$dir/build" -G Ninja -DCMAKE_CUDA_COMPILER="$nvcc" \
        >"$work/$dir.configure.log" 2>&1 || { cat "$work/$dir.configure.log"; exit 1; }
  cmake --build "$work/$dir/build" >"$work/$dir.build.log" 2>&1 || { cat "$work/$dir.build.log"; exit 1; }
  if grep -qi "warning" "$work/$dir.build.log"; then cat "$work/$dir.build.log"; exit 1; fi
  echo "$dir: built with nvcc"
  mkdir -p "$work/$dir/out" "$work/$dir/ref"
  if "$work/$dir/build/$stem" --input "$name=$input" --weights "$work/$dir/weights.bin" \
        --output-dir "$work/$dir/out" 2>"$work/$dir.run.log"; then
    "$kiln" run "$model" --backend=cuda --library=none --precision="$precision" --input "$name=$input" --output-dir "$work/$dir/ref" >/dev/null
    /usr/bin/python3 - "$work/$dir/out" "$work/$dir/ref" <<'PY'
import sys, pathlib, numpy as np
for ref in pathlib.Path(sys.argv[2]).glob("*.npy"):
    got = np.load(pathlib.Path(sys.argv[1]) / ref.name)
    assert np.allclose(got, np.load(ref), rtol=1e-5, atol=1e-6), ref.name
PY
    echo "$dir: outputs match kiln run --backend=cuda"
  else
    status=$?
    cat "$work/$dir.run.log"
    # Exactly exit 1 with the reason: a crash (or a sanitizer's report) after it is a failure.
    if [ "$status" != 1 ] || ! grep -q "^$stem: cudaGetDeviceCount: " "$work/$dir.run.log"; then
      echo "$stem: exited $status without a GPU; expected exit 1 after '$stem: cudaGetDeviceCount: ...'" >&2
      exit 1
    fi
    echo "$dir: no GPU here; the program said why and exited 1"
  fi
}

check "$examples/mnist_cnn.json" image "$examples/data/mnist_cnn.image.npy"
check "$examples/resnet_block.json" x "$examples/data/resnet_block.x.npy"
# Tensor cores: mma.sync, cp.async and their helpers build without a warning under nvcc too.
check "$examples/mnist_cnn.json" image "$examples/data/mnist_cnn.image.npy" tf32
