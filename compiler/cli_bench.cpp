// `kiln bench FILE`: how long a model or package takes to get ready and to run, like trtexec.
//
// Prepares the model once (parse, passes, codegen, compile; or load a package), runs it
// --warmup times untimed, then at least --iterations times and for at least --duration
// seconds, timing each run with a monotonic clock, and prints the latency distribution,
// throughput and peak memory — as text, or as one JSON object with --json for scripts.
// Inputs come from --input files or are drawn at random (seeded).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "codegen/emit.h"
#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/model_loader.h"
#include "compiler/output_file.h"
#include "compiler/parameters.h"
#include "compiler/pipeline_flags.h"
#include "compiler/training_graph.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/executor/executable.h"
#include "runtime/executor/profile.h"
#include "runtime/host/host_module.h"
#include "runtime/package/package.h"

namespace kiln::cli {
// Named rather than anonymous: the command files are compiled as one unity batch
// (compiler/CMakeLists.txt), where every file's Options and run() must stay apart.
namespace bench_command {

struct Options {
  std::string model;
  std::string backend = "auto";
  int warmup = 3;
  int iterations = 20;
  double duration = 0;  // seconds; 0: iterations alone decide
  int64_t batch = 0;    // 0: the model's own
  std::vector<std::string> inputs;  // NAME=PATH
  uint64_t seed = 0;
  bool json = false;
  std::string profile;  // --profile: a Chrome trace of the timed runs
  CacheFlags cache;
  LibraryFlag library;
  PrecisionFlag precision;
  PipelineFlags pipeline;
  InputShapeFlag input_shapes;  // an ONNX model's symbolic dims
};

// One input the model takes: its name and type (dynamic dims at their bounds, ir/dynamic_dims.h).
struct Slot {
  std::string name;
  ir::TensorType type;
  ir::DimMap dims;
};

// What runs: inputs in slot order in, outputs out; each kernel's time into the profile if given.
using Runner = std::function<std::vector<ir::Tensor>(const std::vector<ir::Tensor>&, runtime::RunProfile*)>;

struct Prepared {
  std::vector<Slot> slots;
  std::vector<ir::DimSymbol> symbols;  // the dynamic dims the slots name
  int64_t samples = 1;                 // per run: the first input's dim 0 as given (before padding)
  Runner run;
  std::string backend;            // what actually runs: reference, host or cuda
  int64_t planned_bytes = -1;     // device memory of the program; -1: none (reference)
  std::unique_ptr<runtime::Executable> executable;  // kept alive for `run`
};

// Uniform in [-1, 1) for floats, zeros for integers and bools (valid indices and labels).
ir::Tensor random_tensor(const ir::TensorType& type, std::mt19937_64& rng) {
  ir::Tensor tensor(type);
  if (!ir::is_floating(type.dtype)) return tensor;
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, uniform(rng));
  return tensor;
}

// Given inputs whose dynamic dims are below their bounds are checked and padded to them, as
// every run pads them (ir/dynamic_binding.h): the reference interpreter's inputs.
void pad_given_inputs(const std::vector<ir::DimSymbol>& symbols, const std::vector<Slot>& slots,
                      std::map<std::string, ir::Tensor>& given) {
  std::vector<ir::DimMap> dims;
  std::vector<ir::TensorType> types;
  std::vector<std::string> names;
  std::vector<ir::Tensor> tensors;
  for (const Slot& slot : slots)
    if (auto it = given.find(slot.name); it != given.end() && ir::has_dynamic_dims(slot.dims)) {
      dims.push_back(slot.dims);
      types.push_back(slot.type);
      names.push_back(slot.name);
      tensors.push_back(it->second);
    }
  if (tensors.empty()) return;
  ir::bind_dynamic_dims(symbols, dims, types, names, tensors);
  for (size_t i = 0; i < names.size(); ++i) given[names[i]] = tensors[i];
}

std::vector<ir::Tensor> bench_inputs(const Options& options, Prepared& prepared) {
  const std::vector<Slot>& slots = prepared.slots;
  std::map<std::string, ir::Tensor> given = read_input_flags(options.inputs);
  std::vector<std::pair<std::string, ir::TensorType>> types;
  for (const Slot& slot : slots) types.emplace_back(slot.name, slot.type);
  conform_input_flags(given, options.inputs, types);
  for (const auto& entry : given) {
    // Not a structured binding: clang 14 (the sanitizer build's compiler) cannot capture one.
    const std::string& name = entry.first;
    const bool known = std::any_of(slots.begin(), slots.end(),
                                   [&](const Slot& slot) { return slot.name == name; });
    if (!known) throw Error("--input " + name, "the model has no input '" + name + "'");
  }
  if (!slots.empty() && slots[0].type.rank() > 0) {
    auto first = given.find(slots[0].name);
    prepared.samples = first != given.end() && first->second.type().rank() > 0 ? first->second.shape()[0]
                                                                               : slots[0].type.shape[0];
  }
  std::map<std::string, ir::Tensor> padded = given;
  pad_given_inputs(prepared.symbols, slots, padded);
  std::mt19937_64 rng(options.seed);
  std::vector<ir::Tensor> inputs;
  for (const Slot& slot : slots) {
    auto it = padded.find(slot.name);
    if (it == padded.end()) {
      inputs.push_back(random_tensor(slot.type, rng));
      continue;
    }
    if (it->second.type() != slot.type)
      throw Error("--input " + slot.name, "expected " + slot.type.to_string() + ", got " +
                                              it->second.type().to_string());
    // An executable takes the size as given: it pads every run itself, and its kernels of real
    // rows only (codegen/dynamic_rows.h) skip the padding, which is what such a run costs.
    const bool as_given = prepared.executable && ir::has_dynamic_dims(slot.dims);
    inputs.push_back(as_given ? given.at(slot.name) : it->second);
  }
  return inputs;
}

runtime::ExecutableOptions executable_options(const Options& options,
                                              runtime::KernelCache* cache) {
  runtime::ExecutableOptions exe;
  exe.backend = options.backend == "cuda" ? runtime::Backend::Cuda : runtime::Backend::Host;
  exe.cache = cache;
  exe.verbose = options.cache.verbose;
  exe.host = runtime::host::host_options_from_environment();
  exe.cuda.libraries = options.library.selection();
  if (exe.backend == runtime::Backend::Cuda) {
    std::string why;
    if (!runtime::cuda::cuda_available(&why))
      throw Error("--backend=cuda", why + "; use --backend=host to run the kernels on the CPU");
  }
  return exe;
}

// The device memory the program allocates: the activation arena, plus every buffer with
// storage of its own (inputs, parameters, outputs, unplanned intermediates).
int64_t planned_bytes(const codegen::Program& program) {
  int64_t bytes = program.arena_bytes;
  for (const codegen::Buffer& buffer : program.buffers)
    if (buffer.arena_offset < 0) bytes += buffer.bytes;
  return bytes;
}

Prepared prepare_package(const Options& options, PhaseTimer& timer,
                         runtime::KernelCache* cache) {
  if (options.backend == "reference")
    throw Error("--backend=reference", "a package holds compiled kernels, not the graph; bench "
                                       "the model itself on the reference interpreter");
  if (options.batch != 0)
    throw Error("--batch", "a package is compiled for one batch size; bench the model instead");
  const runtime::Package package =
      timer.time("load", [&] { return runtime::read_package(options.model); });
  const runtime::PackageProgram* program = package.find(runtime::kInferenceProgram);
  if (!program) throw Error(options.model, "the package has no inference program");
  Prepared prepared;
  const std::vector<int> ids = program->program.buffer_ids(codegen::BufferRole::Input);
  for (size_t i = 0; i < ids.size(); ++i)
    prepared.slots.push_back({program->program.buffers[ids[i]].name, program->program.buffers[ids[i]].type,
                              i < program->program.input_dims.size() ? program->program.input_dims[i] : ir::DimMap{}});
  prepared.symbols = program->program.symbols;
  const runtime::ExecutableOptions exe = executable_options(options, cache);
  if (exe.backend == runtime::Backend::Cuda)
    runtime::require_code_for(program->binary, runtime::cuda::cuda_device_info(0).sm,
                              options.model);
  prepared.planned_bytes = planned_bytes(program->program);
  prepared.executable = timer.time("compile", [&] {
    return runtime::Executable::create(program->program,
                                       package.parameters(program->program, options.model), exe,
                                       &program->binary);
  });
  return prepared;
}

Prepared prepare_model(const Options& options, PhaseTimer& timer, runtime::KernelCache* cache) {
  // An imported (ONNX, Keras) model's symbolic dims take their sizes from --input-shape or the inputs given.
  compiler::ImportOptions import = options.input_shapes.options(options.model);
  if (options.model != "-" && compiler::is_imported_model(options.model) && import.dim_bounds.empty())
    for (const auto& [name, tensor] : read_input_flags(options.inputs))
      import.input_shapes.emplace(name, tensor.shape());
  auto graph = std::make_shared<ir::Graph>(
      timer.time("parse", [&] { return compiler::load_model(options.model, import); }));
  timer.time("weights", [&] { compiler::load_parameter_data(*graph); });
  if (options.batch != 0) compiler::set_batch_size(*graph, options.batch);
  timer.time("passes", [&] { options.pipeline.run(*graph, nullptr, options.library.selection(), options.precision.value()); });
  Prepared prepared;
  for (const ir::Value* input : graph->inputs)
    prepared.slots.push_back({input->name, input->type, input->dynamic_dims});
  prepared.symbols = graph->symbols;
  if (options.backend == "reference") {
    prepared.backend = "reference";
    if (!options.profile.empty())
      throw Error("--profile", "times generated kernels; the reference interpreter runs none "
                               "(use --backend=host or cuda)");
    prepared.run = [graph, slots = prepared.slots](const std::vector<ir::Tensor>& inputs,
                                                   runtime::RunProfile*) {
      std::map<std::string, ir::Tensor> by_name;
      for (size_t i = 0; i < slots.size(); ++i) by_name.emplace(slots[i].name, inputs[i]);
      return eval::run_reference(*graph, by_name);
    };
    return prepared;
  }
  const runtime::ExecutableOptions exe = executable_options(options, cache);
  codegen::Program program = timer.time(
      "codegen", [&] {
        return codegen::emit_program(*graph, options.library.selection(), options.precision.value());
      });
  prepared.planned_bytes = planned_bytes(program);
  std::vector<ir::Tensor> parameters;
  for (const ir::Value* param : graph->parameters) parameters.push_back(*param->data);
  prepared.executable = timer.time("compile", [&] {
    return runtime::Executable::create(std::move(program), parameters, exe);
  });
  return prepared;
}

struct Latency {
  std::vector<double> ms;  // sorted
  double total_s = 0;
  std::vector<runtime::RunProfile> profiles;  // of the timed runs, with --profile

  double quantile(double q) const {
    const double position = q * static_cast<double>(ms.size() - 1);
    const size_t below = static_cast<size_t>(position);
    const size_t above = std::min(below + 1, ms.size() - 1);
    return ms[below] + (ms[above] - ms[below]) * (position - static_cast<double>(below));
  }
  double mean() const { return total_s * 1000.0 / static_cast<double>(ms.size()); }
};

Latency measure(const Options& options, const Runner& run, const std::vector<ir::Tensor>& inputs) {
  for (int i = 0; i < options.warmup; ++i) run(inputs, nullptr);
  using Clock = std::chrono::steady_clock;
  Latency latency;
  const Clock::time_point start = Clock::now();
  while (static_cast<int>(latency.ms.size()) < options.iterations ||
         std::chrono::duration<double>(Clock::now() - start).count() < options.duration) {
    runtime::RunProfile* profile = nullptr;
    if (!options.profile.empty()) profile = &latency.profiles.emplace_back();
    const Clock::time_point before = Clock::now();
    run(inputs, profile);
    latency.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - before).count());
  }
  latency.total_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(latency.ms.begin(), latency.ms.end());
  return latency;
}

// The process's peak resident set, in bytes (Linux reports ru_maxrss in KiB).
int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// The median time of each kernel over the profiled runs, slowest first.
struct KernelMedian {
  std::string name;
  double median_us = 0;
};

std::vector<KernelMedian> kernel_medians(const codegen::Program& program,
                                         const std::vector<runtime::RunProfile>& runs) {
  std::map<int, std::vector<double>> times;
  for (const runtime::RunProfile& run : runs)
    for (const runtime::KernelTiming& timing : run.kernels) times[timing.kernel].push_back(timing.duration_us);
  std::vector<KernelMedian> medians;
  for (auto& [kernel, us] : times) {
    std::sort(us.begin(), us.end());
    const size_t middle = us.size() / 2;
    const double median = us.size() % 2 ? us[middle] : (us[middle - 1] + us[middle]) / 2;
    medians.push_back({program.kernels.at(static_cast<size_t>(kernel)).name, median});
  }
  std::stable_sort(medians.begin(), medians.end(),
                   [](const KernelMedian& a, const KernelMedian& b) { return a.median_us > b.median_us; });
  return medians;
}

// --profile: the timed runs as one Chrome trace, one after the other on its time line.
void write_profile(const std::string& path, const codegen::Program& program,
                   const std::vector<runtime::RunProfile>& runs) {
  compiler::write_file_atomically(path, runtime::chrome_trace_json(program, runs));
  std::cerr << fmt::format("kiln: wrote {} ({} timed runs of {} kernels on the {} backend)\n", path,
                           runs.size(), program.kernels.size(),
                           runs.empty() ? "" : runs.front().backend);
}

int bench(Options options) {
  if (options.backend == "auto") options.backend = runtime::cuda::auto_backend(options.cache.verbose, std::cerr);
  if (runtime::is_package_file(options.model) && options.precision.value() != codegen::Precision::F32)
    throw Error("--precision", "a package is already compiled (kiln compile --precision chooses "
                               "it); pass the model to choose the precision here");
  PhaseTimer timer;
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  Prepared prepared = runtime::is_package_file(options.model)
                          ? prepare_package(options, timer, cache.get())
                          : prepare_model(options, timer, cache.get());
  if (prepared.executable) {
    runtime::Executable* executable = prepared.executable.get();
    prepared.backend = options.backend;
    prepared.run = [executable](const std::vector<ir::Tensor>& inputs, runtime::RunProfile* profile) {
      return executable->run(inputs, profile);
    };
  }
  const std::vector<ir::Tensor> inputs = bench_inputs(options, prepared);
  const int64_t batch = prepared.samples;
  const Latency latency = measure(options, prepared.run, inputs);
  const double runs_per_s = static_cast<double>(latency.ms.size()) / latency.total_s;
  std::vector<KernelMedian> medians;
  if (!options.profile.empty()) {
    write_profile(options.profile, prepared.executable->program(), latency.profiles);
    medians = kernel_medians(prepared.executable->program(), latency.profiles);
  }

  if (options.json) {
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [phase, ms] : timer.phases()) phases[phase] = ms;
    nlohmann::json out = {
        {"model", options.model},
        {"backend", prepared.backend},
        {"batch", batch},
        {"prepare_ms", phases},
        {"warmup", options.warmup},
        {"runs", latency.ms.size()},
        {"latency_ms",
         {{"min", latency.ms.front()}, {"median", latency.quantile(0.5)},
          {"p90", latency.quantile(0.9)}, {"p99", latency.quantile(0.99)},
          {"max", latency.ms.back()}, {"mean", latency.mean()}}},
        {"throughput", {{"runs_per_s", runs_per_s},
                        {"samples_per_s", runs_per_s * static_cast<double>(batch)}}},
        {"peak_rss_bytes", peak_rss_bytes()},
        {"planned_device_bytes",
         prepared.planned_bytes < 0 ? nlohmann::json(nullptr) : nlohmann::json(prepared.planned_bytes)},
    };
    if (!options.profile.empty()) {
      nlohmann::json kernels = nlohmann::json::array();
      for (const KernelMedian& kernel : medians)
        kernels.push_back({{"name", kernel.name}, {"median_us", kernel.median_us}});
      out["kernels"] = std::move(kernels);
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  std::cout << fmt::format("{}: {} backend, batch {}\n", options.model, prepared.backend, batch);
  std::string phases;
  double prepare_ms = 0;
  for (const auto& [phase, ms] : timer.phases()) {
    phases += fmt::format("{}{} {:.1f} ms", phases.empty() ? "" : ", ", phase, ms);
    prepare_ms += ms;
  }
  std::cout << fmt::format("prepare:    {:.1f} ms ({})\n", prepare_ms, phases);
  std::cout << fmt::format(
      "latency:    min {:.3f}  median {:.3f}  p90 {:.3f}  p99 {:.3f}  max {:.3f} ms  "
      "({} runs after {} warm-up)\n",
      latency.ms.front(), latency.quantile(0.5), latency.quantile(0.9), latency.quantile(0.99),
      latency.ms.back(), latency.ms.size(), options.warmup);
  std::cout << fmt::format("throughput: {:.2f} runs/s, {:.2f} samples/s\n", runs_per_s,
                           runs_per_s * static_cast<double>(batch));
  std::string memory = fmt::format("peak RSS {:.1f} MiB", peak_rss_bytes() / 1048576.0);
  if (prepared.planned_bytes >= 0)
    memory += fmt::format(", device memory {:.1f} MiB (arena and buffers, as planned)",
                          prepared.planned_bytes / 1048576.0);
  std::cout << "memory:     " << memory << "\n";
  if (!medians.empty()) {
    double total_us = 0;
    for (const KernelMedian& kernel : medians) total_us += kernel.median_us;
    constexpr size_t kShown = 10;
    std::cout << fmt::format("kernels:    {} per run, {:.3f} ms of medians; the slowest:\n",
                             medians.size(), total_us / 1000.0);
    for (size_t i = 0; i < std::min(kShown, medians.size()); ++i)
      std::cout << fmt::format("  {:>10.1f} us  {:5.1f} %  {}\n", medians[i].median_us,
                               100.0 * medians[i].median_us / std::max(total_us, 1e-9), medians[i].name);
  }
  return kExitOk;
}

}  // namespace bench_command

Command add_bench_command(CLI::App& app) {
  using namespace bench_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time a model or package: preparation, latency percentiles, throughput, memory");
  cmd->add_option("FILE", options->model,
                  "model file (.json, .onnx, Keras (.json, .h5), textual IR, or - for stdin), or a package from kiln "
                  "compile")
      ->required();
  cmd->add_option("--backend", options->backend,
                  "auto: cuda when a GPU is available, else host; host: the generated kernels "
                  "on the CPU; cuda: on the GPU; reference: the reference interpreter")
      ->check(CLI::IsMember({"auto", "host", "cuda", "reference"}))
      ->capture_default_str();
  cmd->add_option("--warmup", options->warmup, "untimed runs first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--iterations", options->iterations, "timed runs, at least")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--duration", options->duration,
                  "keep timing runs for at least this many seconds (0: --iterations decides)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--batch", options->batch,
                  "run with this batch size (the first dim of every input) instead of the "
                  "model's")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-i,--input", options->inputs,
                  "input as NAME=FILE.npy (repeatable); others are drawn at random: uniform in "
                  "[-1, 1) for floats, zeros for integers");
  cmd->add_option("--seed", options->seed, "seed of the random inputs")->capture_default_str();
  cmd->add_flag("--json", options->json, "print one JSON object instead of text");
  cmd->add_option("--profile", options->profile,
                  "time each kernel of the timed runs: write them as a Chrome trace (chrome://tracing, "
                  "Perfetto) to this file, and print each kernel's median, slowest first");
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->precision.add_to(*cmd);
  options->pipeline.add_to(*cmd, 1);
  options->input_shapes.add_to(*cmd);
  return {cmd, [options]() { return bench(*options); }};
}

}  // namespace kiln::cli
