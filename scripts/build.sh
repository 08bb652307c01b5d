#!/usr/bin/env bash
# Configures and builds kiln (the tool is BUILD_DIR/kiln, build/kiln by default). The compiler's
# output goes to BUILD_DIR/build.log; on failure its end is printed.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake arguments...]
#   KILN_BUILD_TARGET="T..." builds those targets only (default: everything).
# With ccache installed (scripts/setup.sh installs it) compiles go through it, keyed on paths
# relative to the checkout, so a second clone on the same machine reuses the first one's objects.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cuda_root=()
[ -d /usr/local/cuda ] && cuda_root=(-DCUDAToolkit_ROOT=/usr/local/cuda)
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # The precompiled headers (CMakeLists.txt) are cached only with these sloppinesses.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true CCACHE_SLOPPINESS=pch_defines,time_macros
fi
mkdir -p "$dir"
# The build type is CMakeLists.txt's default (RelWithDebInfo) unless the arguments, now or at an
# earlier configure of this directory, chose another: scripts/main.sh after scripts/test.sh
# reuses test.sh's build as it is.
if ! cmake -S . -B "$dir" -G Ninja "${cuda_root[@]}" \
     "${launcher[@]}" "$@" \
     >"$dir/configure.log" 2>&1; then
  cat "$dir/configure.log" >&2
  exit 1
fi
start=$(date +%s)
target=()
# shellcheck disable=SC2206  # several targets are separated by spaces
[ -n "${KILN_BUILD_TARGET:-}" ] && target=(--target ${KILN_BUILD_TARGET})
if ! cmake --build "$dir" "${target[@]}" -- -j"$(nproc)" >"$dir/build.log" 2>&1; then
  tail -n 80 "$dir/build.log" >&2
  echo "build failed in $dir (full log: $dir/build.log)" >&2
  exit 1
fi
echo "built $dir/kiln in $(( $(date +%s) - start ))s"
