#!/usr/bin/env bash
# Renders the fused kernels of a model (`kiln inspect MODEL --dot`) as SVG with Graphviz.
# Re-run it when fusion or codegen changes the kernels, so the README's picture stays true.
# Usage: scripts/render_kernel_graph.sh [MODEL [OUT.svg]]
#   defaults: examples/mnist_cnn.json -> docs/images/mnist_cnn_kernels.svg; the tool is
#   $KILN (default build/kiln). Graphviz is Debian's `graphviz` package; the tests never need it.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-examples/mnist_cnn.json}
out=${2:-docs/images/$(basename "${model%.*}")_kernels.svg}
kiln=${KILN:-build/kiln}

if ! command -v dot >/dev/null; then
  echo "render_kernel_graph: Graphviz's dot is not installed (apt-get install graphviz)" >&2
  exit 1
fi
[ -x "$kiln" ] || { echo "render_kernel_graph: $kiln not found; build first (scripts/build.sh)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$kiln" inspect "$model" --dot "$tmp/kernels.dot" >/dev/null
mkdir -p "$(dirname "$out")"
dot -Tsvg "$tmp/kernels.dot" -o "$tmp/kernels.svg"
mv "$tmp/kernels.svg" "$out"
echo "wrote $out"
