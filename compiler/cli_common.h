// Pieces shared by the subcommands that compile: timing phases and the kernel cache flags.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "codegen/library_call.h"
#include "codegen/precision.h"
#include "compiler/import/onnx/onnx_importer.h"
#include "compiler/trainer.h"
#include "ir/tensor.h"
#include "runtime/compile/kernel_cache.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::cli {

// Wall-clock time per phase, printed by --timings.
class PhaseTimer {
 public:
  // Runs `work` and records its duration under `phase`.
  template <typename F>
  auto time(const std::string& phase, F&& work) {
    const auto start = std::chrono::steady_clock::now();
    if constexpr (std::is_void_v<decltype(work())>) {
      work();
      record(phase, start);
    } else {
      auto result = work();
      record(phase, start);
      return result;
    }
  }
  // "parse 3.1 ms, codegen 0.4 ms, ..." one phase per line, to stderr.
  void print() const;
  // Records a phase timed elsewhere.
  void add(const std::string& phase, double milliseconds) { phases_.push_back({phase, milliseconds}); }
  // Each phase and its milliseconds, in the order they ran.
  const std::vector<std::pair<std::string, double>>& phases() const { return phases_; }

 private:
  void record(const std::string& phase, std::chrono::steady_clock::time_point start);
  std::vector<std::pair<std::string, double>> phases_;  // name, milliseconds
};

// The tensors of repeated `--input NAME=FILE.npy` flags, by name (kiln::Error naming the flag
// for a malformed or repeated one, or an unreadable file).
std::map<std::string, ir::Tensor> read_input_flags(const std::vector<std::string>& specs);
// Each of `inputs` as the graph input of its name takes it (compiler::conform_input: f64 data
// rounds to an f32, f16 or bf16 input); a rounding error is located at the input's file.
void conform_input_flags(std::map<std::string, ir::Tensor>& inputs,
                         const std::vector<std::string>& specs,
                         const std::vector<std::pair<std::string, ir::TensorType>>& slots);

struct CacheFlags {
  bool no_cache = false;
  bool verbose = false;

  void add_to(CLI::App& command);
  // The cache to use, or nullptr with --no-cache.
  std::unique_ptr<runtime::KernelCache> open() const;
  // NVRTC for `archs`, through the cache these flags chose.
  runtime::CudaBinary compile(const std::string& source, const std::string& program_name,
                              const std::vector<std::string>& archs) const;
};

// --library=auto|none|cublas,cudnn: the vendor routines the CUDA backend may run in place of
// generated kernels (codegen/library_dispatch.h). auto: every library kiln knows, each used
// when it loads at run time.
struct LibraryFlag {
  std::string text = "auto";

  void add_to(CLI::App& command);
  // The parsed selection; kiln::Error naming the flag for a bad value.
  codegen::LibrarySelection selection() const;
};

// --precision=f32|tf32: the arithmetic of the GEMMs (codegen/precision.h). f32 (the default)
// is exact f32 on the FMA units; tf32 runs conv2d, dense and matmul on tensor cores with
// operands rounded to TF32, and lets the library calls do the same.
struct PrecisionFlag {
  std::string text = "f32";

  void add_to(CLI::App& command);
  codegen::Precision value() const;
};

// --weights-dtype f32|bf16|f16: how f32 weights are stored (a package's, a checkpoint's
// parameters); `what` ends the help text ("in the package").
struct WeightsDtypeFlag {
  std::string text = "f32";

  void add_to(CLI::App& command, const std::string& what);
  ir::DType value() const;
};

// --input-shape NAME=2x3x224x224 (repeatable): sizes for an ONNX model's symbolic dims; and
// --dim NAME=MAX (repeatable): keep the symbolic dim NAME dynamic, up to MAX (ir/dynamic_dims.h).
struct InputShapeFlag {
  std::vector<std::string> specs;
  std::vector<std::string> dim_specs;

  void add_to(CLI::App& command);
  // The parsed shapes; kiln::Error naming the flag for a bad value, or when given for a model
  // that is not ONNX (its input shapes are fixed).
  compiler::ImportOptions options(const std::string& model) const;
};

// Range checks for numeric flags, in kiln's words ("--epochs: must be >= 1, got 0"). A value out
// of range is a usage error: CLI11 reports it and kiln exits 2.
CLI::Validator at_least_one();   // integers: >= 1
CLI::Validator positive();       // reals: > 0 (and finite)
CLI::Validator non_negative();   // reals: >= 0 (and finite)

// --lr-schedule, --warmup-steps, --total-steps, --min-lr-scale, --clip-grad-norm; `prefix`
// starts each help text ("with --train: " for kiln compile).
void add_step_scalar_flags(CLI::App& command, compiler::StepScalarFlags& flags,
                           const std::string& prefix);

// --arch: the GPU architectures to compile for, comma separated (default sm_80,sm_90).
void add_arch_option(CLI::App& command, std::vector<std::string>& archs);

}  // namespace kiln::cli
