// `kiln inspect` as text and JSON. Both read the same figures (KernelFigures, Totals,
// MemoryFigures below), so the two formats cannot disagree; text rounds them into
// human units, JSON keeps exact integers.
#include "compiler/inspect_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "codegen/cost_model.h"
#include "compiler/kernel_report.h"
#include "runtime/package/package.h"

namespace kiln::compiler {

namespace {

const codegen::Roofline& kRoofline = codegen::kH100;

// Per kernel, what both formats print.
struct KernelFigures {
  const codegen::Kernel& kernel;
  std::vector<std::pair<std::string, std::string>> nodes;  // source node name, op
  std::vector<std::optional<KernelArchFigures>> archs;     // parallel to Inspection::archs
  int64_t bytes = 0;
  double intensity = 0;  // FLOP per byte
  double seconds = 0;    // modeled (codegen::model_kernel_time)
  std::string_view bound;
  double efficiency = 1;  // of the unit's peak, when compute bound
  double bandwidth_share = 1;  // of the DRAM bandwidth, when memory bound
  std::string_view unit;
  // The 2:4-sparse weights it multiplies by (a conv2d or dense reading them), and its time
  // modeled on sparse tensor cores (mma.sp: twice the dense math rate, its bytes as they are),
  // nullopt when its unit has no sparse form (f32 FMA).
  std::vector<std::string> two_four_weights;
  std::optional<double> sparse_seconds;
  // At most this much more: cuDNN's NCHW <-> NHWC transforms around a tensor-core convolution.
  double layout_transform_seconds = 0;
};

struct Totals {
  size_t kernels = 0;
  size_t kernels_before_fusion = 0;  // the source nodes of all kernels
  int64_t flops = 0;
  int64_t bytes = 0;
  int64_t bytes_before_fusion = 0;
  double seconds = 0;
  int two_four_kernels = 0;
  double sparse_seconds = 0;  // the sum with 2:4 kernels on sparse tensor cores where they can be
  double layout_transform_seconds = 0;  // at most this much more: cuDNN's NCHW <-> NHWC transforms
  // How the host backend runs them (codegen::HostExecution).
  int host_loop_nests = 0, host_plain_loops = 0, host_fibers = 0;
};

// The plan's figures, or, when plan-memory did not run, what the program does without one:
// every intermediate in a buffer of its own (planned == naive).
struct MemoryFigures {
  bool planned = false;
  int64_t naive = 0;
  int64_t arena = 0;
  int64_t lower_bound = 0;
  double ratio_to_lower_bound = 1;
  double naive_over_planned = 1;
};

// The parameters of `kernel` that are 2:4 weights of a convolution or dense layer: only there is
// the weight's row the GEMM's reduction (K), the dimension sparse tensor cores take 2 of 4 along.
std::vector<std::string> two_four_weights(const Inspection& in, const codegen::Kernel& kernel) {
  std::vector<std::string> names;
  if (kernel.gemm.sparse) {  // compressed already (sparsify-two-four): its kept values and positions
    for (int id : kernel.args) {
      const codegen::Buffer& buffer = in.program.buffers[static_cast<size_t>(id)];
      if (buffer.role == codegen::BufferRole::Parameter && buffer.type.rank() == 2) names.push_back(buffer.name);
    }
    return names;
  }
  const bool gemm = kernel.library || kernel.gemm.m > 0;
  const bool forward = std::any_of(kernel.source_ops.begin(), kernel.source_ops.end(), [](const std::string& op) {
    return op == "conv2d" || op == "dense";
  });
  if (!gemm || !forward || in.weights.empty()) return names;
  for (int id : kernel.args) {
    const codegen::Buffer& buffer = in.program.buffers[static_cast<size_t>(id)];
    if (buffer.role != codegen::BufferRole::Parameter) continue;
    auto it = in.weights.find(buffer.name);
    if (it != in.weights.end() && follows_two_four(*it->second)) names.push_back(buffer.name);
  }
  return names;
}

std::vector<KernelFigures> kernel_figures(const Inspection& in) {
  std::vector<KernelFigures> figures;
  for (const codegen::Kernel& kernel : in.program.kernels) {
    KernelFigures f{kernel, {}, {}, 0, 0, 0, {}, 1, 1, {}, {}, {}};
    for (size_t i = 0; i < kernel.source_nodes.size(); ++i)
      f.nodes.emplace_back(kernel.source_nodes[i],
                           i < kernel.source_ops.size() ? kernel.source_ops[i] : "?");
    for (const std::string& arch : in.archs) f.archs.push_back(kernel_arch_figures(kernel, in.binary, arch));
    f.bytes = kernel.bytes_read + kernel.bytes_written;
    f.intensity = f.bytes ? static_cast<double>(kernel.flops) / static_cast<double>(f.bytes) : 0.0;
    const KernelModel model = model_kernel(in, kernel);
    f.seconds = model.time.seconds;
    f.bound = model.time.bound;
    f.efficiency = model.time.efficiency;
    f.bandwidth_share = model.time.bandwidth_share;
    f.unit = model.time.unit;
    f.two_four_weights = model.two_four_weights;
    f.sparse_seconds = model.sparse_seconds;
    f.layout_transform_seconds = model.time.layout_transform_seconds;
    figures.push_back(std::move(f));
  }
  return figures;
}

Totals totals_of(const std::vector<KernelFigures>& kernels) {
  Totals t;
  t.kernels = kernels.size();
  for (const KernelFigures& f : kernels) {
    t.kernels_before_fusion += f.kernel.source_nodes.size();
    t.flops += f.kernel.flops;
    t.bytes += f.bytes;
    t.bytes_before_fusion += f.kernel.unfused_bytes;
    t.seconds += f.seconds;
    t.two_four_kernels += !f.two_four_weights.empty();
    t.sparse_seconds += f.sparse_seconds.value_or(f.seconds);
    t.layout_transform_seconds += f.layout_transform_seconds;
    switch (codegen::host_execution(f.kernel)) {
      case codegen::HostExecution::LoopNest: ++t.host_loop_nests; break;
      case codegen::HostExecution::PlainLoop: ++t.host_plain_loops; break;
      case codegen::HostExecution::Fibers: ++t.host_fibers; break;
    }
  }
  return t;
}

double ratio(int64_t a, int64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 1.0; }

MemoryFigures memory_figures(const codegen::Program& program) {
  MemoryFigures m;
  m.planned = program.planned;
  m.naive = program.naive_bytes;
  m.arena = program.planned ? program.arena_bytes : program.naive_bytes;
  m.lower_bound = program.lower_bound_bytes;
  m.ratio_to_lower_bound = ratio(m.arena, m.lower_bound);
  m.naive_over_planned = ratio(m.naive, m.arena);
  return m;
}

// ---- text ------------------------------------------------------------------------------------

// Decimal units throughout (1 KB = 1000 B), like the bandwidth they are divided by.
std::string scaled(int64_t value, std::string_view unit) {
  static constexpr const char* kPrefixes[] = {"K", "M", "G", "T", "P"};
  if (value < 1000) return unit.empty() ? std::to_string(value) : fmt::format("{} {}", value, unit);
  double v = static_cast<double>(value);
  int prefix = -1;
  while (v >= 1000 && prefix < 4) {
    v /= 1000;
    ++prefix;
  }
  return fmt::format("{:.1f} {}{}", v, kPrefixes[prefix], unit);
}
std::string bytes_text(int64_t bytes) { return scaled(bytes, "B"); }
std::string flops_text(int64_t flops) { return scaled(flops, ""); }
// Kernels of small graphs take nanoseconds on the roofline (or less), whole graphs microseconds
// or more: three significant digits in the unit that fits.
std::string time_text(double seconds) {
  const char* unit = "ns";
  double value = seconds * 1e9;
  if (seconds >= 1e-3) {
    unit = "ms";
    value = seconds * 1e3;
  } else if (seconds >= 1e-6) {
    unit = "µs";
    value = seconds * 1e6;
  }
  const int decimals = value >= 100 ? 0 : value >= 10 ? 1 : value >= 1 ? 2 : 3;
  return fmt::format("{:.{}f} {}", value, decimals, unit);
}

// "conv1 (conv2d), conv1_bias (bias_add)", wrapped at kWidth; past kMaxNodes the rest is
// counted, not listed (--format=json lists every one).
std::string nodes_text(const KernelFigures& f, const std::string& indent) {
  constexpr size_t kWidth = 100;
  constexpr size_t kMaxNodes = 24;
  std::string out = indent + "nodes: ";
  size_t line_start = 0;
  for (size_t i = 0; i < f.nodes.size() && i < kMaxNodes; ++i) {
    std::string item = fmt::format("{} ({})", f.nodes[i].first, f.nodes[i].second);
    if (i + 1 < f.nodes.size()) item += ",";
    if (i > 0 && out.size() - line_start + item.size() + 1 > kWidth) {
      line_start = out.size() + 1;
      out += "\n" + indent + "       ";
    } else if (i > 0) {
      out += " ";
    }
    out += item;
  }
  if (f.nodes.size() > kMaxNodes) out += fmt::format(" and {} more", f.nodes.size() - kMaxNodes);
  return out + "\n";
}

std::string implementation_text(const codegen::Kernel& kernel) {
  if (!kernel.library) {
    if (!kernel.tensor_cores) return "generated";
    const std::string_view format = codegen::precision_name(kernel.tensor_core_inputs);
    return fmt::format("generated, {}tensor cores ({})", kernel.gemm.sparse ? "sparse " : "",
                       format == "tf32" ? "TF32" : format);
  }
  return fmt::format("{}: {}", kernel.library->routine, kernel.library->descriptor);
}

std::string kernel_table(const Inspection& in, const std::vector<KernelFigures>& kernels) {
  size_t name_width = 20;
  for (const KernelFigures& f : kernels) name_width = std::max(name_width, f.kernel.name.size());
  std::string out = fmt::format("{:<{}} {:<13} {:<13} {:>9} {:>9} {:>9} {:>7}", "kernel", name_width,
                                "grid", "block", "FLOPs", "read", "written", "FLOP/B");
  for (const std::string& arch : in.archs)
    out += fmt::format(" | {:>5}: {:>4} {:>5} {:>6} {:>4}", arch, "regs", "spill", "smem", "occ");
  out += fmt::format(" | {:>11}  {}\n", "H100 time", "bound");
  for (const KernelFigures& f : kernels) {
    const codegen::Kernel& k = f.kernel;
    out += fmt::format("{:<{}} {:<13} {:<13} {:>9} {:>9} {:>9} {:>7.2f}", k.name, name_width,
                       dim3_text(k.grid), dim3_text(k.block), flops_text(k.flops),
                       bytes_text(k.bytes_read), bytes_text(k.bytes_written), f.intensity);
    for (size_t a = 0; a < in.archs.size(); ++a) {
      const std::optional<KernelArchFigures>& r = f.archs[a];
      if (!r) {
        out += fmt::format(" | {:>5}: {:>4} {:>5} {:>6} {:>4}", in.archs[a], "?", "?", "?", "?");
        continue;
      }
      out += fmt::format(" | {:>5}: {:>4} {:>5} {:>6} {:>3.0f}%", in.archs[a], r->registers,
                         r->spill_bytes, r->shared_bytes, 100.0 * r->occupancy.fraction());
    }
    out += fmt::format(" | {:>11}  {}\n", time_text(f.seconds), f.bound);
    out += fmt::format("    implementation: {}", implementation_text(k));
    if (k.library || k.gemm.m > 0)
      out += fmt::format(", modeled at {:.0f}% of the {} peak", 100 * f.efficiency, f.unit);
    out += "\n";
    if (!k.library_refusal.empty()) out += fmt::format("    no library call: {}\n", k.library_refusal);
    if (f.layout_transform_seconds > 0)
      out += fmt::format("    NCHW: up to {} more if cuDNN transforms the operands to NHWC and the result "
                         "back for its tensor-core kernel\n",
                         time_text(f.layout_transform_seconds));
    if (!f.two_four_weights.empty())
      out += fmt::format("    2:4 sparse weights: {}; {}\n", fmt::join(f.two_four_weights, ", "),
                         k.gemm.sparse    ? std::string("compressed, on sparse tensor cores (mma.sp m16n8k32)")
                         : f.sparse_seconds ? fmt::format("modeled on sparse tensor cores (mma.sp) at {}; left dense "
                                                          "(--debug-only=sparsify-two-four says why)",
                                                          time_text(*f.sparse_seconds))
                                            : std::string("sparse tensor cores need --precision=tf32, bf16 or f16"));
    if (k.dynamic_symbol >= 0)
      out += fmt::format("    dynamic: the generated kernel computes the real rows only, grid {} shrinking with '{}'{}\n",
                         "xyz"[k.dynamic_grid_axis], in.program.symbols.at(static_cast<size_t>(k.dynamic_symbol)).name,
                         k.library ? " (the library call computes every row)" : "");
    out += nodes_text(f, "    ");
  }
  return out;
}

}  // namespace

Inspection package_inspection(const runtime::Package& package, const runtime::PackageProgram& program) {
  Inspection inspection{program.program, program.binary, package.manifest.archs, package.manifest.pipeline, {}};
  for (const auto& [name, tensor] : package.weights) inspection.weights.emplace(name, &tensor);
  return inspection;
}

KernelModel model_kernel(const Inspection& in, const codegen::Kernel& kernel) {
  // Waves are counted with the occupancy on sm_90 (the H100), else the last arch compiled.
  int blocks_per_sm = 0;
  for (const std::string& arch : in.archs)
    if (const std::optional<KernelArchFigures> f = kernel_arch_figures(kernel, in.binary, arch))
      if (blocks_per_sm == 0 || arch == "sm_90") blocks_per_sm = f->occupancy.active_blocks_per_sm;
  KernelModel model;
  model.time = codegen::model_kernel_time(kernel, blocks_per_sm, kRoofline);
  model.two_four_weights = two_four_weights(in, kernel);
  if (kernel.gemm.sparse)
    model.sparse_seconds = model.time.seconds;  // its time is on sparse tensor cores already
  else if (!model.two_four_weights.empty() && model.time.unit != "f32 FMA")
    model.sparse_seconds = std::max(model.time.compute_seconds / 2, model.time.memory_seconds);
  return model;
}

bool follows_two_four(const ir::Tensor& weights) {
  if (weights.shape().size() < 2 || !ir::is_floating(weights.dtype()) || weights.num_elements() == 0) return false;
  const int64_t row = weights.num_elements() / weights.shape()[0];
  if (row % 4 != 0) return false;
  bool any = false;
  for (int64_t group = 0; group < weights.num_elements(); group += 4) {
    int nonzeros = 0;
    for (int64_t i = group; i < group + 4; ++i) nonzeros += weights.get(i) != 0.0;
    if (nonzeros > 2) return false;
    any = any || nonzeros > 0;
  }
  return any;
}

std::string format_inspection_text(const Inspection& in) {
  const std::vector<KernelFigures> kernels = kernel_figures(in);
  const Totals t = totals_of(kernels);
  const MemoryFigures m = memory_figures(in.program);

  std::string out = fmt::format("graph @{}\n", in.program.graph_name);
  out += fmt::format("pipeline: {}\n", in.passes.empty() ? "none (-O0)" : fmt::format("{}", fmt::join(in.passes, ", ")));
  out += fmt::format("archs: {}\n", fmt::join(in.archs, ", "));
  out += fmt::format("precision: {}\n", codegen::precision_name(in.program.precision));
  out += fmt::format("cost model: {}, {:.2f} TB/s DRAM, {:.1f} TFLOP/s f32{}; every kernel argument "
                     "read or written once; GEMMs at their tiles', waves' and template's efficiency\n\n",
                     kRoofline.device, kRoofline.dram_bytes_per_second / 1e12, kRoofline.flops_per_second / 1e12,
                     in.program.precision == codegen::Precision::F32
                         ? ""
                         : fmt::format(", {:.1f} {} on tensor cores",
                                       kRoofline.tensor_core_flops_per_second(in.program.precision) / 1e12,
                                       in.program.precision == codegen::Precision::Tf32
                                           ? "TF32"
                                           : codegen::precision_name(in.program.precision)));
  out += kernel_table(in, kernels);

  out += "\ntotals\n";
  out += fmt::format("  kernels:           {} after fusion, {} before\n", t.kernels, t.kernels_before_fusion);
  out += fmt::format("  FLOPs:             {}\n", flops_text(t.flops));
  out += fmt::format("  DRAM bytes:        {} after fusion, {} before ({:.2f}x)\n", bytes_text(t.bytes),
                     bytes_text(t.bytes_before_fusion), ratio(t.bytes_before_fusion, t.bytes));
  out += fmt::format("  modeled {} time: {} (sum over kernels; launch gaps not modeled)\n", "H100",
                     time_text(t.seconds));
  if (t.layout_transform_seconds > 0)
    out += fmt::format("  NCHW on cuDNN:     up to {} more if cuDNN transforms the NCHW tensors to NHWC "
                       "and back around its tensor-core convolutions (not modeled above; NHWC tensors "
                       "would need none)\n",
                       time_text(t.layout_transform_seconds));
  if (t.two_four_kernels > 0)
    out += fmt::format("  2:4 sparse:        {} kernels multiply by 2:4 weights; with them on sparse tensor "
                       "cores (mma.sp: emitted for 2:4 convolutions and dense layers in bf16 and f16, modeled for the "
                       "rest): {}\n",
                       t.two_four_kernels, time_text(t.sparse_seconds));
  out += fmt::format("  host backend:      {} loop nests (host bodies), {} plain loops, {} on fibers "
                     "(barriers, warp collectives)\n",
                     t.host_loop_nests, t.host_plain_loops, t.host_fibers);

  out += m.planned ? "\nmemory plan\n"
                   : "\nmemory plan: none (plan-memory did not run): every intermediate has a "
                     "buffer of its own\n";
  out += fmt::format("  naive:             {} (every intermediate in a buffer of its own)\n", bytes_text(m.naive));
  out += fmt::format("  planned:           {} ({})\n", bytes_text(m.arena),
                     m.planned ? "the activation arena" : "no arena: the same as naive");
  out += fmt::format("  lower bound:       {} (the most bytes live at once)\n", bytes_text(m.lower_bound));
  out += fmt::format("  planned / lower bound: {:.2f}\n", m.ratio_to_lower_bound);
  out += fmt::format("  naive / planned:       {:.2f}\n", m.naive_over_planned);
  return out;
}

std::string format_inspection_json(const Inspection& in) {
  using Json = nlohmann::ordered_json;
  const std::vector<KernelFigures> kernels = kernel_figures(in);
  const Totals t = totals_of(kernels);
  const MemoryFigures m = memory_figures(in.program);
  auto dim3 = [](const codegen::Dim3& d) { return Json::array({d.x, d.y, d.z}); };

  Json json;
  json["graph"] = in.program.graph_name;
  json["pipeline"] = in.passes;
  json["archs"] = in.archs;
  json["precision"] = std::string(codegen::precision_name(in.program.precision));
  json["roofline"] = {{"device", kRoofline.device},
                      {"dram_bytes_per_second", kRoofline.dram_bytes_per_second},
                      {"flops_per_second", kRoofline.flops_per_second},
                      {"tf32_flops_per_second", kRoofline.tf32_flops_per_second},
                      {"half_flops_per_second", kRoofline.half_flops_per_second}};
  Json list = Json::array();
  for (const KernelFigures& f : kernels) {
    const codegen::Kernel& k = f.kernel;
    Json kernel;
    kernel["name"] = k.name;
    kernel["function"] = k.function();  // shared by kernels of identical code
    if (k.library) {
      kernel["implementation"] = {{"kind", "library"},
                                  {"library", k.library->library},
                                  {"routine", k.library->routine},
                                  {"descriptor", k.library->descriptor},
                                  {"workspace_bytes", k.library->workspace_bytes}};
    } else {
      kernel["implementation"] = {
          {"kind", "generated"}, {"tensor_cores", k.tensor_cores}, {"gemm", k.gemm.m > 0}};
      if (!k.library_refusal.empty()) kernel["implementation"]["library_refusal"] = k.library_refusal;
    }
    kernel["host_execution"] = std::string(codegen::host_execution_name(codegen::host_execution(k)));
    kernel["op_kind"] = k.op_kind;
    kernel["source_nodes"] = Json::array();
    for (const auto& [name, op] : f.nodes) kernel["source_nodes"].push_back({{"name", name}, {"op", op}});
    kernel["grid"] = dim3(k.grid);
    kernel["block"] = dim3(k.block);
    kernel["dynamic_shared_bytes"] = k.dynamic_shared_bytes;
    kernel["flops"] = k.flops;
    kernel["bytes_read"] = k.bytes_read;
    kernel["bytes_written"] = k.bytes_written;
    kernel["unfused_bytes"] = k.unfused_bytes;
    kernel["arithmetic_intensity"] = f.intensity;
    kernel["modeled_seconds"] = f.seconds;
    kernel["bound"] = f.bound;
    kernel["unit"] = f.unit;
    kernel["efficiency"] = f.efficiency;
    kernel["bandwidth_share"] = f.bandwidth_share;
    kernel["two_four_weights"] = f.two_four_weights;
    kernel["sparse_modeled_seconds"] = f.sparse_seconds ? Json(*f.sparse_seconds) : Json();
    kernel["layout_transform_seconds"] = f.layout_transform_seconds;
    Json resources = Json::object();
    for (size_t a = 0; a < in.archs.size(); ++a) {
      const std::optional<KernelArchFigures>& r = f.archs[a];
      if (!r) {
        resources[in.archs[a]] = nullptr;
        continue;
      }
      resources[in.archs[a]] = {{"registers", r->registers},
                                {"spill_bytes", r->spill_bytes},
                                {"stack_bytes", r->stack_bytes},
                                {"shared_bytes", r->shared_bytes},
                                {"occupancy", r->occupancy.fraction()},
                                {"active_blocks_per_sm", r->occupancy.active_blocks_per_sm},
                                {"limiter", r->occupancy.limiter}};
    }
    kernel["resources"] = std::move(resources);
    list.push_back(std::move(kernel));
  }
  json["kernels"] = std::move(list);
  json["totals"] = {{"kernels", t.kernels},
                    {"kernels_before_fusion", t.kernels_before_fusion},
                    {"flops", t.flops},
                    {"dram_bytes", t.bytes},
                    {"dram_bytes_before_fusion", t.bytes_before_fusion},
                    {"modeled_seconds", t.seconds},
                    {"two_four_kernels", t.two_four_kernels},
                    {"sparse_modeled_seconds", t.sparse_seconds},
                    {"layout_transform_seconds", t.layout_transform_seconds},
                    {"host_loop_nests", t.host_loop_nests},
                    {"host_plain_loops", t.host_plain_loops},
                    {"host_fibers", t.host_fibers}};
  json["memory"] = {{"planned", m.planned},
                    {"naive_bytes", m.naive},
                    {"planned_bytes", m.arena},
                    {"lower_bound_bytes", m.lower_bound},
                    {"ratio_to_lower_bound", m.ratio_to_lower_bound},
                    {"naive_over_planned", m.naive_over_planned}};
  return json.dump(2) + "\n";
}

}  // namespace kiln::compiler
