#include "compiler/trainer.h"

#include <fmt/format.h>
#include <cerrno>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <ostream>
#include <optional>
#include <set>
#include <thread>

#include "codegen/emit.h"
#include "compiler/dataset_dir.h"
#include "compiler/interrupt.h"
#include "compiler/model_loader.h"
#include "compiler/numerics_check.h"
#include "compiler/parameters.h"
#include "compiler/progress_bar.h"
#include "compiler/checkpoint.h"
#include "compiler/loss_scaling.h"
#include "compiler/pruning.h"
#include "compiler/safetensors.h"
#include "compiler/training_graph.h"
#include "ir/diagnostic.h"
#include "passes/pass_manager.h"
#include "runtime/distributed/communicator.h"

namespace kiln::compiler {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The inference pipeline without the passes that bake parameters into the program: the
// evaluation graph reads the parameters training changes.
const std::vector<std::string> kEvalPipeline = {
    "canonicalize", "fuse-gelu", "fuse-attention", "cse", "dce", "fuse-attention-views",
    "fuse-conv-bias-relu", "fuse-gemm-views", "fuse-norm-residual", "fuse-norm-prologue",
    "fuse-elementwise", "plan-memory"};

void run_pipeline(ir::Graph& graph, const std::vector<std::string>& passes,
                  std::vector<std::pair<std::string, std::string>>* decisions = nullptr) {
  passes::PassManagerOptions options;
  if (decisions) {
    options.decisions = decisions;
    options.record_decisions = {"fuse-conv-bias-relu", "fuse-elementwise"};
  }
  passes::PassManager manager(options, std::cerr);
  manager.add_all(passes);
  manager.run(graph);
}

// A non-finite loss as people write it: NaN (never "-nan"), +inf, -inf.
std::string loss_text(double loss) {
  if (std::isnan(loss)) return "NaN";
  if (std::isinf(loss)) return loss > 0 ? "+inf" : "-inf";
  return fmt::format("{}", loss);
}

void add_weights(const ir::Graph& graph, std::map<std::string, ir::Tensor>& weights) {
  for (const ir::Value* param : graph.parameters) {
    KILN_CHECK(param->data != nullptr) << "parameter '" << param->name << "' has no data";
    weights.emplace(param->name, *param->data);
  }
}

// Parameters of `program` in graph order, from the weights by name.
std::vector<ir::Tensor> parameters_of(const codegen::Program& program,
                                      const std::map<std::string, ir::Tensor>& weights) {
  std::vector<ir::Tensor> tensors;
  for (int id : program.buffer_ids(codegen::BufferRole::Parameter))
    tensors.push_back(weights.at(program.buffers[id].name));
  return tensors;
}

runtime::Backend resolve_backend(const std::string& backend, bool verbose) {
  if (backend == "host") return runtime::Backend::Host;
  if (backend == "cuda") {
    std::string why;
    if (!runtime::cuda::cuda_available(&why))
      throw Error("--backend=cuda", why + "; use --backend=host to train on the CPU");
    return runtime::Backend::Cuda;
  }
  if (backend != "auto") throw Error("--backend", "expected auto, host or cuda, got '" + backend + "'");
  return runtime::cuda::auto_backend(verbose, std::cerr) == "cuda" ? runtime::Backend::Cuda
                                                                   : runtime::Backend::Host;
}

// How many of the first `positions` rows of the logits (viewed as [positions, classes]) have
// their largest logit at the label: a sample's class, or a token's successor.
int64_t count_correct(const ir::Tensor& logits, const ir::Tensor& labels, int64_t positions) {
  const int64_t classes = logits.type().shape.back();
  int64_t correct = 0;
  for (int64_t r = 0; r < positions; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (logits.get(r * classes + c) > logits.get(r * classes + best)) best = c;
    correct += best == static_cast<int64_t>(labels.get(r));
  }
  return correct;
}

// The model's input must take one sample of the dataset ([N, ...] minus N).
// A label outside [0, classes) would pick a logit that does not exist: a data error naming the
// first such sample (its index in the split) and the label.
void check_labels(const data::Dataset& set, int64_t classes) {
  const int64_t per_sample = set.labels_per_sample();
  for (int64_t i = 0; i < set.labels.num_elements(); ++i) {
    const double label = set.labels.get(i);
    if (label < 0 || label >= static_cast<double>(classes))
      throw Error(set.source, fmt::format("sample {} has label {}, outside [0, {}): the model "
                                          "has {} classes",
                                          i / per_sample, label, classes, classes));
  }
}

// The sequence length of a model that takes token ids [batch, sequence] (integers), else 0.
int64_t token_context(const ir::TensorType& input) {
  return ir::is_integer(input.dtype) && input.rank() == 2 ? input.shape[1] : 0;
}

// Token ids are stored as i32; a model taking i64 ids gets them widened once, here. Float
// samples for an integer input (or ids for a float one) are an error naming both.
void conform_samples(const std::string& input_name, const ir::TensorType& input,
                     data::Dataset& dataset) {
  const bool int_input = ir::is_integer(input.dtype);
  if (int_input != dataset.is_tokens())
    throw Error("--data", fmt::format("{}: samples are {}, model input %{} takes {}",
                                      dataset.source, dataset.images.type().to_string(),
                                      input_name, input.to_string()));
  if (!int_input || input.dtype == dataset.images.dtype()) return;
  ir::Tensor widened({input.dtype, dataset.images.shape()});
  for (int64_t i = 0; i < widened.num_elements(); ++i) widened.set(i, dataset.images.get(i));
  dataset.images = std::move(widened);
}

void check_sample_shape(const std::string& input_name, const ir::Shape& input,
                        const data::Dataset& dataset) {
  const ir::Shape& images = dataset.images.type().shape;
  const ir::Shape sample_in(input.begin() + 1, input.end());
  const ir::Shape sample_data(images.begin() + 1, images.end());
  if (sample_in != sample_data)
    throw Error("--data", fmt::format("{}: samples are {}, model input %{} takes {} per sample",
                                      dataset.source, ir::shape_to_string(sample_data),
                                      input_name, ir::shape_to_string(sample_in)));
}

// A Keras model takes images channels_last ([H, W, C] per sample) where the image datasets are
// [C, H, W]: the images are transposed once, here, rather than in every step.
void to_channels_last_if_needed(const ir::Shape& input, data::Dataset& dataset) {
  const ir::Shape& images = dataset.images.type().shape;
  if (input.size() != 4 || images.size() != 4 || dataset.images.dtype() != ir::DType::F32) return;
  const int64_t c = images[1], h = images[2], w = images[3];
  if (input[1] != h || input[2] != w || input[3] != c || ir::Shape(input.begin() + 1, input.end()) ==
                                                         ir::Shape(images.begin() + 1, images.end()))
    return;
  const int64_t n = images[0];
  ir::Tensor nhwc(ir::TensorType{dataset.images.dtype(), {n, h, w, c}});
  const auto* src = reinterpret_cast<const float*>(dataset.images.data());
  auto* dst = reinterpret_cast<float*>(nhwc.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < h * w; ++p) dst[(i * h * w + p) * c + ch] = src[(i * c + ch) * h * w + p];
  dataset.images = std::move(nhwc);
}

// Accuracy of the inference program over `dataset`; a last partial batch is padded with
// zeros and its padding ignored, so every sample counts.
double evaluate(runtime::TrainingExecutable& executable, const data::Dataset& dataset,
                int64_t batch) {
  data::BatchIterator batches(dataset, batch, 0, 0, /*drop_last=*/false);
  ir::Tensor images, labels;
  int64_t correct = 0;
  while (batches.next(images, labels)) {
    const int64_t rows = labels.shape()[0];
    ir::Tensor input = images;
    if (rows < batch) {
      ir::Shape shape = images.type().shape;
      shape[0] = batch;
      ir::Tensor padded(ir::TensorType{images.type().dtype, shape});
      std::memcpy(padded.data(), images.data(), images.byte_size());
      input = std::move(padded);
    }
    const std::vector<ir::Tensor> outputs = executable.evaluate({input});
    correct += count_correct(outputs.at(0), labels, labels.num_elements());
  }
  return static_cast<double>(correct) / static_cast<double>(dataset.labels.num_elements());
}

data::Dataset load_split(const TrainOptions& options, data::Split split, int64_t samples,
                         const char* flag, int64_t context) {
  if (samples < 0) throw Error(flag, fmt::format("must be >= 0, got {}", samples));
  // A built-in dataset loads only the samples asked for (and all of them when it has fewer).
  data::Dataset dataset = load_dataset(options.data, split, samples, context);
  if (samples > dataset.size())
    throw Error(flag, fmt::format("{} asked for, {} has {}", samples, dataset.source, dataset.size()));
  if (samples > 0 && samples < dataset.size()) dataset = data::take_first(dataset, samples);
  return dataset;
}

// Rows [first, first + count) of `tensor` (its dim 0): a rank's shard of a global batch.
ir::Tensor rows_of(const ir::Tensor& tensor, int64_t first, int64_t count) {
  ir::Shape shape = tensor.type().shape;
  const int64_t row_bytes = tensor.byte_size() / shape[0];
  shape[0] = count;
  ir::Tensor rows(ir::TensorType{tensor.type().dtype, shape});
  std::memcpy(rows.data(), tensor.data() + first * row_bytes,
              static_cast<size_t>(count * row_bytes));
  return rows;
}

// Every rank starts from rank 0's state: its parameters (however initialized) and, after
// --resume, the checkpoint rank 0 read.
void broadcast_state(runtime::TrainingExecutable& executable,
                     runtime::distributed::Communicator& world) {
  std::map<std::string, ir::Tensor> state = executable.state();
  for (auto& [name, tensor] : state) world.broadcast(tensor.data(), tensor.byte_size(), 0);
  executable.load_state(state);
}

// --print-plan: where the training step's memory goes.
void print_plan(const codegen::Program& program, const TrainingGraphInfo& info, std::ostream& out) {
  int64_t parameters = 0, state = 0, inputs = 0, outputs = 0;
  std::set<int> state_outputs;  // copied after the step; in-place ones are parameters
  int in_place = 0;
  for (const codegen::Program::StateUpdate& update : program.state_updates) {
    if (update.in_place())
      ++in_place;
    else
      state_outputs.insert(update.output);
  }
  for (size_t id = 0; id < program.buffers.size(); ++id) {
    const codegen::Buffer& buffer = program.buffers[id];
    switch (buffer.role) {
      case codegen::BufferRole::Parameter:
        (buffer.name.rfind("optimizer.", 0) == 0 || buffer.name.rfind("train.", 0) == 0 ? state
                                                                                     : parameters) +=
            buffer.bytes;
        break;
      case codegen::BufferRole::Input: inputs += buffer.bytes; break;
      case codegen::BufferRole::Output:
        if (!state_outputs.count(static_cast<int>(id))) outputs += buffer.bytes;
        break;
      default: break;
    }
  }
  int64_t next_state = 0;
  for (int id : state_outputs) next_state += program.buffers[id].bytes;
  out << fmt::format("training step: {} kernels; loss: {}; {} dropout node(s)\n",
                     program.kernels.size(), info.loss, info.dropout_nodes);
  out << fmt::format("  parameters          {:>12} B\n", parameters);
  out << fmt::format("  optimizer state     {:>12} B\n", state);
  out << fmt::format("  next state          {:>12} B  (the update's results copied into place after "
                     "the step; {} of {} tensors are written in place)\n",
                     next_state, in_place, program.state_updates.size());
  out << fmt::format("  inputs, outputs     {:>12} B\n", inputs + outputs);
  if (program.planned) {
    const double ratio = program.lower_bound_bytes
                             ? static_cast<double>(program.arena_bytes) / program.lower_bound_bytes
                             : 1.0;
    out << fmt::format("  activation arena    {:>12} B  (saved activations, gradients, temporaries): "
                       "lower bound {} B, planned/lower bound {:.2f}, naive {} B\n",
                       program.arena_bytes, program.lower_bound_bytes, ratio, program.naive_bytes);
  }
}

}  // namespace

std::string optimizer_spec(const std::string& optimizer, double lr, double momentum,
                           double weight_decay, const StepScalarFlags& scalars,
                           codegen::Precision precision) {
  if (optimizer != "sgd" && optimizer != "adam" && optimizer != "adamw")
    throw Error("--optimizer", "expected sgd, adam or adamw, got '" + optimizer + "'");
  if (!(lr > 0)) throw Error("--lr", fmt::format("must be > 0, got {}", lr));
  std::string text = fmt::format("optimizer={} lr={}", optimizer, lr);
  if (optimizer == "sgd" && momentum != 0) text += fmt::format(" momentum={}", momentum);
  if (weight_decay >= 0) text += fmt::format(" weight_decay={}", weight_decay);
  const std::string& schedule = scalars.lr_schedule;
  if (schedule != "none" && schedule != "cosine" && schedule != "linear" && schedule != "constant")
    throw Error("--lr-schedule", "expected none, cosine, linear or constant, got '" + schedule + "'");
  if (schedule == "none" && (scalars.warmup_steps != 0 || scalars.total_steps != 0 ||
                             scalars.min_lr_scale != 0))
    throw Error("--lr-schedule", "--warmup-steps, --total-steps and --min-lr-scale shape a "
                                 "schedule: give --lr-schedule cosine, linear or constant");
  if (schedule != "none") {
    if (schedule != "constant" && scalars.total_steps == 0)
      throw Error("--total-steps", fmt::format("a {} decay needs the step it ends at", schedule));
    if (schedule != "constant" && scalars.total_steps <= scalars.warmup_steps)
      throw Error("--total-steps", fmt::format("the {} decay ends at step {}, which must come "
                                               "after the {} warmup steps",
                                               schedule, scalars.total_steps,
                                               scalars.warmup_steps));
    if (!(scalars.min_lr_scale >= 0 && scalars.min_lr_scale <= 1))
      throw Error("--min-lr-scale", fmt::format("must be in [0, 1], got {}", scalars.min_lr_scale));
    text += fmt::format(" lr_schedule={} warmup_steps={}", schedule, scalars.warmup_steps);
    if (schedule != "constant")
      text += fmt::format(" total_steps={} min_lr_scale={}", scalars.total_steps,
                          scalars.min_lr_scale);
  }
  if (!(scalars.clip_grad_norm >= 0))
    throw Error("--clip-grad-norm", fmt::format("must be > 0, got {}", scalars.clip_grad_norm));
  if (scalars.clip_grad_norm > 0) text += fmt::format(" clip_grad_norm={}", scalars.clip_grad_norm);
  return text + loss_scaling_options(scalars, precision) + pruning_options(scalars);
}

TrainingPrograms build_training_programs(const std::string& model, int64_t batch_size,
                                         uint64_t seed, const std::string& optimizer,
                                         const codegen::LibrarySelection& libraries,
                                         codegen::Precision precision, int rank,
                                         bool batch_invariant) {
  if (batch_size < 1) throw Error("--batch-size", fmt::format("must be >= 1, got {}", batch_size));
  // The training step: forward at the batch size, loss, backward, optimizer, fused, planned.
  // An imported model's symbolic batch dim starts at 1; set_batch_size gives it its size.
  ImportOptions import;
  import.symbolic_dim_size = 1;
  ir::Graph step_graph = load_model(model, import);
  load_parameter_data(step_graph);
  ir::Graph eval_graph = load_model(model, import);
  load_parameter_data(eval_graph);
  TrainingPrograms programs;
  programs.batch_size = batch_size;
  programs.optimizer = optimizer;
  programs.seed = seed;
  programs.info =
      make_training_graph(step_graph, TrainingGraphOptions{batch_size, seed, std::max(rank, 0)});
  run_pipeline(step_graph,
               passes::with_autocast(
                   passes::keep_vendor_gemms_whole(passes::training_pipeline(optimizer, rank >= 0, batch_invariant),
                                                   libraries.cudnn, libraries.cublaslt),
                   codegen::autocast_dtype(precision)),
               &programs.step_decisions);
  set_batch_size(eval_graph, batch_size);
  run_pipeline(eval_graph, passes::with_autocast(kEvalPipeline, codegen::autocast_dtype(precision)));
  add_weights(step_graph, programs.weights);
  add_weights(eval_graph, programs.weights);
  programs.step = codegen::emit_program(step_graph, libraries, precision);
  programs.eval = codegen::emit_program(eval_graph, libraries, precision);
  return programs;
}

nlohmann::ordered_json training_options_json(const TrainingPrograms& p) {
  return {{"batch_size", p.batch_size},     {"optimizer", p.optimizer},
          {"seed", p.seed},                 {"loss", p.info.loss},
          {"label_input", p.info.label_input}, {"logits", p.info.logits},
          {"dropout_nodes", p.info.dropout_nodes},
          {"batch_norm_nodes", p.info.batch_norm_nodes}};
}

TrainingPrograms training_programs_from_package(const runtime::Package& package,
                                                const std::string& path) {
  const runtime::PackageProgram* step = package.find(runtime::kTrainStepProgram);
  const runtime::PackageProgram* eval = package.find(runtime::kInferenceProgram);
  if (!step || !eval || !package.manifest.options.contains("train"))
    throw Error(path, "this package holds no training step; compile it with `kiln compile MODEL "
                      "--train --batch-size B -o FILE.kiln`");
  const nlohmann::ordered_json& t = package.manifest.options["train"];
  TrainingPrograms programs;
  try {
    programs.batch_size = t.at("batch_size").get<int64_t>();
    programs.optimizer = t.at("optimizer").get<std::string>();
    programs.seed = t.at("seed").get<uint64_t>();
    programs.info.loss = t.at("loss").get<std::string>();
    programs.info.label_input = t.at("label_input").get<std::string>();
    programs.info.logits = t.at("logits").get<std::string>();
    programs.info.dropout_nodes = t.at("dropout_nodes").get<int>();
    programs.info.batch_norm_nodes = t.at("batch_norm_nodes").get<int>();
  } catch (const nlohmann::json::exception& error) {
    throw Error(path, std::string("manifest /options/train: ") + error.what());
  }
  programs.step = step->program;
  programs.eval = eval->program;
  programs.weights = package.weights;
  return programs;
}

TrainSummary train(const TrainOptions& options, std::ostream& out) {
  // Ctrl-C or SIGTERM: the checkpoint (if asked for) is written after the current step, temporary
  // directories go with the unwinding stack, and the tool exits 130.
  const InterruptScope interrupt_scope;
  if (options.epochs < 1) throw Error("--epochs", fmt::format("must be >= 1, got {}", options.epochs));
  // A data-parallel run: this process is one of `ranks`, training on its shard of each batch.
  runtime::distributed::Communicator* world = runtime::distributed::world();
  const int ranks = world ? world->size() : 1;
  const int rank = world ? world->rank() : 0;
  const bool reporter = rank == 0;  // prints, evaluates, writes checkpoints and the loss log
  const bool quiet = options.quiet || !reporter;
  const bool from_package = runtime::is_package_file(options.model);
  if (world && from_package)
    throw Error(options.model, fmt::format("a package's training step was compiled for one "
                                           "process; under mpirun ({} ranks), train the model "
                                           "file itself",
                                           ranks));
  if (world && options.check_numerics)
    throw Error("--check-numerics", "replays one process's step; run it without mpirun");
  std::optional<runtime::Package> package;
  if (from_package) {
    package = runtime::read_package(options.model);
    if (options.batch_invariant)
      throw Error("--batch-invariant", "a package's training step is compiled without it; train "
                                       "the model file itself");
    if (!options.compile_time_flags.empty())
      throw Error(options.compile_time_flags.front(),
                  "a package's training step is already compiled (" +
                      (package->manifest.options.contains("train")
                           ? package->manifest.options["train"].value("optimizer", std::string("?"))
                           : std::string("no training step")) +
                      "); give the flag to `kiln compile --train` instead");
  }
  std::optional<TrainingPrograms> packaged;
  if (package) packaged = training_programs_from_package(*package, options.model);
  const int64_t batch_size = packaged ? packaged->batch_size : options.batch_size;
  if (batch_size < 1) throw Error("--batch-size", fmt::format("must be >= 1, got {}", batch_size));
  const runtime::Backend backend = resolve_backend(options.backend, options.verbose);
  if (options.check_numerics && package)
    throw Error("--check-numerics", "needs the model file to replay a step op by op, not a "
                                    "package (train the model itself with it)");

  // The checkpoint's directory now, so that an epoch's work is never lost to a missing one.
  if (!options.checkpoint.empty() && reporter) {
    const std::filesystem::path dir = std::filesystem::path(options.checkpoint).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    if (ec)
      throw Error(options.checkpoint, "cannot create the checkpoint's directory: " + ec.message());
    // Writable now, not after the first epoch: a probe file next to it (checkpoints are
    // written to a temporary file there and renamed).
    if (std::filesystem::is_directory(options.checkpoint, ec))
      throw Error(options.checkpoint, "is a directory; --checkpoint takes a file path");
    const std::filesystem::path probe =
        (dir.empty() ? std::filesystem::path(".") : dir) /
        (".kiln-write-probe-" + std::to_string(::getpid()));
    std::FILE* file = std::fopen(probe.c_str(), "wb");
    if (file == nullptr)
      throw Error(options.checkpoint, std::string("cannot write the checkpoint there: ") +
                                          std::strerror(errno));
    std::fclose(file);
    std::filesystem::remove(probe, ec);
  }

  // The model's input and classes (the logits' last dim), to check the data against: loading
  // a model takes milliseconds, compiling it minutes.
  std::string input_name;
  ir::TensorType input_type;
  int64_t classes = 0;
  if (packaged) {
    const codegen::Buffer& input =
        packaged->step.buffers.at(packaged->step.buffer_ids(codegen::BufferRole::Input).at(0));
    input_name = input.name;
    input_type = input.type;
  } else {
    ImportOptions import;
    import.symbolic_dim_size = 1;
    const ir::Graph model = load_model(options.model, import);
    input_name = model.inputs.at(0)->name;
    input_type = model.inputs.at(0)->type;
    const ir::Shape& logits = model.outputs.at(0)->type.shape;
    if (!logits.empty()) classes = logits.back();
  }
  const ir::Shape& input_shape = input_type.shape;

  // Data next: a wrong --data fails before minutes of compilation.
  const int64_t context = token_context(input_type);
  data::Dataset train_set = options.train_data ? *options.train_data
                                               : load_split(options, data::Split::Train,
                                                            options.train_samples, "--train-samples", context);
  data::Dataset test_set = options.test_data ? *options.test_data
                                             : load_split(options, data::Split::Test,
                                                          options.test_samples, "--test-samples", context);
  if (train_set.size() < batch_size * ranks)
    throw Error("--batch-size", ranks == 1 ? fmt::format("{} is larger than the {} training samples",
                                                         batch_size, train_set.size())
                                           : fmt::format("{} per rank x {} ranks is larger than "
                                                         "the {} training samples",
                                                         batch_size, ranks, train_set.size()));
  // A decaying schedule ends with the last epoch unless --total-steps says otherwise (not at
  // --max-steps, which stops a run early: resuming it must continue the same schedule).
  StepScalarFlags step_scalars = options.step_scalars;
  const int64_t run_steps = options.epochs * (train_set.size() / (batch_size * ranks));
  if (step_scalars.total_steps == 0 && step_scalars.lr_schedule != "none")
    step_scalars.total_steps = run_steps;
  if (step_scalars.prune_end == 0 && (step_scalars.prune > 0 || step_scalars.prune_pattern == "2:4"))
    step_scalars.prune_end = std::max(step_scalars.prune_start, run_steps * 3 / 4);
  const std::string optimizer =
      package ? std::string()
              : optimizer_spec(options.optimizer, options.lr, options.momentum,
                               options.weight_decay, step_scalars, options.precision);

  // The model must take the data's samples: checked before minutes of compilation too.
  if (classes > 0) {
    check_labels(train_set, classes);
    if (test_set.size() > 0) check_labels(test_set, classes);
  }
  conform_samples(input_name, input_type, train_set);
  if (test_set.size() > 0) conform_samples(input_name, input_type, test_set);
  to_channels_last_if_needed(input_shape, train_set);
  if (test_set.size() > 0) to_channels_last_if_needed(input_shape, test_set);
  check_sample_shape(input_name, input_shape, train_set);
  if (test_set.size() > 0) check_sample_shape(input_name, input_shape, test_set);
  TrainingPrograms programs =
      packaged ? std::move(*packaged)
               : build_training_programs(options.model, batch_size, options.seed, optimizer,
                                         options.libraries, options.precision,
                                         world ? rank : -1, options.batch_invariant);

  if (!quiet)
    out << fmt::format("kiln train: {} on {} ({} train / {} test samples), batch {}{}, {}, "
                       "backend {}\n",
                       programs.step.graph_name, options.data, train_set.size(), test_set.size(),
                       batch_size,
                       ranks > 1 ? fmt::format(" per rank x {} ranks = {}", ranks, batch_size * ranks)
                                 : std::string(),
                       programs.optimizer, backend == runtime::Backend::Cuda ? "cuda" : "host");
  const auto compile_start = Clock::now();
  runtime::ExecutableOptions exe_options;
  exe_options.backend = backend;
  exe_options.cache = options.cache;
  exe_options.verbose = options.verbose;
  exe_options.host = runtime::host::host_options_from_environment();
  exe_options.host.communicator = world;
  exe_options.cuda.communicator = world;
  // One rank per GPU: the ranks of a machine take its devices in order. On the host backend the
  // ranks of a machine share its cores: each runs blocks on its share (not a pool per core each).
  if (world) {
    exe_options.cuda.device = world->local_rank();
    if (exe_options.host.workers == 0)
      exe_options.host.workers =
          std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world->local_size());
  }
  exe_options.cuda.libraries = options.libraries;
  const int kernels_per_step = static_cast<int>(programs.step.kernels.size());
  if (options.print_plan) print_plan(programs.step, programs.info, out);
  const runtime::CudaBinary* step_binary = nullptr;
  const runtime::CudaBinary* eval_binary = nullptr;
  if (package) {
    step_binary = &package->find(runtime::kTrainStepProgram)->binary;
    eval_binary = &package->find(runtime::kInferenceProgram)->binary;
  }
  std::vector<ir::Tensor> step_parameters = parameters_of(programs.step, programs.weights);
  std::vector<ir::Tensor> eval_parameters = parameters_of(programs.eval, programs.weights);
  runtime::TrainingExecutable executable(
      runtime::Executable::create(std::move(programs.step), step_parameters, exe_options, step_binary),
      runtime::Executable::create(std::move(programs.eval), eval_parameters, exe_options, eval_binary));
  if (!quiet)
    out << fmt::format("{} the training step ({} kernels) and the inference graph in {:.1f} s\n",
                       package ? "loaded" : "compiled", kernels_per_step, seconds_since(compile_start));

  // What a checkpoint records of this run, and what --resume must match: the same batches in
  // the same order need the same batch size, data, sample count and seed.
  const std::map<std::string, std::string> settings = {
      {"kiln.batch_size", std::to_string(batch_size)},
      {"kiln.data", options.data},
      {"kiln.train_samples", std::to_string(train_set.size())},
      {"kiln.seed", std::to_string(options.seed)},
      {"kiln.ranks", std::to_string(ranks)},
  };
  // Rank 0 reads the checkpoint; every rank then starts from rank 0's state.
  if (!options.resume.empty() && reporter) {
    const SafetensorsFile file = SafetensorsFile::open(options.resume);
    check_resume_settings(file, settings);
    std::map<std::string, ir::Tensor> state;
    for (const auto& [name, entry] : file.entries()) state.emplace(name, file.read(name));
    try {
      executable.load_state(state);
    } catch (const Error& error) {
      throw Error(options.resume, error.diagnostic().message);
    }
  }
  if (world) broadcast_state(executable, *world);

  const int64_t steps_per_epoch = train_set.size() / (batch_size * ranks);
  const int64_t global_batch = batch_size * ranks;
  // Accuracy counts positions (a label per token for a language model); throughput tokens.
  const int64_t per_sample = train_set.labels_per_sample();
  const bool tokens = train_set.is_tokens();
  const int64_t units_per_sample = tokens ? train_set.images.num_elements() / train_set.size() : 1;
  const char* throughput_unit = tokens ? "tok/s" : "img/s";
  int64_t done = executable.step_count() - 1;  // steps already taken (a resumed checkpoint's)
  if (done < 0) done = 0;
  const bool draw = !quiet && (options.progress || isatty(fileno(stdout)));
  TrainSummary summary;
  summary.kernels_per_step = kernels_per_step;
  summary.rank = rank;
  summary.ranks = ranks;
  if (!options.resume.empty() && !quiet) out << fmt::format("resumed from step {}\n", done);
  if (!options.resume.empty() && done >= options.epochs * steps_per_epoch) {
    // Nothing left to train: say so, and report the checkpoint's accuracy rather than none.
    summary.test_accuracy =
        test_set.size() > 0 && reporter ? evaluate(executable, test_set, batch_size) : -1;
    if (options.final_state) *options.final_state = executable.state();
    if (!quiet)
      out << fmt::format("the checkpoint has finished all {} epochs ({} steps); nothing to "
                         "train (give more --epochs to continue)\n",
                         options.epochs, done);
    return summary;
  }
  // --check-numerics keeps the state before each step, to replay a step that goes non-finite.
  std::optional<NumericsReplay> replay;
  std::map<std::string, ir::Tensor> state_before_step;
  if (options.check_numerics) {
    replay.emplace(options.model, batch_size, options.seed, optimizer);
    state_before_step = executable.state();
  }
  // --loss-log: one line per step, flushed as it goes (a run stopped early keeps its curve).
  // Resuming appends to the log of the run it continues.
  std::ofstream loss_log;
  if (!options.loss_log.empty() && reporter) {
    const bool append = !options.resume.empty() && std::filesystem::exists(options.loss_log);
    loss_log.open(options.loss_log, append ? std::ios::app : std::ios::trunc);
    if (!loss_log)
      throw Error(options.loss_log, std::string("cannot write the loss log: ") + std::strerror(errno));
    if (!append) loss_log << "step,epoch,loss\n";
  }
  double train_seconds = 0;
  // Steps are pipelined: batch k + 1 is drawn and submitted (its inputs staged in pinned memory
  // on the CUDA backend) while step k runs, and step k's result is handled after. With
  // --check-numerics each step is collected before the next, to replay it from the state
  // before it.
  const size_t depth = replay ? 1 : 2;
  struct Submitted {
    ir::Tensor images, labels;
  };
  // A step's result, over the whole global batch in a data-parallel run: the ranks' mean loss
  // (each rank's is the mean over its equal shard) and their correct predictions.
  struct Collected {
    runtime::TrainingExecutable::StepResult result;
    int64_t correct = 0;
  };
  const auto collect = [&](const Submitted& batch) {
    Collected step{executable.collect_step(), 0};
    step.correct = count_correct(step.result.logits, batch.labels, batch.labels.num_elements());
    if (world) {
      double totals[2] = {step.result.loss, static_cast<double>(step.correct)};
      world->sum(totals, 2);
      step.result.loss = static_cast<float>(totals[0] / ranks);
      step.correct = std::llround(totals[1]);
    }
    return step;
  };
  std::deque<Submitted> submitted;
  // A collected step: its loss checked and logged, counted as done.
  const auto account = [&](const runtime::TrainingExecutable::StepResult& result,
                           const Submitted& batch, int64_t epoch) {
    if (replay) {
      std::map<std::string, ir::Tensor> state_after_step = executable.state();
      std::string bad_state;
      for (const auto& [name, tensor] : state_after_step)
        if (bad_state.empty() && !NumericsReplay::all_finite(tensor)) bad_state = name;
      if (!std::isfinite(result.loss) || !bad_state.empty()) {
        const std::string what = std::isfinite(result.loss)
                                     ? fmt::format("'{}' is not finite after", bad_state)
                                     : fmt::format("the loss is {} at", loss_text(result.loss));
        throw Error("--check-numerics",
                    fmt::format("{} step {} (epoch {}); replayed on the reference evaluator: {}",
                                what, done + 1, epoch + 1,
                                replay->explain(state_before_step,
                                                {{input_name, batch.images},
                                                 {programs.info.label_input, batch.labels}})));
      }
      state_before_step = std::move(state_after_step);
    } else if (!std::isfinite(result.loss)) {
      throw Error("", fmt::format("the loss is {} at step {} (epoch {}); lower --lr? "
                                  "(--check-numerics names the first op that went non-finite)",
                                  loss_text(result.loss), done + 1, epoch + 1));
    }
    ++summary.steps;
    ++done;
    if (loss_log.is_open())
      loss_log << fmt::format("{},{},{}\n", done, epoch + 1, result.loss) << std::flush;
  };
  for (int64_t epoch = done / steps_per_epoch; epoch < options.epochs; ++epoch) {
    // Resuming mid-epoch: the same shuffled order, from the first batch not yet trained on.
    const int64_t skip = epoch == done / steps_per_epoch ? done % steps_per_epoch : 0;
    // Global batches, the same on every rank; each rank trains on its slice of each.
    data::BatchIterator batches(train_set, global_batch, options.seed, epoch, true);
    ProgressBar bar(out, draw, epoch + 1, options.epochs, steps_per_epoch * global_batch);
    ir::Tensor images, labels;
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, batch_index = 0, handled = skip;
    const auto epoch_start = Clock::now();
    bool stopped = false, drawing = true;
    while (true) {
      if (drawing) {
        if (options.max_steps > 0 &&
            summary.steps + static_cast<int64_t>(submitted.size()) >= options.max_steps) {
          stopped = true;
          drawing = false;
        } else {
          drawing = batches.next(images, labels);
          while (drawing && batch_index < skip) {
            ++batch_index;
            drawing = batches.next(images, labels);
          }
          if (drawing) {
            ++batch_index;
            if (world) {
              images = rows_of(images, rank * batch_size, batch_size);
              labels = rows_of(labels, rank * batch_size, batch_size);
            }
            executable.submit_step({images, labels});
            submitted.push_back({std::move(images), std::move(labels)});
          }
        }
      }
      if (submitted.empty()) break;
      if (drawing && submitted.size() < depth) continue;
      const Submitted batch = std::move(submitted.front());
      submitted.pop_front();
      const Collected step = collect(batch);
      const runtime::TrainingExecutable::StepResult& result = step.result;
      account(result, batch, epoch);
      if (interrupted()) {
        // The step submitted after this one has run too: count it before saving the state.
        while (!submitted.empty()) {
          account(collect(submitted.front()).result, submitted.front(), epoch);
          submitted.pop_front();
        }
        std::string saved;
        if (!options.checkpoint.empty() && reporter) {
          std::map<std::string, std::string> metadata = settings;
          metadata["kiln.step"] = std::to_string(done);
          write_safetensors(options.checkpoint, checkpoint_tensors(executable.state(), options.weights_dtype, options.checkpoint), metadata);
          saved = "; checkpoint " + options.checkpoint + " (--resume it to continue)";
        }
        bar.finish();
        out << fmt::format("{}: stopped after step {}{}\n", interrupt_signal_name(), done, saved);
        throw Interrupted();
      }
      loss_sum += result.loss;
      correct += step.correct;
      seen += global_batch;
      ++handled;
      bar.update(handled * global_batch, loss_sum * global_batch / seen,
                 static_cast<double>(correct) / static_cast<double>(seen * per_sample));
    }
    const double epoch_seconds = seconds_since(epoch_start);
    train_seconds += epoch_seconds;
    bar.finish();
    if (seen > 0) summary.final_loss = loss_sum * global_batch / seen;
    if (!options.checkpoint.empty() && reporter) {
      std::map<std::string, std::string> metadata = settings;
      metadata["kiln.step"] = std::to_string(done);
      write_safetensors(options.checkpoint, checkpoint_tensors(executable.state(), options.weights_dtype, options.checkpoint), metadata);
    }
    if (stopped && seen == 0) break;
    summary.test_accuracy =
        test_set.size() > 0 && reporter ? evaluate(executable, test_set, batch_size) : -1;
    const double train_accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen * per_sample) : 0.0;
    const double throughput = epoch_seconds > 0 ? seen * units_per_sample / epoch_seconds : 0.0;
    if (!quiet) {
      const std::map<std::string, ir::Tensor> state = executable.state();  // the scaler, masks
      out << fmt::format("epoch {}/{}: loss {:.4f}  train acc {:.2f}%  {}{:.0f} {}  {}{}\n",
                         epoch + 1, options.epochs, summary.final_loss, 100 * train_accuracy,
                         summary.test_accuracy >= 0
                             ? fmt::format("test acc {:.2f}%  ", 100 * summary.test_accuracy)
                             : std::string(),
                         throughput, throughput_unit, format_duration(epoch_seconds),
                         loss_scaling_report(state) + pruning_report(state));
    }
    if (options.on_epoch)
      options.on_epoch({epoch + 1, summary.final_loss, train_accuracy, summary.test_accuracy,
                        epoch_seconds, throughput});
    if (stopped) break;
  }
  if (options.final_state) *options.final_state = executable.state();
  summary.seconds = train_seconds;
  summary.throughput = train_seconds > 0 ? static_cast<double>(summary.steps * global_batch *
                                                                units_per_sample) /
                                               train_seconds
                                         : 0;
  summary.throughput_unit = throughput_unit;
  return summary;
}

}  // namespace kiln::compiler
