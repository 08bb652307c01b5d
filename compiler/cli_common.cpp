#include "compiler/cli_common.h"

#include "codegen/library_dispatch.h"
#include "compiler/npy.h"
#include "compiler/tensor_file_util.h"
#include "ir/diagnostic.h"
#include "ir/float_storage.h"

#include <fmt/format.h>
#include <charconv>
#include <cmath>
#include <string>
#include <iostream>

#include "compiler/model_loader.h"
#include "ir/diagnostic.h"

namespace kiln::cli {

void PhaseTimer::record(const std::string& phase, std::chrono::steady_clock::time_point start) {
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  phases_.push_back({phase, elapsed.count()});
}

void PhaseTimer::print() const {
  double total = 0;
  for (const auto& [phase, ms] : phases_) {
    std::cerr << fmt::format("  {:<10} {:>10.2f} ms\n", phase, ms);
    total += ms;
  }
  std::cerr << fmt::format("  {:<10} {:>10.2f} ms\n", "total", total);
}

std::map<std::string, ir::Tensor> read_input_flags(const std::vector<std::string>& specs) {
  std::map<std::string, ir::Tensor> tensors;
  for (const std::string& spec : specs) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == spec.size())
      throw Error("--input " + spec, "expected NAME=FILE.npy");
    const std::string name = spec.substr(0, equals);
    if (tensors.count(name)) throw Error("--input " + spec, "input '" + name + "' is given twice");
    tensors.emplace(name, compiler::read_npy(spec.substr(equals + 1)));
  }
  return tensors;
}

void conform_input_flags(std::map<std::string, ir::Tensor>& inputs,
                         const std::vector<std::string>& specs,
                         const std::vector<std::pair<std::string, ir::TensorType>>& slots) {
  for (const auto& [name, type] : slots) {
    auto it = inputs.find(name);
    if (it == inputs.end()) continue;
    std::string path = name;
    for (const std::string& spec : specs)
      if (spec.size() > name.size() && spec.compare(0, name.size() + 1, name + "=") == 0)
        path = spec.substr(name.size() + 1);
    it->second = compiler::conform_input(std::move(it->second), type, path);
  }
}

namespace {
CLI::Validator number_check(const char* name, const char* rule, bool (*ok)(double)) {
  return CLI::Validator(
      [rule, ok](std::string& text) -> std::string {
        double value = 0;
        size_t used = 0;
        try {
          value = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || !ok(value)) return std::string("must be ") + rule + ", got " + text;
        return {};
      },
      name);
}
}  // namespace

CLI::Validator at_least_one() {
  return number_check("INT>=1", ">= 1", [](double v) { return v >= 1; });
}
CLI::Validator positive() {
  return number_check("NUMBER>0", "> 0", [](double v) { return v > 0 && std::isfinite(v); });
}
CLI::Validator non_negative() {
  return number_check("NUMBER>=0", ">= 0", [](double v) { return v >= 0 && std::isfinite(v); });
}

void add_step_scalar_flags(CLI::App& command, compiler::StepScalarFlags& flags,
                           const std::string& prefix) {
  command
      .add_option("--lr-schedule", flags.lr_schedule,
                  prefix + "learning-rate schedule: none; cosine or linear decay after a linear "
                           "warmup; constant (warmup only)")
      ->check(CLI::IsMember({"none", "cosine", "linear", "constant"}))
      ->capture_default_str();
  command.add_option("--warmup-steps", flags.warmup_steps,
                     prefix + "steps of linear warmup (the factor is step / warmup)")
      ->check(CLI::NonNegativeNumber);
  command.add_option("--total-steps", flags.total_steps,
                     prefix + "the step at which the decay reaches --min-lr-scale (kiln train: "
                              "the last step of the last epoch by default)")
      ->check(at_least_one());
  command.add_option("--min-lr-scale", flags.min_lr_scale,
                     prefix + "the factor of --lr the decay ends at, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0));
  command.add_option("--clip-grad-norm", flags.clip_grad_norm,
                     prefix + "scale the gradients down so that their global L2 norm is at most "
                              "this (torch.nn.utils.clip_grad_norm_)")
      ->check(positive());
  command
      .add_option("--loss-scale", flags.loss_scale,
                  prefix + "dynamic loss scaling (torch.amp.GradScaler): the backward pass "
                           "starts from the scale, a step with an inf or NaN gradient is skipped "
                           "and halves it; auto: dynamic with --precision=f16")
      ->check(CLI::IsMember({"auto", "dynamic", "none"}))
      ->capture_default_str();
  command.add_option("--loss-scale-init", flags.loss_scale_init,
                     prefix + "the loss scale of the first step")
      ->check(positive())
      ->capture_default_str();
  command.add_option("--loss-scale-growth-interval", flags.loss_scale_growth_interval,
                     prefix + "steps with finite gradients in a row after which the scale doubles")
      ->check(at_least_one())
      ->capture_default_str();
  command.add_option("--prune", flags.prune,
                     prefix + "gradual magnitude pruning to this sparsity (0.8: 80 % of every "
                              "weight of rank >= 2 is 0 at --prune-end), kept 0 to the end")
      ->check(CLI::Range(0.0, 0.999));
  command.add_option("--prune-start", flags.prune_start,
                     prefix + "the step the cubic sparsity schedule starts at")
      ->check(at_least_one())
      ->capture_default_str();
  command.add_option("--prune-end", flags.prune_end,
                     prefix + "the step it reaches --prune at (kiln train: 3/4 of the run)")
      ->check(at_least_one());
  command.add_option("--prune-frequency", flags.prune_frequency,
                     prefix + "steps between two moves of the masks")
      ->check(at_least_one())
      ->capture_default_str();
  command
      .add_option("--prune-pattern", flags.prune_pattern,
                  prefix + "unstructured, or 2:4 (2 of every 4 weights along a row: the sparse "
                           "tensor cores' pattern, 50 %)")
      ->check(CLI::IsMember({"unstructured", "2:4"}))
      ->capture_default_str();
}

void CacheFlags::add_to(CLI::App& command) {
  command.add_flag("--no-cache", no_cache, "compile from scratch; neither read nor write the kernel cache");
  command.add_flag("-v,--verbose", verbose, "say why kernel cache lookups missed");
}

void LibraryFlag::add_to(CLI::App& command) {
  command.add_option("--library", text,
                     "vendor libraries the CUDA backend may use for fused conv/dense/matmul "
                     "kernels: auto, none, or a list of cublas,cudnn (the host backend always "
                     "runs the generated kernels)")
      ->capture_default_str();
}

void PrecisionFlag::add_to(CLI::App& command) {
  command.add_option("--precision", text,
                     "arithmetic of conv2d, dense and matmul: f32 (exact, CUDA cores), or on "
                     "tensor cores with f32 sums, operands rounded to tf32 (10 mantissa bits), "
                     "bf16 (7) or f16 (10, range +-65504); bf16 and f16 also autocast: those ops' "
                     "results stay 16-bit until a norm, softmax, loss or reduction widens them "
                     "(the autocast pass); docs/tensor-cores.md")
      ->check(CLI::IsMember({"f32", "tf32", "bf16", "f16"}))
      ->capture_default_str();
}

void WeightsDtypeFlag::add_to(CLI::App& command, const std::string& what) {
  command.add_option("--weights-dtype", text,
                     "store f32 weights as f32, or rounded to bf16 or f16 (half the bytes; they "
                     "widen back to f32 when read) " + what)
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
}

ir::DType WeightsDtypeFlag::value() const {
  return ir::parse_weights_dtype(text).value_or(ir::DType::F32);
}

codegen::Precision PrecisionFlag::value() const {
  return codegen::parse_precision(text).value_or(codegen::Precision::F32);
}

codegen::LibrarySelection LibraryFlag::selection() const {
  return codegen::parse_library_flag(text);
}

std::unique_ptr<runtime::KernelCache> CacheFlags::open() const {
  if (no_cache) return nullptr;
  runtime::KernelCache::max_bytes_from_environment();  // a bad limit fails now, not after a build
  return std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
}

runtime::CudaBinary CacheFlags::compile(const std::string& source, const std::string& program_name,
                                        const std::vector<std::string>& archs) const {
  std::unique_ptr<runtime::KernelCache> cache = open();
  runtime::NvrtcOptions nvrtc;
  nvrtc.archs = archs;
  nvrtc.cache = cache.get();
  nvrtc.verbose = verbose;
  return runtime::compile_with_nvrtc(source, program_name, nvrtc);
}

void add_arch_option(CLI::App& command, std::vector<std::string>& archs) {
  command.add_option("--arch", archs, "GPU architectures (sm_80, sm_90), comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"sm_80", "sm_86", "sm_89", "sm_90"}))
      ->capture_default_str();
}

}  // namespace kiln::cli

namespace kiln::cli {

void InputShapeFlag::add_to(CLI::App& command) {
  command.add_option("--input-shape", specs,
                     "ONNX and Keras models: the shape of an input whose dims the model leaves "
                     "symbolic, as NAME=2x3x224x224 (Keras: NHWC) (repeatable)");
  command.add_option("--dim", dim_specs,
                     "ONNX and Keras models: keep the symbolic dim NAME (an ONNX input's "
                     "dim_param, e.g. batch; for Keras, batch: the None first dim) dynamic up to "
                     "MAX, as NAME=MAX: one compile then runs every size from 1 to MAX (repeatable)");
}

compiler::ImportOptions InputShapeFlag::options(const std::string& model) const {
  compiler::ImportOptions options;
  for (const std::string& spec : specs) {
    const std::string flag = "--input-shape " + spec;
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == spec.size())
      throw Error(flag, "expected NAME=DIMS, e.g. image=1x3x224x224");
    ir::Shape shape;
    std::string rest = spec.substr(equals + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      const size_t end = std::min(rest.find('x', start), rest.size());
      const std::string dim = rest.substr(start, end - start);
      int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
      if (dim.empty() || ec != std::errc() || ptr != dim.data() + dim.size() || value < 1)
        throw Error(flag, "dimension '" + dim + "' is not a positive integer");
      shape.push_back(value);
      start = end + 1;
    }
    if (!options.input_shapes.emplace(spec.substr(0, equals), shape).second)
      throw Error(flag, "input '" + spec.substr(0, equals) + "' is given twice");
  }
  for (const std::string& spec : dim_specs) {
    const std::string flag = "--dim " + spec;
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0)
      throw Error(flag, "expected NAME=MAX, e.g. batch=64");
    const std::string bound = spec.substr(equals + 1);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(bound.data(), bound.data() + bound.size(), value);
    if (bound.empty() || ec != std::errc() || ptr != bound.data() + bound.size() || value < 1)
      throw Error(flag, "the bound '" + bound + "' is not a positive integer");
    if (!options.dim_bounds.emplace(spec.substr(0, equals), value).second)
      throw Error(flag, "dim '" + spec.substr(0, equals) + "' is given twice");
  }
  if (!dim_specs.empty() && model != "-" && !compiler::is_imported_model(model))
    throw Error("--dim", model + " is not an ONNX or Keras model; a kiln JSON model declares its "
                                 "dynamic dims in \"dims\"");
  if (!specs.empty() && model != "-" && !compiler::is_imported_model(model))
    throw Error("--input-shape", model + " is not an ONNX or Keras model; its input shapes are fixed");
  return options;
}

}  // namespace kiln::cli
