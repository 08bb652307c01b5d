#!/usr/bin/env bash
# Configures and builds kiln (the tool is BUILD_DIR/kiln, build/kiln by default). The compiler's
# output goes to BUILD_DIR/build.log; on failure its end is printed.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cuda_root=()
[ -d /usr/local/cuda ] && cuda_root=(-DCUDAToolkit_ROOT=/usr/local/cuda)
mkdir -p "$dir"
if ! cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda_root[@]}" "$@" \
     >"$dir/configure.log" 2>&1; then
  cat "$dir/configure.log" >&2
  exit 1
fi
start=$(date +%s)
if ! cmake --build "$dir" -- -j"$(nproc)" >"$dir/build.log" 2>&1; then
  tail -n 80 "$dir/build.log" >&2
  echo "build failed in $dir (full log: $dir/build.log)" >&2
  exit 1
fi
echo "built $dir/kiln in $(( $(date +%s) - start ))s"
