// `kiln run FILE`: execute a model on inputs read from .npy files.
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <map>

#include "codegen/emit.h"
#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/model_loader.h"
#include "compiler/pipeline_flags.h"
#include "compiler/npy.h"
#include "compiler/package_builder.h"
#include "compiler/output_file.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/executor/executable.h"
#include "runtime/package/package.h"
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"

namespace kiln::cli {

namespace run_command {

struct Options {
  std::string model;
  std::string backend = "auto";
  std::vector<std::string> inputs;  // NAME=PATH
  std::string output_dir;
  bool timings = false;
  std::string profile;  // --profile: a Chrome trace of the run
  bool no_cuda_graph = false;
  CacheFlags cache;
  LibraryFlag library;
  PrecisionFlag precision;
  PipelineFlags pipeline;
  InputShapeFlag input_shapes;
};

// Output file names come from value names, which may hold characters a path must not.
std::string file_stem(const std::string& name) {
  std::string stem;
  for (char c : name) stem += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
  return stem;
}

// min, max and argmax skip NaN (the mean does not); a tensor that is all NaN says so rather than
// "min inf max -inf", and one with some NaN counts them.
std::string summarize(const ir::Tensor& tensor) {
  double min = INFINITY, max = -INFINITY, sum = 0;
  int64_t argmax = 0, nans = 0;
  const int64_t count = tensor.num_elements();
  for (int64_t i = 0; i < count; ++i) {
    const double v = tensor.get(i);
    if (std::isnan(v)) ++nans;
    if (v > max) argmax = i;
    min = std::min(min, v);
    max = std::max(max, v);
    sum += v;
  }
  if (nans == count) return fmt::format("all {} values NaN", count);
  std::string text = fmt::format("min {:.6g}  max {:.6g}  mean {:.6g}  argmax {}", min, max,
                                 sum / static_cast<double>(count), argmax);
  if (nans > 0) text += fmt::format("  ({} of {} values NaN)", nans, count);
  return text;
}

struct InputSlot {
  std::string name;
  ir::TensorType type;  // with dynamic dims at their bounds
  ir::DimMap dims;      // ir/dynamic_dims.h; the backend checks the sizes of dynamic dims
};

std::vector<InputSlot> input_slots(const ir::Graph& graph) {
  std::vector<InputSlot> slots;
  for (const ir::Value* input : graph.inputs)
    slots.push_back({input->name, input->type, input->dynamic_dims});
  return slots;
}

std::vector<InputSlot> input_slots(const codegen::Program& program) {
  std::vector<InputSlot> slots;
  const std::vector<int> ids = program.buffer_ids(codegen::BufferRole::Input);
  for (size_t i = 0; i < ids.size(); ++i)
    slots.push_back({program.buffers[ids[i]].name, program.buffers[ids[i]].type,
                     i < program.input_dims.size() ? program.input_dims[i] : ir::DimMap{}});
  return slots;
}

// f64 data given for a float input of another width is rounded to it (conform_input_flags).
void conform_inputs(std::map<std::string, ir::Tensor>& inputs, const Options& options,
                    const std::vector<InputSlot>& slots) {
  std::vector<std::pair<std::string, ir::TensorType>> types;
  for (const InputSlot& slot : slots) types.emplace_back(slot.name, slot.type);
  conform_input_flags(inputs, options.inputs, types);
}

// Inputs in graph order, checked against the graph's inputs (names, then types).
std::vector<ir::Tensor> ordered_inputs(const std::vector<InputSlot>& slots,
                                       std::map<std::string, ir::Tensor>& by_name) {
  std::vector<ir::Tensor> ordered;
  for (const auto& [name, tensor] : by_name) {
    bool known = false;
    for (const InputSlot& input : slots) known |= input.name == name;
    if (!known) throw Error("--input " + name, "unknown input '" + name + "'");
  }
  for (const InputSlot& input : slots) {
    auto it = by_name.find(input.name);
    if (it == by_name.end())
      throw Error("", "missing input '" + input.name + "'; pass --input " + input.name + "=FILE.npy");
    if (ir::has_dynamic_dims(input.dims)) {
      ordered.push_back(it->second);  // the backend binds its dynamic dims (ir/dynamic_binding.h)
      continue;
    }
    if (it->second.type() != input.type)
      throw Error("--input " + input.name, "input '" + input.name + "': expected " +
                                               input.type.to_string() + ", got " +
                                               it->second.type().to_string());
    ordered.push_back(it->second);
  }
  return ordered;
}

std::vector<ir::Tensor> parameter_tensors(const ir::Graph& graph) {
  std::vector<ir::Tensor> tensors;
  for (const ir::Value* param : graph.parameters) tensors.push_back(*param->data);
  return tensors;
}

// The reference interpreter on inputs whose dynamic dims may be below their bounds: padded and
// sliced back as the backends do (ir::run_padded), so all three agree on what a dynamic dim
// means.
std::vector<ir::Tensor> run_reference(const ir::Graph& graph, std::map<std::string, ir::Tensor>& by_name) {
  if (graph.symbols.empty()) return eval::run_reference(graph, by_name);
  const std::vector<InputSlot> slots = input_slots(graph);
  std::vector<ir::DimMap> dims;
  std::vector<ir::TensorType> types;
  std::vector<std::string> names;
  for (const InputSlot& slot : slots) {
    dims.push_back(slot.dims);
    types.push_back(slot.type);
    names.push_back(slot.name);
  }
  return ir::run_padded(graph.symbols, dims, types, names, ir::output_dynamic_dims(graph),
                        ordered_inputs(slots, by_name), [&](const std::vector<ir::Tensor>& padded, const std::vector<int64_t>&) {
                          std::map<std::string, ir::Tensor> named;
                          for (size_t i = 0; i < padded.size(); ++i) named.emplace(names[i], padded[i]);
                          return eval::run_reference(graph, named);
                        });
}

// --backend=auto: the GPU when there is one, else the same kernels on the CPU.
std::string resolve_backend(const Options& options) {
  if (options.backend != "auto") return options.backend;
  return runtime::cuda::auto_backend(options.cache.verbose, std::cerr);
}

// --profile: one event per kernel of the run, in the Chrome trace format.
void write_profile(const Options& options, const codegen::Program& program,
                   const runtime::RunProfile& profile) {
  compiler::write_file_atomically(options.profile, runtime::chrome_trace_json(program, {profile}));
  std::cerr << fmt::format("kiln: wrote {} ({} kernels on the {} backend)\n", options.profile,
                           profile.kernels.size(), profile.backend);
}

std::vector<ir::Tensor> run_compiled(Options options, const ir::Graph& graph,
                                     const std::vector<ir::Tensor>& inputs, PhaseTimer& timer) {
  options.backend = resolve_backend(options);
  const codegen::Program program = timer.time("codegen", [&] {
    return codegen::emit_program(graph, options.library.selection(), options.precision.value());
  });
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  if (options.backend == "host") {
    const runtime::host::HostModule module = timer.time("compile", [&] {
      return runtime::host::HostModule::compile(program.source, graph.name, cache.get(),
                                                options.cache.verbose);
    });
    const runtime::host::HostOptions host_options = runtime::host::host_options_from_environment();
    runtime::host::HostExecutable executable(program, module, parameter_tensors(graph), host_options);
    runtime::RunProfile profile;
    std::vector<ir::Tensor> outputs = timer.time("run", [&] {
      return executable.run(inputs, options.profile.empty() ? nullptr : &profile);
    });
    if (!options.profile.empty()) write_profile(options, program, profile);
    return outputs;
  }
  std::string why;
  if (!runtime::cuda::cuda_available(&why))
    throw Error("--backend=cuda", why + "; use --backend=host to run the same kernels on the CPU");
  runtime::NvrtcOptions nvrtc;
  nvrtc.cache = cache.get();
  nvrtc.verbose = options.cache.verbose;
  const runtime::CudaBinary binary = timer.time("compile", [&] {
    return runtime::compile_with_nvrtc(program.source, graph.name + ".cu", nvrtc);
  });
  runtime::cuda::CudaOptions cuda_options;
  cuda_options.use_cuda_graph = !options.no_cuda_graph;
  cuda_options.libraries = options.library.selection();
  auto executable = timer.time("load", [&] {
    return runtime::cuda::CudaExecutable::create(program, binary, parameter_tensors(graph), cuda_options);
  });
  if (options.cache.verbose)
    for (const std::string& line : executable->library_report()) std::cerr << "kiln: " << line << "\n";
  runtime::RunProfile profile;
  std::vector<ir::Tensor> outputs = timer.time("run", [&] {
    return executable->run(inputs, options.profile.empty() ? nullptr : &profile);
  });
  if (!options.profile.empty()) write_profile(options, program, profile);
  return outputs;
}

// A package's inference program, with the code it carries (no NVRTC on the GPU; the host
// backend compiles the packaged source once into the kernel cache). `path`: the package file,
// or the model it was just built from.
std::vector<ir::Tensor> run_inference_program(Options options, const runtime::Package& package,
                                              const std::string& path,
                                              std::map<std::string, ir::Tensor>& inputs,
                                              std::vector<std::string>& output_names, PhaseTimer& timer);

// A package file.
std::vector<ir::Tensor> run_package(Options options, const CLI::App& command,
                                    std::map<std::string, ir::Tensor>& inputs,
                                    std::vector<std::string>& output_names, PhaseTimer& timer) {
  if (options.backend == "reference")
    throw Error("--backend=reference", "a package holds compiled kernels, not the graph; run the "
                                       "model itself on the reference interpreter");
  if (options.pipeline.given(command))
    throw Error("-O/--passes", "a package is already compiled; pass the model to choose passes");
  if (command.count("--precision") > 0)
    throw Error("--precision", "a package is already compiled (kiln compile --precision chooses "
                               "it); pass the model to choose the precision here");
  const runtime::Package package = timer.time("load", [&] { return runtime::read_package(options.model); });
  return run_inference_program(options, package, options.model, inputs, output_names, timer);
}

// A model file on the host or CUDA backend: built into a package as kiln compile builds one, so
// that a second run finds it in the package cache (compiler/package_cache.h). For the host
// backend the package holds no device code: nothing runs NVRTC.
std::vector<ir::Tensor> run_model(Options options, const compiler::ImportOptions& import,
                                  std::map<std::string, ir::Tensor>& inputs,
                                  std::vector<std::string>& output_names, PhaseTimer& timer) {
  options.backend = resolve_backend(options);
  std::string why;
  if (options.backend == "cuda" && !runtime::cuda::cuda_available(&why))  // before any compile
    throw Error("--backend=cuda", why + "; use --backend=host to run the same kernels on the CPU");
  compiler::PackageRequest request;
  request.model = options.model;
  request.import = import;
  if (options.backend == "host") {
    request.archs.clear();
    request.ptx = false;
  }
  request.library = options.library.text;
  request.precision = options.precision.value();
  options.pipeline.apply_to(request, options.library.selection(), options.precision.value());
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  request.cache = cache.get();
  request.verbose = options.cache.verbose;
  request.record_phase = [&timer](const std::string& phase, double ms) { timer.add(phase, ms); };
  const runtime::Package package = compiler::build_package(request).package;
  return run_inference_program(options, package, options.model, inputs, output_names, timer);
}

std::vector<ir::Tensor> run_inference_program(Options options, const runtime::Package& package,
                                              const std::string& path,
                                              std::map<std::string, ir::Tensor>& inputs,
                                              std::vector<std::string>& output_names, PhaseTimer& timer) {
  const runtime::PackageProgram* program = package.find(runtime::kInferenceProgram);
  if (!program) throw Error(path, "the package has no inference program");
  output_names = program->program.output_names;
  options.backend = resolve_backend(options);
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  runtime::ExecutableOptions exe;
  exe.backend = options.backend == "cuda" ? runtime::Backend::Cuda : runtime::Backend::Host;
  exe.cache = cache.get();
  exe.verbose = options.cache.verbose;
  exe.host = runtime::host::host_options_from_environment();
  exe.cuda.use_cuda_graph = !options.no_cuda_graph;
  exe.cuda.libraries = options.library.selection();
  if (exe.backend == runtime::Backend::Cuda) {
    std::string why;
    if (!runtime::cuda::cuda_available(&why))
      throw Error("--backend=cuda", why + "; use --backend=host to run the same kernels on the CPU");
    runtime::require_code_for(program->binary, runtime::cuda::cuda_device_info(0).sm, path);
  }
  conform_inputs(inputs, options, input_slots(program->program));
  const std::vector<ir::Tensor> ordered = ordered_inputs(input_slots(program->program), inputs);
  auto executable = timer.time("compile", [&] {
    return runtime::Executable::create(program->program, package.parameters(program->program, path),
                                       exe, &program->binary);
  });
  runtime::RunProfile profile;
  std::vector<ir::Tensor> outputs = timer.time("run", [&] {
    return executable->run(ordered, options.profile.empty() ? nullptr : &profile);
  });
  if (!options.profile.empty()) write_profile(options, program->program, profile);
  return outputs;
}

int run(const Options& options, const CLI::App& command) {
  PhaseTimer timer;
  std::map<std::string, ir::Tensor> inputs = read_input_flags(options.inputs);
  std::vector<ir::Tensor> outputs;
  std::vector<std::string> output_names;
  if (runtime::is_package_file(options.model)) {
    outputs = run_package(options, command, inputs, output_names, timer);
  } else {
    // An imported (ONNX, Keras) model's symbolic dims take their sizes from the inputs given (or --input-shape).
    compiler::ImportOptions import = options.input_shapes.options(options.model);
    if (options.model != "-" && compiler::is_imported_model(options.model) && import.dim_bounds.empty())
      for (const auto& [name, tensor] : inputs) {
        import.input_shapes.emplace(name, tensor.shape());
        import.input_values.emplace(name, tensor);
      }
    if (options.backend != "reference" && options.model != "-") {
      outputs = run_model(options, import, inputs, output_names, timer);
    } else {
      // The reference interpreter runs the graph; a model from stdin has no file to key the
      // package cache by, so it is compiled here.
      ir::Graph graph = timer.time("parse", [&] { return compiler::load_model(options.model, import); });
      timer.time("weights", [&] { compiler::load_parameter_data(graph); });
      timer.time("passes", [&] { options.pipeline.run(graph, nullptr, options.library.selection(), options.precision.value()); });
      conform_inputs(inputs, options, input_slots(graph));
      if (options.backend == "reference") {
        if (!options.profile.empty())
          throw Error("--profile", "times generated kernels; the reference interpreter runs none "
                                   "(use --backend=host or cuda)");
        outputs = timer.time("run", [&] { return run_reference(graph, inputs); });
      } else {
        outputs = run_compiled(options, graph, ordered_inputs(input_slots(graph), inputs), timer);
      }
      for (size_t i = 0; i < outputs.size(); ++i) output_names.push_back(graph.output_name(i));
    }
  }

  if (!options.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.output_dir, ec);
    if (ec) throw Error(options.output_dir, "cannot create the output directory: " + ec.message());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = output_names.at(i);
    std::string line = fmt::format("{}: {}  {}", name, outputs[i].type().to_string(), summarize(outputs[i]));
    if (!options.output_dir.empty()) {
      const std::string path =
          (std::filesystem::path(options.output_dir) / (file_stem(name) + ".npy")).string();
      compiler::write_npy(path, outputs[i]);
      line += "  -> " + path;
    }
    std::cout << line << "\n";
  }
  if (options.timings) timer.print();
  return kExitOk;
}

}  // namespace run_command

Command add_run_command(CLI::App& app) {
  using namespace run_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model on inputs from .npy files");
  cmd->add_option("FILE", options->model,
                  "model file (.json, .onnx, Keras (.json, .h5), textual IR, or - for stdin), or a package from kiln compile")
      ->required();
  cmd->add_option("--backend", options->backend,
                  "auto: cuda when a GPU is available, else host; host: the generated CUDA "
                  "kernels on the CPU; cuda: on the GPU; reference: the reference interpreter")
      ->check(CLI::IsMember({"auto", "host", "cuda", "reference"}))
      ->capture_default_str();
  cmd->add_option("-i,--input", options->inputs, "graph input as NAME=FILE.npy (repeatable)");
  cmd->add_option("-o,--output-dir", options->output_dir, "write each output as NAME.npy in this directory");
  cmd->add_flag("--timings", options->timings,
                "print the time of each phase on stderr (parse, cache; on a miss weights, passes, codegen, "
                "nvrtc, store; load, compile, run)");
  cmd->add_option("--profile", options->profile,
                  "write a Chrome trace (chrome://tracing, Perfetto) of the run to this file: one "
                  "event per kernel (host: wall time; cuda: CUDA events)");
  cmd->add_flag("--no-cuda-graph", options->no_cuda_graph,
                "cuda backend: launch kernels one by one instead of replaying a captured CUDA graph");
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->precision.add_to(*cmd);
  options->pipeline.add_to(*cmd, 1);
  options->input_shapes.add_to(*cmd);
  return {cmd, [options, cmd]() { return run(*options, *cmd); }};
}

}  // namespace kiln::cli
