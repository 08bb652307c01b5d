// `kiln train`: compiles a model's training step and inference graph, then runs epochs of
// shuffled batches, evaluates on the test split after each epoch and writes checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>

#include "codegen/library_call.h"
#include "codegen/precision.h"
#include "compiler/training_graph.h"
#include "runtime/data/dataset.h"
#include "runtime/executor/executable.h"
#include "runtime/package/package.h"

namespace kiln::compiler {

// The optimizer's per-step scalars (append-optimizer's lr_schedule and clip_grad_norm options;
// docs/training.md): a learning-rate schedule and clipping by global norm.
struct StepScalarFlags {
  std::string lr_schedule = "none";  // none, cosine, linear, constant (warmup only)
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // where the decay ends; 0 in kiln train: the run's last step
  double min_lr_scale = 0;  // the factor the decay ends at, in [0, 1]
  double clip_grad_norm = 0;  // > 0: the largest global gradient norm; 0: no clipping
  // Dynamic loss scaling (torch.amp.GradScaler): auto (on with --precision=f16), dynamic, none.
  std::string loss_scale = "auto";
  double loss_scale_init = 65536;             // the scale of the first step
  int64_t loss_scale_growth_interval = 2000;  // finite steps in a row before the scale doubles
  // Gradual magnitude pruning (the prune pass): the final sparsity (0: none), the steps its
  // cubic schedule runs over (end 0 in kiln train: 3/4 of the run), how often masks move, and
  // the pattern (unstructured, 2:4).
  double prune = 0;
  int64_t prune_start = 1;
  int64_t prune_end = 0;
  int64_t prune_frequency = 10;
  std::string prune_pattern = "unstructured";
  // The command-line flags these come from, for "a package cannot change ..." errors.
  static constexpr const char* kFlags[] = {
      "--lr-schedule", "--warmup-steps",    "--total-steps",
      "--min-lr-scale", "--clip-grad-norm", "--loss-scale",
      "--loss-scale-init", "--loss-scale-growth-interval", "--prune",
      "--prune-start", "--prune-end",       "--prune-frequency",
      "--prune-pattern"};
};

// One epoch's figures, for TrainOptions::on_epoch (Model::fit's history).
struct EpochReport {
  int64_t epoch = 0;           // from 1
  double loss = 0;             // mean training loss
  double accuracy = 0;         // training accuracy in [0, 1]
  double test_accuracy = -1;   // -1: not evaluated (no test samples)
  double seconds = 0;
  double throughput = 0;       // samples (or tokens) per second
};

struct TrainOptions {
  std::string model;               // a model (.json, IR) or a package compiled with --train
  std::string data = "mnist";
  int64_t epochs = 1;
  int64_t batch_size = 64;
  std::string optimizer = "adam";  // sgd, adam, adamw
  double lr = 1e-3;
  double momentum = 0.0;           // sgd
  double weight_decay = -1;        // < 0: the optimizer's default
  StepScalarFlags step_scalars;
  std::string backend = "auto";    // auto, host, cuda
  codegen::Precision precision = codegen::Precision::F32;  // --precision: the GEMMs' arithmetic
  // --weights-dtype: the checkpoint's f32 parameters stored as f32, bf16 or f16 (the optimizer's
  // state stays f32: Adam's second moments underflow f16); --resume widens them back.
  ir::DType weights_dtype = ir::DType::F32;
  // --library: the vendor libraries the CUDA backend may call (as kiln compile --train; split-k
  // leaves the forward GEMMs they compute whole).
  codegen::LibrarySelection libraries{true, true};
  std::string checkpoint;          // written after every epoch (and at the end)
  std::string resume;              // a checkpoint to continue from
  int64_t train_samples = 0;       // 0: the whole split
  int64_t test_samples = 0;
  int64_t max_steps = 0;           // 0: no limit (stop early, e.g. to test resuming)
  uint64_t seed = 0;
  bool quiet = false;
  bool progress = false;           // draw the progress bar even when stdout is no terminal
  bool print_plan = false;         // print the training step's kernels and memory plan
  std::string loss_log;            // a CSV of every step's loss (step,epoch,loss), for curves
  // When a step's loss or state is not finite, replay it on the reference evaluator and name
  // the first op whose output is not finite (compiler/numerics_check.h). Costs a copy of the
  // training state per step.
  bool check_numerics = false;
  // --batch-invariant: sums over the batch per sample, in a fixed tree (passes/batch_invariant.cpp),
  // so that one process and any power-of-two number of ranks over the same global batches end
  // with the same bits (docs/distributed.md).
  bool batch_invariant = false;
  runtime::KernelCache* cache = nullptr;
  bool verbose = false;
  // Data already in memory (Model::fit), used instead of loading `data` (which then only names
  // it in messages and checkpoints). An empty test set: no evaluation.
  std::optional<data::Dataset> train_data, test_data;
  // Called after every epoch; and given, the training state at the end (parameters and the
  // optimizer's, by name).
  std::function<void(const EpochReport&)> on_epoch;
  std::map<std::string, ir::Tensor>* final_state = nullptr;
  // Flags a package has already decided (--batch-size, --optimizer, --lr, ...) that were given
  // on the command line anyway: an error with a package, which cannot change them.
  std::vector<std::string> compile_time_flags;
};

// A model's training step and inference graph at one batch size, compiled to programs: what
// `kiln train` runs, and what `kiln compile --train` packages.
struct TrainingPrograms {
  codegen::Program step;  // inputs: the batch, then the labels; outputs: loss, logits, next.*
  codegen::Program eval;  // the inference graph at the same batch size
  std::map<std::string, ir::Tensor> weights;  // initial parameters of both, by name
  TrainingGraphInfo info;
  int64_t batch_size = 0;
  std::string optimizer;  // the append-optimizer options: "optimizer=adam lr=0.001"
  uint64_t seed = 0;      // of the dropout streams
  // The fusion passes' decisions on the training step ((pass, message), refusals included).
  std::vector<std::pair<std::string, std::string>> step_decisions;
};

// "optimizer=adam lr=0.001 ..." for the flags; kiln::Error naming a bad one. `precision` (the
// GEMMs' arithmetic) decides --loss-scale=auto: dynamic loss scaling for f16.
std::string optimizer_spec(const std::string& optimizer, double lr, double momentum,
                           double weight_decay, const StepScalarFlags& step_scalars = {},
                           codegen::Precision precision = codegen::Precision::F32);
// Loads `model`, builds the training step (passes::training_pipeline) and the inference graph
// and emits both. `libraries`: as --library; `precision`: as --precision.
// `rank` >= 0: the step of that rank of a data-parallel run (data-parallel, dropouts
// keyed by the global sample); -1: one process. `batch_invariant`: as --batch-invariant.
TrainingPrograms build_training_programs(const std::string& model, int64_t batch_size,
                                         uint64_t seed, const std::string& optimizer,
                                         const codegen::LibrarySelection& libraries = {},
                                         codegen::Precision precision = codegen::Precision::F32,
                                         int rank = -1, bool batch_invariant = false);

// The training programs of a package compiled with --train (kiln::Error naming the package
// when it has none).
TrainingPrograms training_programs_from_package(const runtime::Package& package,
                                                const std::string& path);
// The manifest options that record a TrainingPrograms (read back by the function above).
nlohmann::ordered_json training_options_json(const TrainingPrograms& programs);

struct TrainSummary {
  int64_t steps = 0;               // steps run by this invocation
  double seconds = 0;              // training time (compilation and evaluation excluded)
  double throughput = 0;            // samples (images) or tokens per second of training
  std::string throughput_unit = "img/s";  // "tok/s" for token data
  double final_loss = 0;           // mean loss of the last epoch run
  double test_accuracy = -1;       // after the last epoch; -1 when not evaluated
  int kernels_per_step = 0;
  // A data-parallel run (mpirun): this process's rank and the ranks; throughput and loss are the
  // whole run's. Only rank 0 reports.
  int rank = 0, ranks = 1;
};

// Runs the whole training; progress and epoch lines go to `out`. Throws kiln::Error.
// Launched by mpirun with N > 1 processes (runtime/distributed/communicator.h), each process
// trains on its shard of every global batch of N x batch_size samples, the gradients averaged
// over the ranks; rank 0 alone prints, evaluates and writes checkpoints (docs/distributed.md).
TrainSummary train(const TrainOptions& options, std::ostream& out);

}  // namespace kiln::compiler
