// Compiling a model into a package (runtime/package/package.h): what `kiln compile` writes and
// what the C++ API's Model::load does with a model file.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codegen/precision.h"
#include "compiler/import/onnx/onnx_importer.h"
#include "ir/graph.h"
#include "runtime/compile/kernel_cache.h"
#include "runtime/package/package.h"

namespace kiln::compiler {

using PassDecisions = std::vector<std::pair<std::string, std::string>>;

struct PackageRequest {
  std::string model;  // a model file (.json, .onnx or textual IR)
  ImportOptions import;  // --input-shape for an ONNX model's symbolic dims
  // No arch and no PTX: no device code at all (kiln run on the host backend; no NVRTC).
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  bool ptx = true;                  // false: cubins only (--no-ptx)
  std::string library = "auto";     // --library
  codegen::Precision precision = codegen::Precision::F32;  // --precision
  // --weights-dtype: f32 weights stored in the package as f32, or rounded to bf16 or f16 (half
  // the bytes; the programs compute with the rounded values, widened back to f32).
  ir::DType weights_dtype = ir::DType::F32;
  // The inference pipeline: its pass names (recorded in the manifest) and how to run it
  // (the CLI's flags or the default pipeline), keeping the fusion decisions.
  int opt_level = 1;
  std::vector<std::string> pipeline;
  std::function<void(ir::Graph&, PassDecisions*)> run_pipeline;
  // Set: a training package (the training step and the inference graph at this batch size).
  struct Training {
    int64_t batch_size = 32;
    std::string optimizer = "optimizer=adam lr=0.001";  // append-optimizer's options
    uint64_t seed = 0;
  };
  std::optional<Training> train;
  // Data that replaces the model's own for these parameters (by name, the same types): the
  // weights Model::fit trained. Names the model lacks are an error. Such a package is not
  // cached (the key does not cover them); its kernels are.
  std::map<std::string, ir::Tensor> parameter_values;
  runtime::KernelCache* cache = nullptr;
  // With a cache: whether the package itself may come from it (compiler/package_cache.h).
  // false when the passes must run (IR dumps, pass logs, --pass-fuel).
  bool reuse_package = true;
  bool verbose = false;
  // Called with each phase's wall time (parse, weights, passes, codegen, nvrtc; on a package
  // cache hit: parse, cache, load), for --timings.
  std::function<void(const std::string& phase, double milliseconds)> record_phase;
};

struct BuiltPackage {
  runtime::Package package;
  // The package cache's entry that holds this package byte for byte (a hit, or the entry just
  // stored), or "" when the package was not cached: kiln compile copies it.
  std::string cache_entry;
};

// Loads, optimizes, emits and compiles (NVRTC for every arch) the model, or finds the package
// in the package cache (compiler/package_cache.h). Throws kiln::Error.
BuiltPackage build_package(const PackageRequest& request);

// Runs `pipeline` (pass names), for callers without the CLI's flags.
std::function<void(ir::Graph&, PassDecisions*)> pipeline_runner(std::vector<std::string> pipeline);

}  // namespace kiln::compiler
