#!/usr/bin/env bash
# The compile report in a browser: `kiln inspect --html` of a model (the seed CNN) and of a
# package (the ResNet block, through kiln compile), each loaded in headless Chromium with no
# console errors (check_report.cjs). Usage: check_reports.sh KILN EXAMPLES_DIR WORK_DIR
set -euo pipefail
kiln=$1 examples=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
export NODE_PATH=/opt/kiln/npm/node_modules

"$kiln" inspect "$examples/mnist_cnn.json" --html "$work/mnist_cnn.html" >/dev/null
node "$here/check_report.cjs" "$work/mnist_cnn.html" 7 "$work/mnist_cnn.png"

"$kiln" compile "$examples/resnet_block.json" -o "$work/resnet_block.kiln" >/dev/null
"$kiln" inspect "$work/resnet_block.kiln" --html "$work/resnet_block.html" >/dev/null
node "$here/check_report.cjs" "$work/resnet_block.html" 2 "$work/resnet_block.png"
