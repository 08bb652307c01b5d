#!/usr/bin/env bash
# The C++ API as a user gets it: `cmake --install` kiln into a fresh prefix, build
# examples/embed against it with find_package(kiln), and run it on a package: its outputs equal
# `kiln run`'s bit for bit; a training package takes steps; a damaged package is kiln::Error.
# Usage: check_embed.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work/out" "$work/ref"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$source/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
      >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/embed" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
embed=$work/embed/embed kiln=$work/prefix/bin/kiln
image=$source/examples/data/mnist_cnn.image.npy

"$kiln" compile "$source/examples/mnist_cnn.json" -o "$work/mnist.kiln" >/dev/null
"$embed" "$work/mnist.kiln" "$work/out" image="$image"
"$kiln" run "$work/mnist.kiln" --backend=auto --input image="$image" --output-dir "$work/ref" >/dev/null
cmp "$work/out/probs.npy" "$work/ref/probs.npy"
echo "embed == kiln run: probs.npy identical"

# A model file is compiled at start-up, through the same API.
"$embed" "$source/examples/mnist_cnn.json" "$work/out" image="$image" >/dev/null
cmp "$work/out/probs.npy" "$work/ref/probs.npy"

# Training: three steps on one batch of 4 lower the loss.
"$kiln" compile "$source/examples/mnist_cnn.json" --train --batch-size 4 -o "$work/train.kiln" >/dev/null
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
np.save(f"{sys.argv[1]}/batch.npy", rng.random((4, 1, 28, 28), dtype=np.float32))
np.save(f"{sys.argv[1]}/labels.npy", np.array([1, 7, 3, 3], dtype=np.int32))
np.save(f"{sys.argv[1]}/image4.npy", rng.random((4, 1, 28, 28), dtype=np.float32))
PY
"$embed" "$work/train.kiln" "$work/out" --train "$work/batch.npy" "$work/labels.npy" 3 \
    image="$work/image4.npy" | tee "$work/train.log"
/usr/bin/python3 - "$work/train.log" <<'PY'
import re, sys
losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", open(sys.argv[1]).read())]
assert len(losses) == 3 and losses[2] < losses[0], losses
PY

# Errors are kiln::Error, exit 1 in the example.
head -c 1000 "$work/mnist.kiln" > "$work/truncated.kiln"
# Exactly exit 1 after the message: a crash once the message is out must not pass.
status=0
"$embed" "$work/truncated.kiln" "$work/out" 2>"$work/error.log" || status=$?
if [ "$status" != 1 ] || ! grep -q "truncated.kiln: error: truncated package" "$work/error.log"; then
  cat "$work/error.log" >&2
  echo "a truncated package: exit $status, expected 1 with 'error: truncated package'" >&2
  exit 1
fi
# The Python package, installed into the prefix's dist-packages: the same probs.
python=$(/usr/bin/python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
if [ ! -d "$work/prefix/lib/$python/dist-packages/kiln" ]; then
  echo "skipped the Python package: not installed (kiln was configured with -DKILN_PYTHON=OFF)"
else
PYTHONPATH=$work/prefix/lib/$python/dist-packages /usr/bin/python3 - "$work" "$image" <<'PY'
import os, sys, numpy as np, kiln
work, image = sys.argv[1:]
assert kiln.__file__.startswith(os.path.join(work, "prefix")), kiln.__file__
probs = kiln.load(os.path.join(work, "mnist.kiln"))(np.load(image))
assert np.array_equal(probs, np.load(os.path.join(work, "ref", "probs.npy")))
print("installed kiln Python package == kiln run")
PY
fi

# The installed prefix holds libkiln.a with its debug information (hundreds of MB): a pass
# leaves only the small files behind.
rm -rf "$work/prefix" "$work/embed"
echo "embed: all checks passed"
