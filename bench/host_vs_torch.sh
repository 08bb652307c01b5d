#!/usr/bin/env bash
# The host backend against PyTorch on this machine's CPU, in one run (issue 21's figures): the
# seed CNN's training throughput at batch 64 (Adam, the same MNIST images) and its inference
# latency at batch 64, and torchvision's ResNet-18 at batch 1 exported to ONNX. Each kiln figure
# is given twice: as kiln runs by default (the host bodies of the GEMMs, reductions and norms:
# loop nests) and with KILN_HOST_CUDA_BODIES=1 (every kernel's CUDA body, on fibers where its
# threads cooperate: how kiln ran before host bodies). kiln's start-up (compiles) is excluded from the timed figures and reported apart.
# Figures only; nothing is asserted.
# This machine's speed drifts by 20-50 % within minutes (other tenants), so the training
# figures are ROUNDS (default 3) kiln/PyTorch pairs run back to back, each pair's ratio and the
# median ratio printed: read the ratios, not the absolute figures.
# Usage: [ROUNDS=N] bench/host_vs_torch.sh [build/kiln] [TRAIN_SAMPLES]
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${1:-build/kiln}
samples=${2:-4000}
threads=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { /usr/bin/python3 -c "import json, sys; print('%.2f' % json.load(sys.stdin)['latency_ms']['median'])"; }
prepare() { /usr/bin/python3 -c "import json, sys; print('%.0f' % sum(json.load(sys.stdin)['prepare_ms'].values()))"; }
img_per_s() { sed -n 's/.*trained [0-9]* steps in [0-9:]* (\([0-9]*\) img\/s.*/\1/p'; }

echo "Machine: $threads cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
echo "load $(cut -d' ' -f1-3 /proc/loadavg); PyTorch with $threads threads, kiln with $threads workers."
echo

train() {  # prints img/s and the compile time of `kiln train`
  local log=$work/train.log
  env "$@" "$kiln" train examples/mnist_cnn.json --data mnist --train-samples "$samples" \
    --test-samples 100 --epochs 1 --batch-size 64 --backend host --no-cache >"$log" 2>&1
  echo "$(img_per_s <"$log") img/s (compile $(sed -n 's/.*inference graph in \([0-9.]*\) s/\1 s/p' "$log"))"
}
torch_train() {
  /usr/bin/python3 bench/torch_train_mnist_cnn.py --train-samples "$samples" --batch-size 64 \
    --threads "$threads" | sed -n 's/.* = \([0-9]*\) img\/s.*/\1/p'
}
echo "| seed CNN training, batch 64, $samples images | kiln host, host bodies | PyTorch | kiln / PyTorch |"
echo "|---|---|---|---|"
ratios=()
for round in $(seq "${ROUNDS:-3}"); do
  kiln_figure=$(train KILN_HOST_CUDA_BODIES=0)
  torch_figure=$(torch_train)
  ratio=$(/usr/bin/python3 -c "print('%.2f' % (${kiln_figure%% *} / $torch_figure))")
  ratios+=("$ratio")
  echo "| round $round | $kiln_figure | $torch_figure img/s | ${ratio}x |"
done
echo "| median of the rounds | | | $(/usr/bin/python3 -c "import statistics, sys; print('%.2fx' % statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}") |"
echo "| kiln host, CUDA bodies (once) | $(train KILN_HOST_CUDA_BODIES=1) | | |"
echo

bench() {  # model, then env assignments: "median ms (prepare ms)"
  local model=$1
  shift
  local json
  json=$(env "$@" "$kiln" bench "$model" --backend host --iterations 20 --no-cache --json "${batch[@]}")
  echo "$(median <<<"$json") ms (start-up $(prepare <<<"$json") ms)"
}
/usr/bin/python3 - "$work/resnet18.onnx" <<'EOF'
import sys, torch, torchvision
net = torchvision.models.resnet18().eval()
torch.onnx.export(net, torch.randn(1, 3, 224, 224), sys.argv[1], opset_version=13)
EOF
echo "| inference | kiln host, host bodies | kiln host, CUDA bodies | PyTorch |"
echo "|---|---|---|---|"
batch=(--batch 64)
cnn_torch=$(/usr/bin/python3 bench/torch_run_model.py examples/mnist_cnn.json --batch 64 \
  --iterations 20 --threads "$threads" | median)
echo "| seed CNN, batch 64 | $(bench examples/mnist_cnn.json KILN_HOST_CUDA_BODIES=0) |" \
  "$(bench examples/mnist_cnn.json KILN_HOST_CUDA_BODIES=1) | $cnn_torch ms |"
batch=()
resnet_torch=$(/usr/bin/python3 - "$threads" <<'EOF'
import statistics, sys, time, torch, torchvision
torch.set_num_threads(int(sys.argv[1]))
net = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 224, 224)
with torch.no_grad():
    for _ in range(3):
        net(x)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        net(x)
        times.append((time.perf_counter() - start) * 1e3)
print("%.2f" % statistics.median(times))
EOF
)
echo "| ResNet-18, batch 1 | $(bench "$work/resnet18.onnx" KILN_HOST_CUDA_BODIES=0) |" \
  "$(bench "$work/resnet18.onnx" KILN_HOST_CUDA_BODIES=1) | $resnet_torch ms |"
