// Codegen for fused kernels (ir/kernel_region.h): one CUDA kernel per kernel node.
//
// Every body node that is elementwise becomes a small lambda at the top of the kernel, written
// by the same element functions the one-op map kernels use (element_fn, elementwise.cpp), so
// fused and unfused code compute each op the same way. The kinds then differ only in where the
// lambdas are called:
//   epilogue  the GEMM template (gemm.h) of the anchor conv2d/dense/matmul calls them on each
//             accumulator before its store; extra operands are read per output channel, per
//             element (a residual) or once (a scalar);
//   loop      a grid-stride loop over the result evaluates the body per element: kernel inputs
//             are loaded through NumPy broadcast maps, intermediates stay in registers;
//   reduce    a lambda `fused_x(i)` evaluates the producer chain at element i of the reduction's
//             input, and the reduction's own emitter calls it wherever it would have loaded
//             that input (KernelRequest::fused_inputs).
// Trailing reshape-like nodes change only the result's type, so the kernel stores the value
// before them into the result buffer as it is.
//
// Intermediates are kept in the compute type (float for every float dtype): a fused f16 chain
// rounds once, at the store, where the unfused kernels rounded after every op.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <unordered_map>

#include "codegen/kernels/attention.h"
#include "codegen/kernels/elementwise_util.h"
#include "codegen/kernels/gemm.h"
#include "codegen/kernels/optimizer.h"
#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "ir/op_registry.h"

namespace kiln::codegen {
namespace {

// A C identifier for an IR name: "conv1.bias" -> "conv1_bias", "0" -> "_0".
std::string c_identifier(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

// What the kernel computes: the body without its trailing reshapes, and the value it stores.
// A loop kernel may store several (fuse-elementwise gives a value read elsewhere its casts):
// `stored` goes to the first result, `also_stored` to the others, in order.
struct BodyPlan {
  std::vector<const ir::Node*> compute;
  const ir::Value* stored = nullptr;
  std::vector<const ir::Value*> also_stored;
};

// A loop kernel with several results: each is one body node's value, all of the loop's shape
// (emit_loop checks the shapes), none reshaped.
BodyPlan plan_multi_result_loop(const ir::Node& kernel) {
  if (ir::kernel_kind(kernel) != ir::kLoopKernel)
    throw Error(kernel.loc.render(), kernel.describe() + ": codegen supports several results in "
                                                         "loop kernels only");
  BodyPlan plan;
  for (const auto& node : kernel.body->nodes()) {
    if (ir::is_reshape_like(node->op))
      throw Error(kernel.loc.render(), kernel.describe() + ": a loop kernel with several results "
                                                           "cannot reshape them (" +
                                           node->describe() + ")");
    plan.compute.push_back(node.get());
  }
  for (const ir::Value* output : kernel.body->outputs)
    if (output->producer == nullptr)
      throw Error(kernel.loc.render(), kernel.describe() + ": its result %" + output->name +
                                           " is an operand, not computed by its body");
  plan.stored = kernel.body->outputs[0];
  plan.also_stored.assign(kernel.body->outputs.begin() + 1, kernel.body->outputs.end());
  return plan;
}

BodyPlan plan_body(const ir::Node& kernel) {
  const ir::Graph& body = *kernel.body;
  if (kernel.results.size() != 1) return plan_multi_result_loop(kernel);
  BodyPlan plan;
  for (const auto& node : body.nodes()) plan.compute.push_back(node.get());
  plan.stored = body.outputs[0];
  while (plan.compute.size() > 1 && ir::is_reshape_like(plan.compute.back()->op) &&
         plan.compute.back()->results[0] == plan.stored) {
    plan.stored = plan.compute.back()->inputs[0];
    plan.compute.pop_back();
  }
  if (plan.stored->producer != plan.compute.back())
    throw Error(kernel.loc.render(), kernel.describe() + ": its result must be computed by the "
                                                         "last node of its body");
  return plan;
}

// Per value of the body: how the generated code names it. Distinct IR names may make one C
// identifier ("conv1/out" and "conv1_out"), so computed values get one each, numbered on a clash.
class Names {
 public:
  Names(const ir::Node& kernel, const std::vector<std::string>& input_params) {
    for (size_t i = 0; i < kernel.inputs.size(); ++i) param_[kernel.body->inputs[i]] = input_params[i];
    std::set<std::string> taken;
    for (const auto& node : kernel.body->nodes())
      for (const ir::Value* result : node->results) {
        const std::string base = c_identifier(result->name);
        std::string id = base;
        for (int n = 2; taken.count(id); ++n) id = fmt::format("{}_{}", base, n);
        taken.insert(id);
        id_[result] = id;
      }
  }
  // The kernel parameter of a body input; empty for values computed in the body.
  std::string param(const ir::Value* value) const {
    auto it = param_.find(value);
    return it == param_.end() ? "" : it->second;
  }
  // Whether `name` is one of the kernel's input parameters.
  bool is_param(const std::string& name) const {
    for (const auto& [value, param] : param_)
      if (param == name) return true;
    return false;
  }
  std::string variable(const ir::Value* value) const { return "v_" + id_.at(value); }
  std::string function(const ir::Node& node) const { return "f_" + id_.at(node.results[0]); }

 private:
  std::unordered_map<const ir::Value*, std::string> param_;
  std::unordered_map<const ir::Value*, std::string> id_;  // computed values
};

// The request for one body node's own emitter (a single kernel's op, a reduce kernel's
// reduction). Emitters name locals after their operand pointers (`x4`, `x_v`, `x_index`), which
// is safe for the names of an unfused kernel but not for the kernel parameters here: in_x4 may
// be a parameter too, and sub(%x, %x) passes in_x twice. So each operand read from memory goes
// through an alias named as in the op's own kernel (`const float* __restrict__ a = in_x;`);
// `aliases` gets one declaration per alias, for with_aliases.
using Aliases = std::vector<std::pair<std::string, std::string>>;  // alias, declaration

KernelRequest inner_request(const ir::Node& node, const KernelRequest& request, const Names& names,
                            Aliases& aliases) {
  KernelRequest inner{node, request.kernel_name, {}, request.output_params, {}, request.dynamic_rows, request.precision, {}};
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const std::string param = names.param(node.inputs[i]);
    if (param.empty()) {  // computed in the kernel (fused_x)
      inner.input_params.push_back("");
      continue;
    }
    const std::string alias = operand_name(node, i);
    BodyWriter w;
    w.line("const {}* __restrict__ {} = {};", c_type(node.inputs[i]->type.dtype), alias, param);
    aliases.push_back({alias, w.take()});
    inner.input_params.push_back(alias);
  }
  return inner;
}

// `body` after the declarations of the aliases it uses (an unused local draws warnings).
std::string with_aliases(const Aliases& aliases, const std::string& body) {
  std::string text;
  for (const auto& [alias, declaration] : aliases)
    if (mentions(body, alias)) text += declaration;
  return text + body;
}

// `const auto f_relu1 = [](float value) -> float { ... };` for an elementwise body node.
void emit_element_lambda(BodyWriter& w, const ir::Node& node, const Names& names) {
  const std::optional<ElementFn> fn = element_fn(node);
  if (!fn)
    throw Error(node.loc.render(), node.describe() + ": codegen cannot fuse op '" + ir::to_string(node.op) +
                                       "' into a kernel's element computation");
  std::string params;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    params += fmt::format("{}{} {}", i ? ", " : "", compute_type(node.inputs[i]->type.dtype),
                          element_param_name(node.inputs.size(), i));
  // Summaries often start with the op's name ("relu: ..."): don't say it twice.
  const std::string prefix = ir::to_string(node.op) + ": ";
  w.comment(node.describe() + ": " +
            (fn->summary.rfind(prefix, 0) == 0 ? fn->summary.substr(prefix.size()) : fn->summary));
  w.open("const auto {} = []({}) -> {}", names.function(node), params,
         compute_type(node.results[0]->type.dtype));
  for (const std::string& statement : fn->statements) w.line(statement);
  w.close(";");
}

// The shape a body input is read with when broadcast to `loop`: its own (NumPy rules), or for
// the bias of a bias_add, its length at the op's axis.
ir::Shape view_shape(const ir::Value* input, const ir::Node& user, const ir::Shape& loop) {
  if (user.op != ir::OpId::BiasAdd || user.inputs[1] != input || user.inputs[0] == input)
    return input->type.shape;
  ir::Shape shape(loop.size(), 1);
  const int axis = axis_of(user);
  shape[static_cast<size_t>(axis)] = input->type.shape[0];
  return shape;
}

// Evaluates `nodes` (elementwise, in order) at flat index `flat` of `loop`: loads each kernel
// input once per view it is read with (a bias_add's bias is indexed by one axis, the same
// tensor as an operand of add by NumPy rules: two loads), then one `const T v_x = f_x(...)`
// per node. Returns the variable holding the last result.
std::string emit_element_chain(BodyWriter& w, const std::vector<const ir::Node*>& nodes,
                               const ir::Shape& loop, const Names& names,
                               const std::string& flat, const std::string& type) {
  IndexMap map;
  map.dims = loop;
  // The view with leading 1s up to the loop's rank: views that broadcast alike compare equal.
  auto view_of = [&](const ir::Value* input, const ir::Node& user) {
    ir::Shape view = view_shape(input, user, loop);
    view.insert(view.begin(), loop.size() - view.size(), 1);
    return view;
  };
  struct Load {
    const ir::Value* input;
    std::string param;
    ir::Shape view;
    std::string variable;
  };
  std::vector<Load> loads;  // one per map operand, in order
  auto find_load = [&](const ir::Value* input, const ir::Shape& view) -> const Load* {
    for (const Load& l : loads)
      if (l.input == input && l.view == view) return &l;
    return nullptr;
  };
  for (const ir::Node* node : nodes)
    for (const ir::Value* input : node->inputs) {
      const std::string param = names.param(input);
      if (param.empty()) continue;
      const ir::Shape view = view_of(input, *node);
      if (find_load(input, view)) continue;
      const auto views = std::count_if(loads.begin(), loads.end(),
                                       [&](const Load& l) { return l.input == input; });
      // The map names the operand's index and constants (in_x_index, kInXStrides) after it:
      // after its parameter, or for a second view of one input in_x_view1, and numbered when
      // those names would clash (in_x_index may be a parameter too; in_a_b and in_a_b_, the
      // parameters of %a.b and %a_b, both make kInABStrides). The pointer stays `param`.
      const std::string base = param + (views ? fmt::format("_view{}", views) : "");
      std::string name = base;
      auto clashes = [&](const std::string& candidate) {
        for (const StridedOperand& operand : map.operands)
          if (operand.name == candidate ||
              constant_suffix(operand.name) == constant_suffix(candidate))
            return true;
        return names.is_param(candidate + "_index");
      };
      for (int n = 2; clashes(name); ++n) name = fmt::format("{}_{}", base, n);
      map.operands.push_back(broadcast_operand(name, view, loop));
      loads.push_back({input, param, view, "x_" + name});
    }
  map = collapse(map);
  emit_index_constants(w, map, type);
  emit_operand_indices(w, map, flat, type);
  for (size_t k = 0; k < loads.size(); ++k) {
    const Load& l = loads[k];
    const std::string index = operand_index(map, map.operands[k], flat);
    w.line("const {} {} = {};", compute_type(l.input->type.dtype), l.variable,
           load(l.input->type.dtype, l.param + "[" + index + "]"));
  }
  std::unordered_map<const ir::Value*, std::string> variable;  // values computed so far
  std::string last;
  for (const ir::Node* node : nodes) {
    std::string args;
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const ir::Value* input = node->inputs[i];
      const Load* loaded =
          names.param(input).empty() ? nullptr : find_load(input, view_of(input, *node));
      args += (i ? ", " : "") + (loaded ? loaded->variable : variable.at(input));
    }
    last = names.variable(node->results[0]);
    w.line("const {} {} = {}({});", compute_type(node->results[0]->type.dtype), last,
           names.function(*node), args);
    variable[node->results[0]] = last;
  }
  return last;
}

std::string source_list(const std::vector<const ir::Node*>& nodes) {
  std::string text;
  for (const ir::Node* node : nodes) text += (text.empty() ? "" : ", ") + ir::to_string(node->op);
  return text;
}

// --- loop ----------------------------------------------------------------------------------------

KernelSpec emit_loop(const KernelRequest& request, const BodyPlan& plan) {
  const ir::Node& kernel = request.node;
  const Names names(kernel, request.input_params);
  const ir::Shape& loop = plan.stored->type.shape;
  const int64_t count = ir::num_elements(loop);
  const std::string type = index_type(count);
  for (const ir::Node* node : plan.compute)
    if (node->results[0]->type.shape != loop)
      throw Error(node->loc.render(), kernel.describe() + ": " + node->describe() +
                                          " does not have the loop's shape " +
                                          ir::shape_to_string(loop));

  BodyWriter w;
  for (const ir::Node* node : plan.compute) emit_element_lambda(w, *node, names);
  w.line(dynamic_count(request.dynamic_rows, "kCount", type, count));
  open_grid_stride_loop(w, "i", type, "kCount");
  emit_element_chain(w, plan.compute, loop, names, "i", type);
  std::vector<const ir::Value*> stored = {plan.stored};
  stored.insert(stored.end(), plan.also_stored.begin(), plan.also_stored.end());
  for (size_t k = 0; k < stored.size(); ++k)
    w.line("{}[i] = {};", request.output_params[k],
           store(stored[k]->type.dtype, names.variable(stored[k])));
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  spec.note = "fused grid-stride loop (" + source_list(plan.compute) +
              "), intermediates in registers";
  if (!plan.also_stored.empty())
    spec.note += fmt::format("; stores {} results", plan.also_stored.size() + 1);
  return spec;
}

// --- reduce --------------------------------------------------------------------------------------

KernelSpec emit_reduce(const KernelRequest& request, const BodyPlan& plan) {
  const ir::Node& kernel = request.node;
  const Names names(kernel, request.input_params);
  const ir::Node& reduction = *plan.compute.back();
  const std::vector<const ir::Node*> producers(plan.compute.begin(), plan.compute.end() - 1);
  const KernelEmitter* emitter = find_kernel_emitter(reduction.op);
  KILN_CHECK(emitter) << "no emitter for " << reduction.op;

  Aliases aliases;
  KernelRequest inner = inner_request(reduction, request, names, aliases);
  for (const ir::Value* input : reduction.inputs)
    inner.fused_inputs.push_back(names.param(input).empty() ? "fused_x" : "");
  if (producers.empty() || inner.fused_inputs[0].empty() ||
      std::count(inner.fused_inputs.begin(), inner.fused_inputs.end(), "fused_x") != 1)
    throw Error(kernel.loc.render(), kernel.describe() + ": a reduce kernel computes the first "
                                                         "operand of its reduction, and only it");

  const ir::Shape& loop = reduction.inputs[0]->type.shape;
  const std::string type = index_type(ir::num_elements(loop));
  BodyWriter w;
  for (const ir::Node* node : producers) emit_element_lambda(w, *node, names);
  w.comment(fmt::format("Element i of {}'s input, computed from the kernel's inputs.",
                        reduction.describe()));
  w.open("const auto fused_x = [&]({} i) -> {}", type,
         reduction.inputs[0]->type.dtype == ir::DType::F64 ? "double" : "float");
  const std::string last = emit_element_chain(w, producers, loop, names, "i", type);
  w.line("return {};", last);
  w.close(";");
  KernelSpec spec = (*emitter)(inner);
  spec.body = w.take() + with_aliases(aliases, spec.body);
  spec.note += "; reads its input through the fused " + source_list(producers);
  return spec;
}

// --- epilogue ------------------------------------------------------------------------------------

// How an epilogue operand is indexed at one GEMM result: the result's channel (a bias), the
// result's own position (a residual) or element 0 (a scalar).
std::string epilogue_index(const ir::Node& node, const ir::Value* operand,
                           const ir::Shape& out) {
  if (node.op == ir::OpId::BiasAdd) return "channel";
  const ir::Shape& shape = operand->type.shape;
  if (shape == out) return "out_index";
  if (ir::num_elements(shape) == 1) return "0";
  return "channel";  // fuse-conv-bias-relu checked that it is per output channel
}

// The position of row `row` of A in its kernel operand: `row * kK`, or through the views the
// GEMM reads its rows by (fuse-gemm-views).
using RowPosition = std::function<std::string(const std::string& row)>;

std::string row_major(const std::string& row) { return "(" + row + ") * kK"; }

bool is_norm(const ir::Node& node) {
  return node.op == ir::OpId::LayerNorm || node.op == ir::OpId::RmsNorm;
}

// `float var` = the sum of `value` (an expression of k), or of its square, over the row's
// elements k = stat_part, stat_part + kStatThreads, ... below `length`: one statistics
// thread's share, as both GEMM bodies fold it.
void emit_stat_fold(BodyWriter& w, const std::string& var, const std::string& value, bool squared,
                    const std::string& length) {
  w.line("float {} = 0.0f;", var);
  w.open("if (stat_inside)");
  w.open("for (index_t k = stat_part; k < {}; k += kStatThreads)", length);
  w.line("const float value = {};", value);
  w.line("{} += {};", var, squared ? "value * value" : "value");
  w.close();
  w.close();
}

// add_row_statistics for the GEMM's host body (GemmOperand::host_setup): each row's
// kStatThreads CUDA threads' sums, then their shuffle steps over all of them, in the same
// order, so `<prefix>_mean` and `<prefix>_rstd` (arrays of the host body here) hold the CUDA
// body's values bit for bit.
std::string host_row_statistics(const ir::Node& norm, const std::string& prefix,
                                const std::string& element, const std::string& length,
                                double epsilon) {
  BodyWriter w(0);
  w.comment(fmt::format("The row statistics of {}, as the CUDA threads compute them.", norm.describe()));
  w.line("float {0}_mean[kTileM], {0}_rstd[kTileM];", prefix);
  w.open("for (int stat_row = 0; stat_row < kTileM; ++stat_row)");
  w.line("constexpr int kStatThreads = kThreads / kTileM;");
  w.line("const index_t stat_global_row = block_row + stat_row;");
  w.line("const bool stat_inside = stat_global_row < kM;");
  // `float var` = lane 0's sum of `value` (or its square) after the shuffle steps.
  const auto row_sum = [&](const std::string& var, const std::string& value, bool squared) {
    w.line("float {}_parts[kStatThreads];", var);
    w.open("for (int stat_part = 0; stat_part < kStatThreads; ++stat_part)");
    emit_stat_fold(w, var, value, squared, length);
    w.line("{0}_parts[stat_part] = {0};", var);
    w.close();
    w.open("for (int step = 1; step < kStatThreads; step <<= 1)");
    w.line("float next[kStatThreads];");
    w.line("for (int stat_part = 0; stat_part < kStatThreads; ++stat_part) "
           "next[stat_part] = {0}_parts[stat_part] + {0}_parts[stat_part ^ step];", var);
    w.line("for (int stat_part = 0; stat_part < kStatThreads; ++stat_part) "
           "{0}_parts[stat_part] = next[stat_part];", var);
    w.close();
    w.line("const float {0} = {0}_parts[0];", var);
  };
  if (norm.op == ir::OpId::RmsNorm) {
    w.line("const float stat_mean = 0.0f;");
  } else {
    row_sum("stat_sum", element, false);
    w.line("const float stat_mean = stat_sum / static_cast<float>({});", length);
  }
  row_sum("stat_squares", element + " - stat_mean", true);
  w.line("{}_mean[stat_row] = stat_mean;", prefix);
  w.line("{}_rstd[stat_row] = 1.0f / sqrtf(stat_squares / static_cast<float>({}) + {});", prefix,
         length, literal(ir::DType::F32, epsilon));
  w.close();
  return w.take();
}

// Row statistics of a layer_norm or rms_norm the GEMM recomputes (a prologue norm, or a norm
// its epilogue reads as the residual): before the K loop the block computes the mean and
// 1/rms of its kTileM rows of the norm's input, kThreads / kTileM neighbouring threads per row
// (4 with 64-row tiles, 2 with 128; shuffle steps combine them), two passes as the layer_norm
// kernel (the mean, then centred squares), into `<prefix>_mean` and `<prefix>_rstd` (kTileM
// floats each: arrays `first_array` and the next of extra_smem). `row_at` gives a row's
// position in the input, `length` the constant that is the normalized axis's size. Every
// thread reaches the shuffles and the barrier: rows past kM sum nothing.
void add_row_statistics(nn::GemmSpec& spec, const ir::Node& norm, const Names& names,
                        const std::string& prefix, uint32_t first_array, const RowPosition& row_at,
                        const std::string& length, const std::string& role) {
  const bool rms = norm.op == ir::OpId::RmsNorm;
  const std::string x = names.param(norm.inputs[0]);
  KILN_CHECK(!x.empty() && !names.param(norm.inputs[1]).empty() &&
             (rms || !names.param(norm.inputs[2]).empty()))
      << norm.describe() << ": a recomputed norm reads kernel operands only";
  const double epsilon = std::get<double>(norm.attrs.at("epsilon"));
  BodyWriter w(0);
  w.comment(fmt::format("{}: {} {}. kStatThreads threads per row of the", role, norm.describe(),
                        role == "Prologue" ? "normalizes the rows of A"
                                           : "is recomputed for the residual the epilogue adds"));
  w.comment("block sum their share of it; the mean and 1/rms of each row go to shared memory.");
  w.line("float* {}_mean = extra_smem + {} * kTileM;  // [kTileM]", prefix, first_array);
  w.line("float* {0}_rstd = {0}_mean + kTileM;  // [kTileM]", prefix);
  w.open("");
  w.line("constexpr int kStatThreads = kThreads / kTileM;");
  w.line("const int stat_row = threadIdx.x / kStatThreads;");
  w.line("const int stat_part = threadIdx.x % kStatThreads;");
  w.line("const index_t stat_global_row = block_row + stat_row;");
  w.line("const bool stat_inside = stat_global_row < kM;");
  const std::string element = x + "[" + row_at("stat_global_row") + " + k]";
  // `float var` = the sum over the row of `value` (an expression of k), or of its square; the
  // row's threads combined.
  const auto row_sum = [&](const std::string& var, const std::string& value, bool squared) {
    emit_stat_fold(w, var, value, squared, length);
    w.line("#pragma unroll");
    w.line("for (int step = 1; step < kStatThreads; step <<= 1)");
    w.line("  {0} += __shfl_xor_sync(0xffffffffu, {0}, step);", var);
  };
  if (rms) {
    w.line("const float stat_mean = 0.0f;  // rms_norm does not centre");
  } else {
    row_sum("stat_sum", element, false);
    w.line("const float stat_mean = stat_sum / static_cast<float>({});", length);
  }
  w.comment("Centred squares, as the layer_norm kernel sums them (no cancellation).");
  row_sum("stat_squares", element + " - stat_mean", true);
  w.open("if (stat_part == 0)");
  w.line("{}_mean[stat_row] = stat_mean;", prefix);
  w.line("{}_rstd[stat_row] = 1.0f / sqrtf(stat_squares / static_cast<float>({}) + {});", prefix,
         length, literal(ir::DType::F32, epsilon));
  w.close();
  w.line("__syncthreads();  // every row's statistics are in before the first tile");
  w.close();
  spec.a.setup += w.take();
  spec.a.host_setup += host_row_statistics(norm, prefix, element, length, epsilon);
  spec.row_stat_arrays = std::max(spec.row_stat_arrays, first_array + 2);
}

// `norm` applied to element (position, index k) of its input, with the statistics of
// add_row_statistics for the block's row `row`.
std::string normalized(const ir::Node& norm, const Names& names, const std::string& prefix,
                       const std::string& position, const std::string& k) {
  const std::string local = "(row - block_row)";
  const bool rms = norm.op == ir::OpId::RmsNorm;
  return fmt::format("({}[{}] - {}_mean[{}]) * {}_rstd[{}] * {}[{}]{}", names.param(norm.inputs[0]),
                     position, prefix, local, prefix, local, names.param(norm.inputs[1]), k,
                     rms ? "" : " + " + names.param(norm.inputs[2]) + "[" + k + "]");
}

// A layer_norm or rms_norm before a dense (passes/fuse_norm_prologue.cpp): its statistics
// before the K loop, and A normalized as it is staged.
void add_norm_prologue(nn::GemmSpec& spec, const ir::Node& norm, const Names& names,
                       const RowPosition& row_at) {
  add_row_statistics(spec, norm, names, "norm", 0, row_at, "kK", "Prologue");
  spec.a.fetch = "value = " + normalized(norm, names, "norm", row_at("row") + " + k", "k") + ";";
  spec.a.address.clear();  // normalized as it is staged: no plain copy
  spec.note += "; " + norm.describe() + " as a prologue (rows normalized as they are staged)";
}

// `expression` (a float or double of dtype `from`) converted to `to` and back to the compute
// type: what reading a stored cast(from -> to) would give.
std::string cast_value(ir::DType from, ir::DType to, const std::string& expression) {
  if (to == ir::DType::F32 && from == ir::DType::F64) return "static_cast<float>(" + expression + ")";
  return load(to, store(to, expression));  // f16/bf16 round there and back; widening is exact
}

// Whether the GEMM's units round an operand to `to` as they take it (bf16 or f16 tensor cores
// at --precision=bf16/f16): then reading the f32 buffer unchanged is reading the cast.
bool units_round_to(Precision precision, ir::DType to) {
  return sixteen_bit(precision) && precision_name(precision) == ir::dtype_name(to);
}

KernelSpec emit_epilogue(const KernelRequest& request, const BodyPlan& plan_in) {
  const ir::Node& kernel = request.node;
  const Names names(kernel, request.input_params);
  BodyPlan plan = plan_in;
  // Casts of the kernel's operands (fuse-conv-bias-relu takes autocast's 16-bit copies of
  // inputs and parameters): the GEMM and the epilogue read the operand as stored and convert
  // it as the cast would, so the copy is never stored.
  std::unordered_map<const ir::Value*, const ir::Node*> operand_casts;
  // A cast of the rows a norm prologue or a view makes (fuse-norm-prologue takes autocast's
  // cast between an f32 norm and a 16-bit dense): A is rounded as it is staged.
  const ir::Node* rows_cast = nullptr;
  std::erase_if(plan.compute, [&](const ir::Node* node) {
    if (node->op != ir::OpId::Cast) return false;
    const ir::Node* producer = node->inputs[0]->producer;
    if (!names.param(node->inputs[0]).empty()) {
      operand_casts.emplace(node->results[0], node);
      return true;
    }
    if (producer && (is_norm(*producer) || ir::is_view_op(producer->op)) && !rows_cast) {
      rows_cast = node;
      return true;
    }
    return false;
  });
  // The value the GEMM reads as `value`, seen through the rows cast.
  const auto uncast = [&](const ir::Value* value) {
    return rows_cast && value == rows_cast->results[0] ? rows_cast->inputs[0] : value;
  };
  const auto cast_of = [&](const ir::Value* value) -> const ir::Node* {
    auto found = operand_casts.find(value);
    return found == operand_casts.end() ? nullptr : found->second;
  };
  // Norms the kernel recomputes (their results are never stored): the one the GEMM reads as
  // its rows is its prologue (fuse-norm-prologue), the others are residuals its epilogue reads
  // (fuse-norm-residual). Their statistics come first; they are not epilogue steps.
  std::vector<const ir::Node*> norms;
  std::erase_if(plan.compute, [&](const ir::Node* node) {
    if (!is_norm(*node)) return false;
    norms.push_back(node);
    return true;
  });
  // View ops before the GEMM make its rows out of a kernel operand (or of the norm's rows): the
  // GEMM reads A through their strided view (fuse-gemm-views).
  std::vector<const ir::Node*> row_views;
  while (ir::is_view_op(plan.compute.front()->op)) {
    row_views.push_back(plan.compute.front());
    plan.compute.erase(plan.compute.begin());
  }
  const ir::Node& anchor = *plan.compute.front();
  const ir::Value* a_source = row_views.empty() ? uncast(anchor.inputs[0]) : row_views.front()->inputs[0];
  const ir::Node* norm = nullptr;
  std::vector<const ir::Node*> residual_norms;
  for (const ir::Node* n : norms) {
    if (n->results[0] == a_source && !norm)
      norm = n;
    else
      residual_norms.push_back(n);
  }
  const ir::Value* rows = norm ? norm->results[0] : row_views.empty() ? nullptr : row_views.front()->inputs[0];
  const ir::Value* rows_param = norm ? norm->inputs[0] : rows;  // the kernel operand A comes from
  KernelRequest inner{anchor, request.kernel_name, {}, request.output_params, {}, request.dynamic_rows, request.precision, {}};
  BodyWriter operand_lambdas(0);
  for (size_t index = 0; index < anchor.inputs.size(); ++index) {
    const ir::Value* input = anchor.inputs[index];
    const ir::Node* cast = cast_of(input);
    const ir::Value* read = cast ? cast->inputs[0] : input;
    const bool a_rows = input == anchor.inputs[0] && rows;
    inner.input_params.push_back(a_rows ? names.param(rows_param) : names.param(read));
    inner.stored_dtypes.push_back(cast           ? std::optional<ir::DType>(read->type.dtype)
                                  : a_rows && rows_cast ? std::optional<ir::DType>(rows_param->type.dtype)
                                                        : std::nullopt);
    inner.fused_inputs.emplace_back();
    // A and B on tensor cores that round them as the cast would: read as stored.
    if (!cast || (index < 2 && units_round_to(request.precision, input->type.dtype))) continue;
    // Units that would not round the operand (f32 FMA), or a bias: the loads convert it.
    inner.fused_inputs.back() = "cast_" + inner.input_params.back();
    operand_lambdas.comment(fmt::format("{}: {} -> {} as the GEMM loads it", cast->describe(),
                                        ir::dtype_name(read->type.dtype), ir::dtype_name(input->type.dtype)));
    operand_lambdas.line("const auto {} = [&](long long i) -> float {{ return {}; }};",
                         inner.fused_inputs.back(),
                         cast_value(read->type.dtype, input->type.dtype,
                                    load(read->type.dtype, inner.input_params.back() + "[i]")));
  }

  const ir::Value* a = row_views.empty() ? rows : row_views.back()->results[0];
  if (rows_cast && !rows)
    throw Error(kernel.loc.render(), kernel.describe() + ": a cast before its GEMM rounds a norm's or a view's rows only");
  if (rows && ((anchor.op != ir::OpId::Dense && anchor.op != ir::OpId::Matmul) || uncast(anchor.inputs[0]) != a))
    throw Error(kernel.loc.render(), kernel.describe() + ": a norm prologue or row views feed the rows of a dense or matmul only");
  RowPosition row_at = row_major;
  if (!row_views.empty()) {
    const std::optional<ir::StridedView> view = ir::gemm_rows_view(rows, row_views, norm != nullptr);
    if (!view)
      throw Error(kernel.loc.render(), kernel.describe() + ": the ops before its GEMM are no strided view of whole rows");
    row_at = [view = *view](const std::string& row) { return "(" + ir::row_position(view, row) + ")"; };
  }

  nn::GemmSpec spec = anchor.op == ir::OpId::Conv2d  ? nn::conv2d_gemm(inner)
                      : anchor.op == ir::OpId::Dense ? nn::dense_gemm(inner)
                                             : nn::matmul_gemm(inner);
  BodyWriter prelude(0);
  BodyWriter epilogue(0);
  const ir::Value* running = anchor.results[0];
  // Transposes and reshapes among the epilogue's ops: the result is stored through their view,
  // and the ops after them read operands in the final layout (out_index); the ones before, in
  // the GEMM's (row * kN + col).
  std::vector<const ir::Node*> out_views;
  for (size_t n = 1; n < plan.compute.size(); ++n)
    if (ir::is_view_op(plan.compute[n]->op)) out_views.push_back(plan.compute[n]);
  std::optional<ir::StridedView> out_view;
  if (!out_views.empty()) {
    out_view = ir::gemm_output_view(anchor.results[0], out_views);
    if (!out_view || spec.batch != 1 || !spec.a.k_contiguous)
      throw Error(kernel.loc.render(), kernel.describe() + ": its epilogue's views do not keep the GEMM's rows "
                                                           "whole with columns at stride 1");
    spec.out_index = ir::row_position(*out_view, "row") + " + col";
  }
  // A residual norm's statistics arrays in extra_smem (after the prologue's).
  uint32_t next_array = norm ? 2 : 0;
  int residuals = 0;
  const auto residual_norm = [&](const ir::Value* input) -> const ir::Node* {
    for (const ir::Node* n : residual_norms)
      if (n->results[0] == input) return n;
    return nullptr;
  };
  bool past_views = false;
  for (size_t n = 1; n < plan.compute.size(); ++n) {
    const ir::Node& node = *plan.compute[n];
    if (ir::is_view_op(node.op)) {
      past_views = true;
      running = node.results[0];
      continue;
    }
    emit_element_lambda(prelude, node, names);
    std::string args;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ir::Value* input = node.inputs[i];
      std::string arg = "value";
      if (const ir::Node* recomputed = residual_norm(input)) {
        // A residual recomputed from the norm's input: row statistics before the K loop, then
        // each element normalized as it is read. Its rows are the result's rows (the norm
        // normalizes the GEMM's columns), in the GEMM's layout or the views' final one.
        if (input->type.shape != running->type.shape || spec.batch != 1 || anchor.op == ir::OpId::Conv2d)
          throw Error(kernel.loc.render(), kernel.describe() + ": " + recomputed->describe() +
                                               " must be a residual of a dense's or matmul's [rows, columns] result");
        const bool final_layout = past_views;
        const RowPosition residual_row = [&](const std::string& row) {
          return final_layout ? "(" + ir::row_position(*out_view, row) + ")" : "(" + row + ") * kN";
        };
        const std::string prefix = fmt::format("residual_norm{}", residuals++);
        add_row_statistics(spec, *recomputed, names, prefix, next_array, residual_row, "kN", "Residual");
        next_array += 2;
        arg = normalized(*recomputed, names, prefix, residual_row("row") + " + col", "col");
        spec.note += "; " + recomputed->describe() + " recomputed as the residual";
      } else if (input != running) {
        // An operand cast (a bias autocast made 16-bit) is read as stored, then converted.
        const ir::Node* cast = cast_of(input);
        const ir::Value* read = cast ? cast->inputs[0] : input;
        const std::string param = names.param(read);
        KILN_CHECK(!param.empty()) << node.describe() << " reads a value the epilogue lost";
        std::string index = epilogue_index(node, input, running->type.shape);
        if (index == "out_index" && !out_views.empty() && !past_views) index = "row * kN + col";
        arg = load(read->type.dtype, param + "[" + index + "]");
        if (cast) arg = cast_value(read->type.dtype, input->type.dtype, arg);
      }
      args += (i ? ", " : "") + arg;
    }
    epilogue.line("value = {}({});  // {}", names.function(node), args, node.describe());
    running = node.results[0];
  }
  if (rows && (spec.batch != 1 || !spec.a.k_contiguous))
    throw Error(kernel.loc.render(), kernel.describe() + ": a norm prologue or row views need the GEMM's rows "
                                                         "as one matrix (no batch of b, a untransposed)");
  if (norm) {
    add_norm_prologue(spec, *norm, names, row_at);
  } else if (!row_views.empty()) {
    spec.a.fetch = fmt::format("value = {};", load(a->type.dtype, names.param(rows_param) + "[" + row_at("row") + " + k]"));
    spec.a.address.clear();  // a view's rows need not be 16-byte aligned
    spec.note += "; A read through the view of " + source_list(row_views);
  }
  if (rows_cast && !units_round_to(request.precision, rows_cast->results[0]->type.dtype))
    spec.a.fetch += fmt::format("\nvalue = {};  // {}", cast_value(rows_cast->inputs[0]->type.dtype,
                                                                  rows_cast->results[0]->type.dtype, "value"),
                                rows_cast->describe());
  if (rows_cast) spec.note += "; A rounded to " + std::string(ir::dtype_name(rows_cast->results[0]->type.dtype)) + " as it is staged";
  spec.prelude = operand_lambdas.take() + prelude.take();
  if (!operand_casts.empty()) {
    std::string sources;
    for (const ir::Node* node : plan_in.compute)
      if (operand_casts.count(node->results[0]))
        sources += fmt::format("{}{} ({} -> {})", sources.empty() ? "" : ", ", node->inputs[0]->name,
                               ir::dtype_name(node->inputs[0]->type.dtype),
                               ir::dtype_name(node->results[0]->type.dtype));
    spec.note += "; reads " + sources + " as stored, converting as it loads";
  }
  if (!spec.epilogue.empty() && spec.epilogue.back() != '\n') spec.epilogue += '\n';
  spec.epilogue += epilogue.take();
  spec.out_dtype = plan.stored->type.dtype;
  if (plan.compute.size() > 1)
    spec.note += "; fused epilogue: " + source_list({plan.compute.begin() + 1, plan.compute.end()});
  return nn::emit_gemm(spec, anchor);
}

// A body of one node (and reshapes): that node's own kernel, writing the kernel's result.
KernelSpec emit_single(const KernelRequest& request, const BodyPlan& plan) {
  const ir::Node& node = *plan.compute.front();
  const KernelEmitter* emitter = find_kernel_emitter(node.op);
  if (!emitter)
    throw Error(node.loc.render(), node.describe() + ": codegen has no CUDA kernel for op '" +
                                       ir::to_string(node.op) + "' yet");
  const Names names(request.node, request.input_params);
  Aliases aliases;
  const KernelRequest inner = inner_request(node, request, names, aliases);
  KernelSpec spec = (*emitter)(inner);
  spec.body = with_aliases(aliases, spec.body);
  spec.note += "; the result is stored as " + request.node.results[0]->type.to_string();
  return spec;
}

KernelSpec emit_fused_kernel(const KernelRequest& request) {
  // Many results, one per updated tensor: dispatched before plan_body, which expects one.
  if (ir::kernel_kind(request.node) == ir::kMultiUpdateKernel) {
    std::vector<const ir::Node*> updates;
    for (const auto& node : request.node.body->nodes()) updates.push_back(node.get());
    return emit_multi_tensor_update(request, updates);
  }
  if (ir::kernel_kind(request.node) == ir::kAttentionKernel) return emit_attention_views(request);
  const BodyPlan plan = plan_body(request.node);
  if (plan.compute.size() == 1) return emit_single(request, plan);
  const std::string& kind = ir::kernel_kind(request.node);
  if (kind == ir::kEpilogueKernel) return emit_epilogue(request, plan);
  if (kind == ir::kReduceKernel) return emit_reduce(request, plan);
  return emit_loop(request, plan);
}

}  // namespace

std::string operand_name(const ir::Node& node, size_t i) {
  const auto& names = node.def->input_names;
  if (names.empty()) return "in" + std::to_string(i);
  // Variadic: the leading names as they are, the repeated last one numbered from 0.
  if (node.def->max_inputs < 0)
    return i + 1 < names.size() ? names[i] : names.back() + std::to_string(i + 1 - names.size());
  return names[std::min(i, names.size() - 1)];
}

std::vector<std::string> fused_kernel_params(const ir::Node& kernel) {
  std::vector<std::string> params;
  for (const ir::Value* input : kernel.body->inputs) {
    std::string name = "in_" + c_identifier(input->name);
    while (std::find(params.begin(), params.end(), name) != params.end()) name += "_";
    params.push_back(name);
  }
  return params;
}

std::vector<std::string> fused_kernel_locals(const ir::Node& kernel) {
  const Names names(kernel, fused_kernel_params(kernel));
  std::vector<std::string> locals;
  for (const auto& node : kernel.body->nodes()) {
    locals.push_back(names.function(*node));
    for (const ir::Value* result : node->results) locals.push_back(names.variable(result));
  }
  return locals;
}

void add_fused_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::Kernel, emit_fused_kernel);
}

}  // namespace kiln::codegen
