#!/usr/bin/env bash
# Data-parallel training under mpirun (docs/distributed.md) against one process on the same
# global batches: the seed CNN (dropout included) for 32 steps of 16 MNIST images.
#   - `mpirun -np 2 ... --batch-size 8` and `-np 4 ... --batch-size 4` (oversubscribed on 2
#     cores) against one process with --batch-size 16:
#       - with --batch-invariant (Adam): the final state bitwise equal, and every step's loss
#         within 1e-6 (relative; the loss value is each rank's mean, added by the trainer).
#         Sums over the batch are per-sample partials added in one tree (pairwise_sum), and the
#         ranks' sums are added in the same tree, so every cut of the batch adds the same numbers
#         in the same order;
#       - by default (SGD, momentum 0.9): every tensor of the final state and every loss within
#         1e-6. Not bitwise: each rank sums its shard's gradients sample after sample, then the
#         ranks' sums are added, where one process sums the 16 samples in one run. (Adam, whose
#         update divides each gradient by its own running magnitude, turns those last bits into
#         ~2e-5 on near-zero gradients: why --batch-invariant exists.) The figures are printed.
#   - a model with batch norm trains under mpirun (its running statistics broadcast from rank 0);
#   - resuming a 2-rank run from its checkpoint (rank 0 reads it, every rank gets it) ends with
#     the same bits and loss curve as the run that was not stopped;
#   - an error on one rank (rank 0 cannot write the checkpoint) stops every rank with its
#     message and exit 1, never a hang.
# Usage: data_parallel.sh KILN MODEL.json WORKDIR
set -euo pipefail
kiln=$1 model=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
# CI runs as root; OpenMPI refuses that unless told twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
common=(--data mnist --train-samples 512 --test-samples 1 --epochs 1 --backend host --seed 3 -q)

train() {  # NAME RANKS BATCH FLAGS...: checkpoint NAME.safetensors, loss log NAME.csv
  local name=$1 ranks=$2 batch=$3
  shift 3
  local command=("$kiln" train "$model" "${common[@]}" --batch-size "$batch"
                 --checkpoint "$name.safetensors" --loss-log "$name.csv" "$@")
  if [ "$ranks" = 1 ]; then
    "${command[@]}" > "$name.log"
  else
    timeout 300 "${mpirun[@]}" -np "$ranks" "${command[@]}" > "$name.log"
  fi
}

compare() {  # A B STATE_BOUND LOSS_BOUND
  echo "$2 against $1:"
  /usr/bin/python3 "$here/compare_runs.py" "$1.safetensors" "$1.csv" "$2.safetensors" "$2.csv" "$3" "$4"
}

sgd=(--optimizer sgd --lr 0.05 --momentum 0.9)
train sgd_np1 1 16 "${sgd[@]}"
train sgd_np2 2 8 "${sgd[@]}"
train sgd_np4 4 4 "${sgd[@]}"
compare sgd_np1 sgd_np2 1e-6 1e-6
compare sgd_np1 sgd_np4 1e-6 1e-6

adam=(--optimizer adam --lr 0.001 --batch-invariant)
train adam_np1 1 16 "${adam[@]}"
train adam_np2 2 8 "${adam[@]}"
train adam_np4 4 4 "${adam[@]}"
compare adam_np1 adam_np2 0 1e-6
compare adam_np1 adam_np4 0 1e-6

# Stopped after 12 of the 32 steps, then resumed: the same bits as adam_np2.
train resumed 2 8 "${adam[@]}" --max-steps 12
train resumed 2 8 "${adam[@]}" --resume resumed.safetensors
compare adam_np2 resumed 0 0

# Batch norm: its running statistics are broadcast from rank 0 every step (an MPI_Ibcast).
timeout 300 "${mpirun[@]}" -np 2 "$kiln" train "$here/../lit/Inputs/mnist_mlp_bn.json" "${common[@]}" \
  --batch-size 8 --max-steps 8 > bn.log
echo "batch norm under mpirun -np 2: $(cat bn.log)"

# Rank 0 cannot create the checkpoint's directory (a file is in the way): every rank stops.
set +e
timeout 120 "${mpirun[@]}" -np 2 "$kiln" train "$model" "${common[@]}" --batch-size 8 \
  --checkpoint "$work/sgd_np1.csv/model.safetensors" > error.log 2>&1
status=$?
set -e
if [ "$status" != 1 ] || ! grep -q "rank 0 of 2: .*cannot create the checkpoint's directory" error.log; then
  cat error.log
  echo "expected exit 1 and rank 0's message, got exit $status" >&2
  exit 1
fi
echo "an error on rank 0 stopped both ranks: exit 1, \"$(grep -m1 'rank 0 of 2' error.log)\""
