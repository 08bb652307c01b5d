// `kiln train`: compiles a model's training step and inference graph, then runs epochs of
// shuffled batches, evaluates on the test split after each epoch and writes checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

#include "runtime/executor/executable.h"

namespace kiln::compiler {

struct TrainOptions {
  std::string model;
  std::string data = "mnist";
  int64_t epochs = 1;
  int64_t batch_size = 64;
  std::string optimizer = "adam";  // sgd, adam, adamw
  double lr = 1e-3;
  double momentum = 0.0;           // sgd
  double weight_decay = -1;        // < 0: the optimizer's default
  std::string backend = "auto";    // auto, host, cuda
  std::string checkpoint;          // written after every epoch (and at the end)
  std::string resume;              // a checkpoint to continue from
  int64_t train_samples = 0;       // 0: the whole split
  int64_t test_samples = 0;
  int64_t max_steps = 0;           // 0: no limit (stop early, e.g. to test resuming)
  uint64_t seed = 0;
  bool quiet = false;
  bool progress = false;           // draw the progress bar even when stdout is no terminal
  bool print_plan = false;         // print the training step's kernels and memory plan
  runtime::KernelCache* cache = nullptr;
  bool verbose = false;
};

struct TrainSummary {
  int64_t steps = 0;               // steps run by this invocation
  double seconds = 0;              // training time (compilation and evaluation excluded)
  double images_per_second = 0;
  double final_loss = 0;           // mean loss of the last epoch run
  double test_accuracy = -1;       // after the last epoch; -1 when not evaluated
  int kernels_per_step = 0;
};

// Runs the whole training; progress and epoch lines go to `out`. Throws kiln::Error.
TrainSummary train(const TrainOptions& options, std::ostream& out);

}  // namespace kiln::compiler
