#!/usr/bin/env bash
# The Keras importer against TensorFlow.js: make_models.js builds real tfjs-layers models with
# seeded weights and saves their predictions; kiln runs the same model.json files (reference
# backend for all, the host backend for one) and must match (rtol 1e-4). `kiln import` of one
# model must run to the same result as the model itself.
# MultiHeadAttention models (make_attention.mjs) too, read only from the Keras files.
# The same models written as Keras HDF5 (write_keras_h5: a Keras 2 whole-model .h5, and a Keras 3
# model JSON with its .weights.h5 beside it) must match too.
#   usage: check_keras.sh KILN_BINARY WORK_DIR WRITE_KERAS_H5_BINARY
set -euo pipefail
kiln=$1
work=$2
write_h5=$3
here=$(cd "$(dirname "$0")" && pwd)
npm_modules=${KILN_NPM_MODULES:-/opt/kiln/npm/node_modules}
if [ ! -d "$npm_modules/@tensorflow/tfjs-layers" ]; then
  echo "check_keras: @tensorflow/tfjs-layers is not installed in $npm_modules (scripts/setup.sh --tests)" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work"
NODE_PATH="$npm_modules" node "$here/make_models.js" "$work" 2>&1 | grep -v -e '^=*$' -e 'Hi, looks like' -e '^$' || true

compare() {  # compare.py EXPECTED ACTUAL
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, numpy as np
expected, actual = np.load(sys.argv[1]), np.load(sys.argv[2])
if expected.shape != actual.shape:
    sys.exit(f"{sys.argv[2]}: shape {actual.shape}, tfjs {expected.shape}")
err = np.abs(expected - actual) / (np.abs(expected) + 1e-6)
if not np.allclose(actual, expected, rtol=1e-4, atol=1e-6):
    sys.exit(f"{sys.argv[2]}: differs from tfjs, max relative error {err.max():.3g}")
print(f"  {sys.argv[2].split('/')[-1]}: matches tfjs {expected.shape}, max |diff| {np.abs(expected - actual).max():.2g}")
PY
}

# run MODEL_DIR BACKEND [MODEL_FILE]
run() {
  local dir=$1 backend=$2 model=${3:-$1/model.json} inputs=() out="$1/out-$2"
  while read -r kind name file; do
    [ "$kind" = input ] && inputs+=(-i "$name=$dir/$file")
  done <"$dir/io.txt"
  echo "$(basename "$dir") (${model#"$work"/}) on $backend:"
  "$kiln" run "$model" --backend="$backend" "${inputs[@]}" --output-dir "$out" >/dev/null
  while read -r kind name file; do
    [ "$kind" = output ] && compare "$dir/$file" "$out/$name.npy"
  done <"$dir/io.txt"
}

for model in seq_cnn branches seq_misc tokens; do
  run "$work/$model" reference
done
run "$work/branches" host
run "$work/tokens" host

# Keras HDF5: the same weights read from a Keras 2 whole-model .h5 and a Keras 3 .weights.h5.
for model in seq_cnn branches; do
  "$write_h5" "$work/$model" "$work/$model"
  run "$work/$model" reference "$work/$model/model.h5"
  run "$work/$model" reference "$work/$model/keras3/model.json"
done

# kiln import writes kiln JSON + safetensors that run to the same result (the batch fixed by
# --input-shape, NHWC as the model's input).
"$kiln" import "$work/seq_cnn/model.json" --input-shape conv_a_input=2x12x12x3 \
    -o "$work/seq_cnn/imported.json" >/dev/null
run "$work/seq_cnn" reference "$work/seq_cnn/imported.json"
# MultiHeadAttention, against tfjs-layers' port of Keras's layer (make_attention.mjs): as a
# Keras 2 .h5 and a Keras 3 model JSON + .weights.h5, on both backends; one compile for sm_80
# and sm_90 (the attention kernel through NVRTC and ptxas), and one run with a dynamic batch.
(cd "$here" && KILN_NPM_MODULES="$npm_modules" node --no-warnings --loader ./esm_loader.mjs make_attention.mjs "$work") \
    2>&1 | grep -v -e '^=*$' -e 'Hi, looks like' -e '^$' || true
for model in mha_causal mha_cross; do
  "$write_h5" "$work/$model" "$work/$model"
  for backend in reference host; do
    run "$work/$model" "$backend" "$work/$model/model.h5"
    run "$work/$model" "$backend" "$work/$model/keras3/model.json"
  done
done
# kiln import keeps the output's name (the layer's), though the layer's last op is not its first.
"$kiln" import "$work/mha_cross/model.h5" --input-shape query=2x4x6 --input-shape value=2x5x8 \
    --input-shape key=2x5x7 --input-shape mask=2x4x5 -o "$work/mha_cross/imported.json" >/dev/null
run "$work/mha_cross" reference "$work/mha_cross/imported.json"
"$kiln" compile "$work/mha_cross/model.h5" --arch sm_80,sm_90 -o "$work/mha_cross/model.kiln" >/dev/null
"$kiln" inspect "$work/mha_cross/model.kiln" >"$work/mha_cross/inspect.txt"
grep -q '^attention_' "$work/mha_cross/inspect.txt" || { echo "mha_cross: no attention kernel" >&2; exit 1; }
echo "mha_causal (mha_causal/model.h5, --dim batch=4) on reference:"
"$kiln" run "$work/mha_causal/model.h5" --dim batch=4 -i "tokens=$work/mha_causal/input0.npy" \
    --output-dir "$work/mha_causal/out-dynamic" >/dev/null
compare "$work/mha_causal/expected_mha.npy" "$work/mha_causal/out-dynamic/mha.npy"
echo "check_keras: all models match TensorFlow.js"
