// Graph → one CUDA translation unit. Each node becomes one kernel (fusion comes later);
// the op's emitter writes the body, this file writes everything around it.
#include "codegen/emit.h"

#include <fmt/format.h>

#include <cctype>
#include <unordered_map>

#include "codegen/cost_model.h"
#include "codegen/device_library.h"
#include "codegen/dynamic_rows.h"
#include "codegen/library_dispatch.h"
#include "codegen/kernel_emitter.h"
#include "ir/diagnostic.h"
#include "ir/kernel_region.h"
#include "ir/memory_plan.h"
#include "ir/op_registry.h"

namespace kiln::codegen {

namespace {

// C parameter names for a node's operands: the registry's input names, numbered when an op is
// variadic or a name repeats.
std::vector<std::string> operand_params(const ir::Node& node) {
  if (node.is_kernel()) return fused_kernel_params(node);
  std::vector<std::string> params;
  for (size_t i = 0; i < node.inputs.size(); ++i) params.push_back(operand_name(node, i));
  return params;
}

std::vector<std::string> result_params(const ir::Node& node) {
  if (node.results.size() == 1) return {"out"};
  std::vector<std::string> params;
  for (size_t i = 0; i < node.results.size(); ++i) params.push_back("out" + std::to_string(i));
  return params;
}

std::string describe_operands(const ir::Node& node, const std::vector<std::string>& in,
                              const std::vector<std::string>& out) {
  std::string text;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    text += (i ? ", " : "") + in[i] + " " + node.inputs[i]->type.to_string();
  text += " -> ";
  for (size_t i = 0; i < node.results.size(); ++i)
    text += (i ? ", " : "") + out[i] + " " + node.results[i]->type.to_string();
  return text;
}

// "// fuses: conv2d 'conv1' f32[1,32,26,26], bias_add ..." — one line per source node.
std::string fused_nodes_comment(const ir::Node& kernel) {
  std::string text = fmt::format("// fuses {} node(s), in order:\n", kernel.body->nodes().size());
  for (const auto& inner : kernel.body->nodes())
    text += fmt::format("//   {} -> {}\n", inner->describe(), inner->results[0]->type.to_string());
  return text;
}

// What makes two kernel functions the same code: their text without comments, with each name
// taken from the graph (`graph_names`: the parameters, and a fused kernel's v_/f_ names of its
// body's values), or derived from one by a suffix (`in_x_index`), spelled by its position in
// `graph_names` instead. A fused kernel names these and its comments after the nodes it
// computes, so the kernels of a model's repeated layers differ in nothing else. The renaming is
// one to one within a kernel (the longest matching name wins, and positions are spelled with a
// byte C++ never contains), so equal keys mean the same program up to those names.
std::string code_key(std::string_view text, const std::vector<std::string>& graph_names) {
  const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string key;
  key.reserve(text.size());
  char quote = 0;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (quote != 0) {  // inside a string or character literal: copied as it is
      key += c;
      if (c == '\\' && i + 1 < text.size()) key += text[++i];
      else if (c == quote) quote = 0;
      ++i;
    } else if (c == '"' || c == '\'') {
      quote = c;
      key += text[i++];
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (is_word(c) && !std::isdigit(static_cast<unsigned char>(c)) &&
               (i == 0 || !is_word(text[i - 1]))) {
      size_t end = i;
      while (end < text.size() && is_word(text[end])) ++end;
      const std::string_view word = text.substr(i, end - i);
      size_t best = graph_names.size();
      for (size_t p = 0; p < graph_names.size(); ++p) {
        const std::string& name = graph_names[p];
        const bool derived = word == name || (word.starts_with(name) && word[name.size()] == '_');
        if (derived && (best == graph_names.size() || name.size() > graph_names[best].size()))
          best = p;
      }
      if (best == graph_names.size()) key += word;
      else key += fmt::format("\x01{}\x01{}", best, word.substr(graph_names[best].size()));
      i = end;
    } else {
      key += text[i++];
    }
  }
  return key;
}

class ProgramBuilder {
 public:
  ProgramBuilder(const ir::Graph& graph, const LibrarySelection& libraries, Precision precision)
      : graph_(graph), libraries_(libraries), precision_(precision) {}

  Program build() {
    program_.graph_name = graph_.name;
    program_.symbols = graph_.symbols;
    const std::vector<ir::DimMap> output_dims = ir::output_dynamic_dims(graph_);
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      add_buffer(graph_.inputs[i], BufferRole::Input, static_cast<int>(i));
      program_.input_dims.push_back(graph_.inputs[i]->dynamic_dims);
    }
    for (size_t i = 0; i < graph_.parameters.size(); ++i)
      add_buffer(graph_.parameters[i], BufferRole::Parameter, static_cast<int>(i));
    for (const auto& node : graph_.nodes())
      for (const ir::Value* result : node->results) {
        // State written in place (ir/state_in_place.cpp): next.P is P's buffer.
        if (const ir::Value* param = state_in_place(result)) {
          buffer_of_[result] = buffer_of_.at(param);
          continue;
        }
        add_buffer(result, BufferRole::Intermediate, -1);
      }
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      const int id = buffer_of_.at(graph_.outputs[i]);
      Buffer& buffer = program_.buffers[id];
      if (buffer.role == BufferRole::Intermediate) {
        buffer.role = BufferRole::Output;
        buffer.index = static_cast<int>(i);
      }
      const std::string& name = graph_.output_name(i);
      if (const ir::Value* param = ir::state_parameter(graph_, i)) {
        // In place, output and parameter are one buffer, and there is nothing to copy.
        program_.state_updates.push_back({id, buffer_of_.at(param)});
        continue;
      }
      if (!program_.state_updates.empty())
        throw Error("", fmt::format("graph @{}: output {} comes after the state outputs next.*; "
                                    "state outputs must be the last outputs",
                                    graph_.name, name));
      program_.outputs.push_back(id);
      program_.output_names.push_back(name);
      program_.output_dims.push_back(output_dims[i]);
    }

    if (graph_.memory_plan) {
      place_in_arena(*graph_.memory_plan);
    } else {
      ir::MemoryPlan figures;
      ir::compute_plan_figures(graph_, figures);
      program_.naive_bytes = figures.naive_bytes;
      program_.lower_bound_bytes = figures.lower_bound_bytes;
    }

    // Which kernels compute only the real rows of a run (codegen/dynamic_rows.h): a probe asks
    // each candidate's emitter; one that throws is left to the real emission to report.
    dynamic_rows_ = choose_dynamic_rows(graph_, [&](const ir::Node& node, const DynamicRows& rows) {
      const KernelEmitter* emitter = find_kernel_emitter(node.op);
      if (emitter == nullptr) return false;
      try {
        KernelRequest probe{node, "probe", operand_params(node), result_params(node), {}, rows, precision_, {}, {}};
        return (*emitter)(probe).dynamic_grid_axis >= 0;
      } catch (const std::exception&) {
        return false;
      }
    });

    std::string kernels_text;
    std::string entries_text;
    for (const auto& node : graph_.nodes()) emit_node(*node, kernels_text, entries_text);

    program_.source = prologue() + std::string(device_library()) + "\n" +
                      scalar_math_library() + "\n" + kernels_text +
                      "#ifndef __CUDACC__\n"
                      "// Host entry points: the host backend calls every kernel through one "
                      "signature,\n// and runs the threads of a block of a kernel without "
                      "barriers in one call.\n" +
                      entries_text + "#endif  // __CUDACC__\n";
    return std::move(program_);
  }

 private:
  void add_buffer(const ir::Value* value, BufferRole role, int index) {
    const int64_t bytes = ir::num_elements(value->type.shape) *
                          static_cast<int64_t>(ir::dtype_size(value->type.dtype));
    buffer_of_[value] = static_cast<int>(program_.buffers.size());
    program_.buffers.push_back(Buffer{value->name, value->type, role, index, bytes});
  }

  // Intermediates that plan-memory placed share the activation arena at their planned offsets.
  void place_in_arena(const ir::MemoryPlan& plan) {
    program_.arena_bytes = plan.arena_bytes;
    program_.planned = true;
    program_.naive_bytes = plan.naive_bytes;
    program_.lower_bound_bytes = plan.lower_bound_bytes;
    for (const auto& [value, id] : buffer_of_) {
      Buffer& buffer = program_.buffers[id];
      if (buffer.role != BufferRole::Intermediate) continue;
      if (const ir::MemorySlice* slice = plan.find(value)) buffer.arena_offset = slice->offset;
    }
  }

  // The parameter whose storage `value` (a state output next.P) is written into, or nullptr.
  const ir::Value* state_in_place(const ir::Value* value) const {
    if (!graph_.memory_plan) return nullptr;
    const auto it = graph_.memory_plan->state_in_place.find(value);
    return it == graph_.memory_plan->state_in_place.end() ? nullptr : it->second;
  }

  // Whether `value` shares its storage with another operand or result of `node` (an
  // elementwise node working in place): then neither pointer may be declared __restrict__.
  bool aliased(const ir::Node& node, const ir::Value* value) const {
    if (!graph_.memory_plan) return false;
    for (const auto* pairs : {&graph_.memory_plan->in_place, &graph_.memory_plan->state_in_place}) {
      for (const ir::Value* result : node.results) {
        auto it = pairs->find(result);
        if (it == pairs->end()) continue;
        if (value == result || value == it->second) return true;
      }
    }
    return false;
  }

  std::string prologue() const {
    return fmt::format(
        "// Generated by kiln from graph @{}: {} kernel(s). Regenerate with\n"
        "//   kiln emit MODEL --emit=cuda\n"
        "// The same text compiles with NVRTC for the GPU and with the host C++ compiler, which\n"
        "// sees the CUDA built-ins through kiln's host prelude.\n"
        "#ifndef __CUDACC__\n"
        "#include \"kiln_host_prelude.h\"\n"
        "#endif\n"
        "#ifdef __CUDACC__\n"
        "#define INFINITY __int_as_float(0x7f800000)\n"
        "// All shared memory is dynamic: each kernel carves this arena at fixed offsets.\n"
        "extern __shared__ __align__(16) unsigned char kiln_smem[];\n"
        "#endif\n\n",
        graph_.name, graph_.nodes().size());
  }

  // Which dtypes each op has kernels for. f32, f16, bf16, i32, i64 and bool: every op. The
  // other integer widths and f64: data movement, arg reductions, and the element-wise ops whose
  // functions are written for every width (arithmetic, saturating on integers; comparisons,
  // select, casts, bit shifts). f64 also: the activation and math rows, sums, means, maxima and
  // GEMMs, all in double. The rest (softmax, norms, pooling, losses, training ops) computes in
  // float: refused, as an f64 result would silently lose precision, and so are reductions and
  // GEMMs on the narrow integers. A fused kernel's body is checked node by node. Returns why
  // not, or "" when the kernel exists.
  static std::string refusal(const ir::Node& node, ir::DType dtype) {
    using ir::DType;
    using ir::OpId;
    switch (dtype) {
      case DType::F32: case DType::F16: case DType::BF16: case DType::I32: case DType::I64:
      case DType::Bool:
        return "";
      default: break;
    }
    switch (node.op) {
      case OpId::Reshape: case OpId::Flatten: case OpId::Transpose: case OpId::Concat:
      case OpId::Slice: case OpId::BroadcastTo: case OpId::Gather: case OpId::GatherElements:
      case OpId::Argmax:
      case OpId::Argmin:
      case OpId::Equal: case OpId::Less: case OpId::LessEqual: case OpId::Greater:
      case OpId::GreaterEqual: case OpId::Where: case OpId::Cast:
      // Its u16 positions, read as bits.
      case OpId::ExpandTwoFour:
        return "";
      case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Maximum:
      case OpId::Minimum: case OpId::Neg: case OpId::Abs: case OpId::Clip: case OpId::Mod:
        return "";
      case OpId::BitShift:
        if (ir::is_integer(dtype)) return "";
        break;
      // In double for f64: sums, means and maxima, GEMMs (matmul, dense, conv2d).
      case OpId::ReduceSum: case OpId::ReduceMean: case OpId::ReduceMax: case OpId::PairwiseSum:
      case OpId::Matmul:
      case OpId::Dense: case OpId::Conv2d: case OpId::GatherElementsGrad:
        if (dtype == DType::F64) return "";
        break;
      default:
        // The activation and math rows are templates on T: instantiated with T = double.
        if (dtype == DType::F64 && !node.def->forward_expr.empty()) return "";
        break;
    }
    return fmt::format("codegen has no {} kernel for {} yet", ir::dtype_name(dtype),
                       ir::to_string(node.op));
  }

  static void check_dtypes(const ir::Node& node, const ir::Node& site) {
    if (site.body) {
      for (const auto& inner : site.body->nodes()) check_dtypes(node, *inner);
      return;
    }
    for (const auto* values : {&site.inputs, &site.results})
      for (const ir::Value* value : *values)
        if (const std::string why = refusal(site, value->type.dtype); !why.empty())
          throw Error(node.loc.render(),
                      fmt::format("{}: {} (%{} is {}); graphs with {} run on --backend=reference",
                                  node.describe(), why, value->name, value->type.to_string(),
                                  ir::dtype_name(value->type.dtype)));
  }

  void emit_node(const ir::Node& node, std::string& kernels_text, std::string& entries_text) {
    check_dtypes(node, node);
    const KernelEmitter* emitter = find_kernel_emitter(node.op);
    if (emitter == nullptr)
      throw Error(node.loc.render(), node.describe() + ": codegen has no CUDA kernel for op '" +
                                         ir::to_string(node.op) + "' yet");
    // Kernels are named after what they compute plus their position, which is also the
    // position of their node in the graph (the IR printer shows fused kernels the same way).
    KernelRequest request{node,
                          fmt::format("{}_{}", node.is_kernel() ? node.name : ir::to_string(node.op),
                                      kernel_index_++),
                          operand_params(node), result_params(node), {}, {}, precision_, {}, {}};
    if (const auto rows = dynamic_rows_.find(&node); rows != dynamic_rows_.end()) request.dynamic_rows = rows->second;
    const KernelSpec spec = (*emitter)(request);
    KILN_CHECK(spec.grid.count() > 0 && spec.block.count() > 0 && spec.block.count() <= 1024)
        << request.kernel_name << ": bad launch configuration";
    KILN_CHECK(!request.dynamic_rows || (spec.dynamic_grid_axis >= 0 && spec.dynamic_grid_axis <= 2))
        << request.kernel_name << ": the emitter honoured real rows in its probe, not now";

    Kernel kernel;
    kernel.name = request.kernel_name;
    if (node.is_kernel()) {
      // Unnamed nodes (textual IR without loc) go by their first result.
      for (const auto& inner : node.body->nodes()) {
        kernel.source_nodes.push_back(inner->name.empty() ? "%" + inner->results[0]->name
                                                          : inner->name);
        kernel.source_ops.push_back(ir::to_string(inner->op));
      }
      kernel.op_kind = ir::kernel_kind(node);
    } else {
      kernel.source_nodes = {node.name};
      kernel.source_ops = {ir::to_string(node.op)};
      kernel.op_kind = std::string(ir::op_kind_name(node.def->kind));
    }
    kernel.grid = spec.grid;
    kernel.block = spec.block;
    kernel.dynamic_shared_bytes = spec.shared_bytes;
    kernel.uses_barriers = spec.uses_barriers;
    kernel.host_variant = spec.host_variant;
    kernel.tensor_cores = spec.tensor_cores;
    kernel.tensor_core_inputs = spec.tensor_core_inputs;
    kernel.gemm = spec.gemm;
    for (const ir::Value* input : node.inputs) kernel.args.push_back(buffer_of_.at(input));
    for (const ir::Value* result : node.results) kernel.args.push_back(buffer_of_.at(result));
    kernel.num_outputs = static_cast<int>(node.results.size());
    if (request.dynamic_rows) {
      kernel.dynamic_symbol = request.dynamic_rows->symbol;
      kernel.dynamic_grid_axis = spec.dynamic_grid_axis;
    }
    std::string why_not;
    kernel.library = select_library_call(node, libraries_, precision_, &why_not);
    const bool gemm = kernel.gemm.m > 0 || node.op == ir::OpId::Conv2dGradInput ||
                      node.op == ir::OpId::Conv2dGradWeight;
    if (!kernel.library && gemm && (libraries_.cublaslt || libraries_.cudnn))
      kernel.library_refusal = why_not;
    if (node.op == ir::OpId::AllReduce)
      kernel.collective = Collective{Collective::Mean,
                                     static_cast<int>(std::get<int64_t>(node.attrs.at("bucket")))};
    if (node.op == ir::OpId::Broadcast)
      kernel.collective = Collective{Collective::Broadcast,
                                     static_cast<int>(std::get<int64_t>(node.attrs.at("root")))};
    const NodeCost cost = node_cost(node);
    kernel.flops = cost.flops;
    kernel.bytes_read = cost.bytes_read;
    kernel.bytes_written = cost.bytes_written;
    kernel.unfused_bytes = unfused_bytes(node);

    // Signature: const pointers for operands, then the results.
    std::vector<std::string> params;
    std::vector<std::string> casts;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string type(c_type(node.inputs[i]->type.dtype));
      params.push_back(fmt::format("const {}* {}{}", type,
                                   aliased(node, node.inputs[i]) ? "" : "__restrict__ ",
                                   request.input_params[i]));
      casts.push_back(fmt::format("static_cast<const {}*>(args[{}])", type, casts.size()));
    }
    for (size_t i = 0; i < node.results.size(); ++i) {
      const std::string type(c_type(node.results[i]->type.dtype));
      params.push_back(fmt::format("{}* {}{}", type,
                                   aliased(node, node.results[i]) ? "" : "__restrict__ ",
                                   request.output_params[i]));
      casts.push_back(fmt::format("static_cast<{}*>(args[{}])", type, casts.size()));
    }
    if (request.dynamic_rows) {
      params.push_back("const int kiln_dim_size");
      casts.push_back(fmt::format("*static_cast<const int*>(args[{}])", casts.size()));
    }

    kernels_text += fmt::format("// {}: {}\n", node.describe(),
                                describe_operands(node, request.input_params, request.output_params));
    if (node.is_kernel()) kernels_text += fused_nodes_comment(node);
    if (!spec.note.empty()) kernels_text += "// " + spec.note + "\n";
    kernels_text += fmt::format(
        "// launch: grid ({},{},{}), block ({},{},{}), {} bytes of shared memory{}\n",
        spec.grid.x, spec.grid.y, spec.grid.z, spec.block.x, spec.block.y, spec.block.z,
        spec.shared_bytes, spec.uses_barriers ? ", threads cooperate" : "");
    if (request.dynamic_rows)
      kernels_text += fmt::format(
          "// real rows only: kiln_dim_size is this run's '{}' (<= {}); grid {} shrinks with it\n",
          graph_.symbols[static_cast<size_t>(request.dynamic_rows->symbol)].name, request.dynamic_rows->bound,
          "xyz"[spec.dynamic_grid_axis]);
    const std::string bounds = spec.min_blocks_per_sm > 0
                                   ? fmt::format("{}, {}", spec.block.count(), spec.min_blocks_per_sm)
                                   : fmt::format("{}", spec.block.count());
    std::string definition = fmt::format("(\n    {}) {{\n", fmt::join(params, ",\n    "));
    definition += spec.body;
    if (!spec.body.empty() && spec.body.back() != '\n') definition += "\n";
    definition += "}\n\n";
    // A kernel whose code is an earlier one's up to names (code_key; ResNet-50: 36 of 112, the
    // repeated blocks of a stage) launches that function: NVRTC and the host compiler compile
    // each body once.
    std::vector<std::string> graph_names = request.input_params;
    graph_names.insert(graph_names.end(), request.output_params.begin(), request.output_params.end());
    if (node.is_kernel()) {
      const std::vector<std::string> locals = fused_kernel_locals(node);
      graph_names.insert(graph_names.end(), locals.begin(), locals.end());
    }
    // The key holds what the runtime reads off the kernel too: identical code carves the same
    // shared memory and cooperates the same way, but a launch takes these from the table.
    const std::string launch = fmt::format("{} {} {}|", bounds, spec.shared_bytes, spec.uses_barriers);
    const auto [same, first] =
        entry_of_code_.try_emplace(launch + code_key(definition, graph_names), kernel.name);
    if (!first) {
      kernel.entry = same->second;
      kernels_text += fmt::format("// {}: the same code as {}, which it launches\n\n", kernel.name, kernel.entry);
    } else {
      kernels_text += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}{}", bounds,
                                  kernel.name, definition);
      const std::string call = fmt::format("{}({});", kernel.name, fmt::join(casts, ", "));
      entries_text += fmt::format("extern \"C\" void kiln_host_entry_{}(void* const* args) {{\n  {}\n}}\n",
                                  kernel.name, call);
      // The threads of a block as one loop that the kernel inlines into (no call through a
      // pointer per GPU thread): `threads` in the runtime's schedule order.
      if (!spec.uses_barriers)
        entries_text += fmt::format(
            "extern \"C\" void kiln_host_block_{}(void* const* args, kiln_host_thread* const* threads, "
            "unsigned count) {{\n"
            "  for (unsigned t = 0; t < count; ++t) {{\n"
            "    kiln_host_current = threads[t];\n"
            "    {}\n"
            "  }}\n}}\n",
            kernel.name, call);
    }
    program_.kernels.push_back(std::move(kernel));
  }

  const ir::Graph& graph_;
  LibrarySelection libraries_;
  Precision precision_;
  Program program_;
  std::unordered_map<const ir::Value*, int> buffer_of_;
  std::unordered_map<const ir::Node*, DynamicRows> dynamic_rows_;
  std::unordered_map<std::string, std::string> entry_of_code_;  // launch figures + code -> kernel
  int kernel_index_ = 0;
};

}  // namespace

Program emit_program(const ir::Graph& graph, const LibrarySelection& libraries, Precision precision) {
  Program program = ProgramBuilder(graph, libraries, precision).build();
  program.precision = precision;
  return program;
}

}  // namespace kiln::codegen
