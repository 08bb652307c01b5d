// `kiln train MODEL --data mnist ...`: train a model and report test accuracy (docs/training.md).
#include <fmt/format.h>

#include <iostream>

#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/progress_bar.h"
#include "compiler/trainer.h"

namespace kiln::cli {
namespace train_command {

struct Options {
  compiler::TrainOptions train;
  CacheFlags cache;
  PrecisionFlag precision;
  WeightsDtypeFlag weights_dtype;
  LibraryFlag library;
};

int run(Options& options, const CLI::App& command) {
  for (const char* flag : {"--batch-size", "--optimizer", "--lr", "--momentum", "--weight-decay"})
    if (command.count(flag) > 0) options.train.compile_time_flags.push_back(flag);
  for (const char* flag : compiler::StepScalarFlags::kFlags)
    if (command.count(flag) > 0) options.train.compile_time_flags.push_back(flag);
  if (command.count("--precision") > 0) options.train.compile_time_flags.push_back("--precision");
  if (command.count("--library") > 0) options.train.compile_time_flags.push_back("--library");
  options.train.precision = options.precision.value();
  options.train.weights_dtype = options.weights_dtype.value();
  options.train.libraries = options.library.selection();
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  options.train.cache = cache.get();
  options.train.verbose = options.cache.verbose;
  const compiler::TrainSummary summary = compiler::train(options.train, std::cout);
  if (summary.rank != 0) return kExitOk;  // rank 0 reports for a data-parallel run
  if (options.train.quiet) {
    std::cout << fmt::format("test accuracy {:.2f}%\n", 100 * summary.test_accuracy);
    return kExitOk;
  }
  std::cout << fmt::format("trained {} steps{} in {} ({:.0f} {}, {} kernels per step); final "
                           "loss {:.4f}; test accuracy {:.2f}%{}\n",
                           summary.steps,
                           summary.ranks > 1 ? fmt::format(" on {} ranks", summary.ranks) : "",
                           compiler::format_duration(summary.seconds),
                           summary.throughput, summary.throughput_unit, summary.kernels_per_step,
                           summary.final_loss, 100 * summary.test_accuracy,
                           options.train.checkpoint.empty()
                               ? std::string()
                               : "; checkpoint " + options.train.checkpoint);
  return kExitOk;
}

}  // namespace train_command

Command add_train_command(CLI::App& app) {
  using namespace train_command;
  auto options = std::make_shared<Options>();
  compiler::TrainOptions& t = options->train;
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a classifier or a language model (a model ending in softmax) and report "
               "its test accuracy");
  cmd->footer("Data-parallel: `mpirun -np N kiln train ...` trains on N processes, each on its "
              "shard of every global batch of N x --batch-size, gradients averaged across them; "
              "rank 0 prints and writes checkpoints (docs/distributed.md).");
  cmd->add_option("MODEL", t.model,
                  "model file (.json, .onnx, Keras (.json, .h5) or textual IR), or a package from `kiln compile --train`")
      ->required();
  cmd->add_option("--data", t.data,
                  "mnist, fashion-mnist; fortunes or text:FILE|DIR (bytes, for a language "
                  "model taking token ids [batch, sequence]); or a directory with train.x.npy, "
                  "train.y.npy, test.x.npy, test.y.npy")
      ->capture_default_str();
  // Values out of range are usage errors (exit 2), like unknown flags.
  cmd->add_option("--epochs", t.epochs, "passes over the training set")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--batch-size", t.batch_size, "samples per step, per process under mpirun "
                                                "(the last partial batch of an epoch is dropped)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--optimizer", t.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--lr", t.lr, "learning rate")->check(positive())->capture_default_str();
  cmd->add_option("--momentum", t.momentum, "sgd momentum")
      ->check(non_negative())
      ->capture_default_str();
  cmd->add_option("--weight-decay", t.weight_decay,
                  "weight decay (default: 0 for sgd and adam, 0.01 for adamw)")
      ->check(non_negative());
  add_step_scalar_flags(*cmd, t.step_scalars, "");
  cmd->add_option("--backend", t.backend,
                  "auto: cuda when a GPU is available, else host; host: the generated CUDA "
                  "kernels on the CPU; cuda: on the GPU")
      ->check(CLI::IsMember({"auto", "host", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--checkpoint", t.checkpoint,
                  "write parameters, optimizer state and step to this .safetensors after every epoch");
  cmd->add_option("--resume", t.resume, "continue from a checkpoint written by --checkpoint");
  cmd->add_option("--train-samples", t.train_samples, "train on the first N samples only")
      ->check(at_least_one());
  cmd->add_option("--test-samples", t.test_samples, "evaluate on the first N test samples only")
      ->check(at_least_one());
  cmd->add_option("--max-steps", t.max_steps, "stop after N steps (a checkpoint is still written)")
      ->check(at_least_one());
  cmd->add_option("--seed", t.seed, "shuffling and dropout seed")->capture_default_str();
  cmd->add_flag("-q,--quiet", t.quiet, "print only the final test accuracy");
  cmd->add_flag("--progress", t.progress,
                "draw the progress bar even when stdout is not a terminal");
  cmd->add_flag("--check-numerics", t.check_numerics,
                "when a step's loss or state is not finite, replay it op by op on the reference "
                "evaluator and name the first op whose output is not finite (slower: copies the "
                "training state every step)");
  cmd->add_flag("--batch-invariant", t.batch_invariant,
                "sum every gradient over the batch per sample, the samples in one fixed tree: "
                "mpirun -np N with --batch-size B gives the bits of one process with N x B "
                "(B and N powers of two, host backend; docs/distributed.md). Costs a partial "
                "gradient per sample");
  cmd->add_option("--loss-log", t.loss_log,
                  "write every step's loss to this CSV file (step,epoch,loss), for loss curves");
  cmd->add_flag("--print-plan", t.print_plan,
                "print the training step's kernel count and activation arena");
  options->precision.add_to(*cmd);
  options->weights_dtype.add_to(*cmd, "in the checkpoint (the optimizer's state stays f32)");
  options->library.add_to(*cmd);
  options->cache.add_to(*cmd);
  return {cmd, [options, cmd]() { return run(*options, *cmd); }};
}

}  // namespace kiln::cli
