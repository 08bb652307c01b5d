#include "compiler/package_builder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "codegen/emit.h"
#include "codegen/library_dispatch.h"
#include "compiler/model_loader.h"
#include "compiler/package_cache.h"
#include "compiler/parameters.h"
#include "compiler/trainer.h"
#include "ir/diagnostic.h"
#include "ir/float_storage.h"
#include "passes/pass_manager.h"

namespace kiln::compiler {
namespace {

std::string read_model_bytes(const std::string& path) {
  if (path == "-") throw Error("-", "a package is compiled from a model file (it records the file's hash)");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(path, "cannot open the model: " + std::string(std::strerror(errno)));
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

// Runs `work`, reporting its wall time as `phase` when the request asks for phases.
template <typename F>
auto timed(const PackageRequest& request, const char* phase, F&& work) {
  const auto start = std::chrono::steady_clock::now();
  auto report = [&] {
    if (!request.record_phase) return;
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    request.record_phase(phase, elapsed.count());
  };
  if constexpr (std::is_void_v<decltype(work())>) {
    work();
    report();
  } else {
    auto result = work();
    report();
    return result;
  }
}

runtime::PackageProgram compile_program(const PackageRequest& request, std::string role,
                                        codegen::Program program) {
  // No arch and no PTX: a package for the host backend (kiln run), which compiles the source.
  if (request.archs.empty() && !request.ptx) return {std::move(role), std::move(program), {}};
  runtime::NvrtcOptions nvrtc;
  nvrtc.archs = request.archs;
  nvrtc.cache = request.cache;
  nvrtc.verbose = request.verbose;
  runtime::CudaBinary binary = timed(request, "nvrtc", [&] {
    return runtime::compile_with_nvrtc(program.source, program.graph_name + ".cu", nvrtc);
  });
  if (!request.ptx) {
    binary.ptx.clear();
    binary.ptx_arch.clear();
  }
  return {std::move(role), std::move(program), std::move(binary)};
}

nlohmann::ordered_json decisions_json(const PassDecisions& decisions) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& [pass, message] : decisions) list.push_back({{"pass", pass}, {"message", message}});
  return list;
}

// The weights as the file will hold them, so the package built here computes what the one read
// back from its file does:
// - --weights-dtype: every f32 weight rounded to the storage dtype, kept as f32 (the programs'
//   type). A value beyond f16's range is an error naming the parameter.
// - -0.0 becomes +0.0: pruning multiplies weights by a 0/1 mask, which leaves half the pruned
//   ones -0.0, and the package stores zeros as bits of a bitmask (sparse_weights.h). No sum or
//   product can tell the two apart but for the sign of an exactly zero result.
void round_weights_for_storage(runtime::Package& package, const PackageRequest& request) {
  package.weights_dtype = request.weights_dtype;
  for (auto& [name, tensor] : package.weights) {
    if (!ir::is_floating(tensor.dtype())) continue;
    if (request.weights_dtype != ir::DType::F32) {
      std::string error;
      const std::optional<ir::Tensor> narrowed = ir::narrowed_for_storage(tensor, request.weights_dtype, &error);
      if (!narrowed)
        throw Error(request.model, fmt::format("--weights-dtype={}: parameter '{}': {}",
                                               ir::dtype_name(request.weights_dtype), name, error));
      tensor = ir::widened_from_storage(*narrowed, tensor.type());
    }
    // After the rounding, which turns tiny negative weights into -0.0 too.
    for (int64_t i = 0; i < tensor.num_elements(); ++i)
      if (const double value = tensor.get(i); value == 0.0 && std::signbit(value)) tensor.set(i, 0.0);
  }
}

}  // namespace

std::function<void(ir::Graph&, PassDecisions*)> pipeline_runner(std::vector<std::string> pipeline) {
  return [pipeline = std::move(pipeline)](ir::Graph& graph, PassDecisions* decisions) {
    passes::PassManagerOptions options;
    if (decisions) {
      options.decisions = decisions;
      options.record_decisions = {"fuse-conv-bias-relu", "fuse-elementwise"};
    }
    passes::PassManager manager(options, std::cerr);
    manager.add_all(pipeline);
    manager.run(graph);
  };
}

BuiltPackage build_package(const PackageRequest& request) {
  if (runtime::is_package_file(request.model))
    throw Error(request.model, "this is already a package; kiln compile takes a model (.json or IR)");
  const std::string model_bytes = read_model_bytes(request.model);
  const codegen::LibrarySelection libraries = codegen::parse_library_flag(request.library);

  runtime::Package package;
  runtime::PackageManifest& m = package.manifest;
  m.kiln_version = KILN_VERSION;
  m.model = std::filesystem::path(request.model).filename().string();
  m.model_hash = runtime::hash_bytes(model_bytes);
  m.archs = request.archs;
  m.options = {{"library", request.library},
               {"precision", std::string(codegen::precision_name(request.precision))},
               {"ptx", request.ptx}};
  if (request.weights_dtype != ir::DType::F32)
    m.options["weights_dtype"] = std::string(ir::dtype_name(request.weights_dtype));
  m.report = nlohmann::ordered_json::object();

  if (request.train) {
    TrainingPrograms programs = build_training_programs(request.model, request.train->batch_size,
                                                        request.train->seed, request.train->optimizer,
                                                        libraries, request.precision);
    m.pipeline = passes::with_autocast(
        passes::keep_vendor_gemms_whole(passes::training_pipeline(request.train->optimizer),
                                        libraries.cudnn, libraries.cublaslt),
        codegen::autocast_dtype(request.precision));
    m.options["train"] = training_options_json(programs);
    m.report["fusion_decisions"] = {{std::string(runtime::kTrainStepProgram), decisions_json(programs.step_decisions)}};
    package.programs.push_back(compile_program(request, std::string(runtime::kInferenceProgram),
                                               std::move(programs.eval)));
    package.programs.push_back(compile_program(request, std::string(runtime::kTrainStepProgram),
                                               std::move(programs.step)));
    package.weights = std::move(programs.weights);
    round_weights_for_storage(package, request);
    return {std::move(package), ""};
  }
  ir::Graph graph = timed(request, "parse", [&] { return load_model(request.model, request.import); });
  std::optional<runtime::CacheKey> key;
  if (request.cache && request.reuse_package && request.parameter_values.empty()) {
    std::string why = "kiln has no build ID";
    const std::optional<std::string> entry = timed(request, "cache", [&]() -> std::optional<std::string> {
      key = package_cache_key(request, m.model_hash, graph);
      return key ? request.cache->lookup(*key, &why) : std::nullopt;
    });
    if (entry) {
      if (request.verbose) std::cerr << "kiln: package cache hit: " << *entry << "\n";
      return {timed(request, "load", [&] { return runtime::read_package(*entry); }), *entry};
    }
    if (request.verbose) std::cerr << "kiln: package cache miss (" << why << ")\n";
  }
  timed(request, "weights", [&] { load_parameter_data(graph); });
  for (const auto& entry : request.parameter_values) {
    const std::string& name = entry.first;
    const ir::Tensor& value = entry.second;
    const auto param = std::find_if(graph.parameters.begin(), graph.parameters.end(),
                                    [&](const ir::Value* p) { return p->name == name; });
    if (param == graph.parameters.end())
      throw Error(request.model, "the model has no parameter '" + name + "'");
    if (value.type() != (*param)->type)
      throw Error(request.model, fmt::format("parameter '{}': expected {}, got {}", name,
                                             (*param)->type.to_string(), value.type().to_string()));
    (*param)->data = std::make_shared<const ir::Tensor>(value);
  }
  PassDecisions decisions;
  if (request.run_pipeline) timed(request, "passes", [&] { request.run_pipeline(graph, &decisions); });
  m.report["fusion_decisions"] = {{std::string(runtime::kInferenceProgram), decisions_json(decisions)}};
  m.pipeline = request.pipeline;
  m.options["opt_level"] = request.opt_level;
  codegen::Program program =
      timed(request, "codegen", [&] { return codegen::emit_program(graph, libraries, request.precision); });
  package.programs.push_back(
      compile_program(request, std::string(runtime::kInferenceProgram), std::move(program)));
  for (const ir::Value* param : graph.parameters) package.weights.emplace(param->name, *param->data);
  round_weights_for_storage(package, request);
  if (!key) return {std::move(package), ""};
  const std::string entry = timed(request, "store", [&] {
    std::string stored = request.cache->store(*key, runtime::serialize_package(package));
    // Packages are large (ResNet-50: 105 MB): each store may take the cache over its limit.
    if (const int64_t removed = request.cache->trim(runtime::KernelCache::max_bytes_from_environment(), &*key);
        removed > 0 && request.verbose)
      std::cerr << "kiln: the cache was over its size limit (KILN_CACHE_MAX_SIZE): removed the "
                << removed << " least recently used entries\n";
    return stored;
  });
  return {std::move(package), entry};
}

}  // namespace kiln::compiler
