#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz/, with clang-14; only the libraries they need) and
# runs each for a bounded time. Any finding (crash, sanitizer report, uncaught exception,
# timeout, out-of-memory) fails the script, with the input saved under BUILD_DIR/findings/ and
# the command that reproduces it printed. Executions per harness are printed at the end.
# Usage: scripts/fuzz.sh [SECONDS_PER_HARNESS (default 30)] [HARNESS...]
#   env: KILN_FUZZ_BUILD (default build-fuzz: a build of its own, at -O1; or a sanitizer build
#        made with clang, whose harnesses link kiln's own libraries, as scripts/test.sh does),
#        KILN_FUZZ_JOBS (parallel harnesses, default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(model_json ir npy safetensors dataset onnx package keras infer_request)
dir=${KILN_FUZZ_BUILD:-build-fuzz}
jobs=${KILN_FUZZ_JOBS:-1}

start=$(date +%s)
mkdir -p "$dir"
if [ ! -f "$dir/build.ninja" ]; then
  if ! CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DKILN_FUZZ=ON \
         -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log" >&2
    exit 1
  fi
fi
if ! cmake --build "$dir" --target fuzzers -- -j"$(nproc)" >"$dir/build.log" 2>&1; then
  tail -n 60 "$dir/build.log" >&2
  echo "fuzz: build failed in $dir (full log: $dir/build.log)" >&2
  exit 1
fi
echo "fuzz: harnesses built in $(( $(date +%s) - start ))s"
# A sanitizer build's harnesses (scripts/test.sh fuzzes build-asan, built with clang) are linked
# against kiln's libraries at -O0: libFuzzer's entropic schedule then spends most of the time
# updating feature frequencies (perf: 83% of the ONNX harness's), so it is off there (ONNX:
# 111,000 executions in 20 s instead of 13,000, and more coverage).
schedule=()
grep -q '^KILN_SANITIZE:BOOL=ON' "$dir/CMakeCache.txt" 2>/dev/null && schedule=(-entropic=0)

# Seed corpora: the examples and the test files (split-file sections of lit tests one by one),
# plus the binary seeds of tests/fuzz/seeds/. The IR dictionary is every op name of ir/ops.def.
seeds=$dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{model_json,ir,npy,safetensors,dataset,onnx,package,keras,infer_request} "$dir/findings"
cp examples/*.json tests/lit/Inputs/*.json "$seeds/model_json/"
cp tests/lit/Inputs/*.ir "$seeds/ir/"
for file in tests/lit/*/*.ir; do cp "$file" "$seeds/ir/$(basename "$(dirname "$file")")_$(basename "$file")"; done
/usr/bin/python3 - "$seeds" tests/lit <<'PY'
import pathlib, re, sys
out, root = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for test in root.glob("*/*.test"):
    for name, body in re.findall(r"^(?://|#)--- (\S+)\n(.*?)(?=^(?://|#)--- |\Z)", test.read_text(), re.S | re.M):
        kind = "model_json" if name.endswith(".json") else "ir" if name.endswith(".ir") else None
        if kind:
            # A section may sit in a folder of its own (repo/bad/config.json): one file name.
            (out / kind / f"{test.stem}_{name.replace('/', '_')}").write_text(body)
PY
cp examples/data/*.npy tests/fuzz/seeds/npy/* "$seeds/npy/"
cp tests/fuzz/seeds/safetensors/* "$seeds/safetensors/"
cp tests/fuzz/seeds/dataset/* "$seeds/dataset/"
cp tests/fuzz/seeds/infer_request/* "$seeds/infer_request/"
# ONNX: the models of ONNX's own node tests (libonnx-testdata), when installed.
/usr/bin/python3 -c '
import pathlib, shutil, sys
for model in pathlib.Path("/usr/share/libonnx-testdata/data/node").glob("*/model.onnx"):
    shutil.copyfile(model, pathlib.Path(sys.argv[1]) / (model.parent.name + ".onnx"))
' "$seeds/onnx"
# Packages: small ones compiled by the normal build's kiln (CI builds it before fuzzing), one
# with PTX and one with only a cubin, and a tiny classifier's with its training step.
kiln=${KILN_BIN:-build/kiln}
if [ -x "$kiln" ]; then
  /usr/bin/python3 tests/lit/Inputs/make_chain.py 4 "$seeds/package/chain.json"
  cat >"$seeds/package/classifier.json" <<'JSON'
{"format": "kiln.model", "version": 1, "inputs": [{"name": "x", "shape": [1, 4]}],
 "parameters": [{"name": "w", "shape": [3, 4], "init": {"kind": "glorot_uniform", "seed": 1}},
                {"name": "b", "shape": [3], "init": {"kind": "zeros"}}],
 "nodes": [{"op": "dense", "name": "fc", "inputs": ["x", "w", "b"]},
           {"op": "softmax", "name": "probs", "inputs": ["fc"]}], "outputs": ["probs"]}
JSON
  "$kiln" compile "$seeds/package/chain.json" --arch sm_80 -o "$seeds/package/chain.kiln" >/dev/null
  "$kiln" compile "$seeds/package/chain.json" --arch sm_90 --no-ptx -o "$seeds/package/chain_cubin.kiln" >/dev/null
  "$kiln" compile "$seeds/package/classifier.json" --arch sm_80 --no-ptx --train --batch-size 2 \
      -o "$seeds/package/classifier_train.kiln" >/dev/null
  rm "$seeds/package/"*.json
else
  echo "fuzz: no $kiln (build it first): the package harness starts from an empty corpus" >&2
fi
# Keras: the example and the error-path models of the lit tests.
cp examples/mnist_cnn_keras.json tests/keras/inputs/*.json "$seeds/keras/"
# Past findings stay in the corpus: each must keep running clean.
for file in tests/fuzz/regressions/*; do
  name=${file##*/}
  cp "$file" "$seeds/${name%%-*}/"
done
{
  echo '# generated from ir/ops.def by scripts/fuzz.sh'
  grep -oE 'KILN_(OP|ACTIVATION|MATH)\([A-Za-z0-9]+, "[a-z0-9_]+"' ir/ops.def |
    sed -E 's/.*"([a-z0-9_]+)"/"\1("/'
  for word in graph params return loc kernel dense zeros ones uniform normal file '->' '%x' '@g' \
              f32 f16 bf16 f64 i32 i64 bool '[1,2]' '{axis = 1}' ': f32[2,3]' '"to"'; do
    printf '"%s"\n' "${word//\"/\\\"}"
  done
} >"$dir/ir.dict"

declare -A dict=([model_json]=tests/fuzz/json.dict [safetensors]=tests/fuzz/json.dict [keras]=tests/fuzz/json.dict
                 [ir]=$dir/ir.dict [npy]=tests/fuzz/npy.dict [infer_request]=tests/fuzz/json.dict)
declare -A max_len=([model_json]=65536 [ir]=16384 [npy]=4096 [safetensors]=4096 [dataset]=4096
                 [onnx]=16384 [package]=131072 [keras]=65536 [infer_request]=16384)

# The harnesses write each input to a scratch file. On a disk mounted with discard, truncating
# it costs a synchronous discard per execution (measured: npy at 1,700 executions/s on /tmp,
# 10,000 on tmpfs), so the scratch files go to tmpfs when there is one.
# They go under one directory of this script's, removed at its end: a run libFuzzer ends with
# _Exit (a timeout, an out-of-memory) leaves its harness's scratch directory behind.
scratch_base=${TMPDIR:-/tmp}
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then scratch_base=/dev/shm; fi
TMPDIR=$(mktemp -d "$scratch_base/kiln-fuzz.XXXXXX")
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT

run_one() {
  local harness=$1 corpus=$dir/corpus/$1 log=$dir/fuzz_$1.log
  mkdir -p "$corpus"
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$harness]}"
              -print_final_stats=1 -artifact_prefix="$dir/findings/$harness-")
  [ -n "${dict[$harness]:-}" ] && args+=(-dict="${dict[$harness]}")
  args+=("${schedule[@]}")
  # ASan's and UBSan's reports are findings; leaks are findings too (detect_leaks is the default).
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$dir/fuzz_$harness" "${args[@]}" "$corpus" "$seeds/$harness" >"$log" 2>&1
}

status=0
pids=()
names=()
for harness in "${harnesses[@]}"; do
  run_one "$harness" &
  pids+=($!)
  names+=("$harness")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || { echo "fuzz: FINDING in ${names[0]}"; status=1; }
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "fuzz: FINDING in ${names[$i]}"; status=1; }
done

for harness in "${harnesses[@]}"; do
  log=$dir/fuzz_$harness.log
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  printf 'fuzz: %-12s %12s executions in %ss\n' "$harness" "$runs" "$seconds"
  if grep -qE '^==[0-9]+==ERROR|runtime error:|deadly signal|Test unit written' "$log"; then
    grep -E 'ERROR|runtime error:|SUMMARY|Test unit written' "$log" | head -n 8
    echo "fuzz: reproduce with: $dir/fuzz_$harness $dir/findings/$harness-*   (log: $log)"
    status=1
  fi
done
echo "fuzz: done in $(( $(date +%s) - start ))s"
exit "$status"
