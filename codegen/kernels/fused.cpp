// Codegen for fused kernels (ir/kernel_region.h): one CUDA kernel per kernel node.
//
// Every body node that is elementwise becomes a small lambda at the top of the kernel, written
// by the same element functions the one-op map kernels use (element_fn, elementwise.cpp), so
// fused and unfused code compute each op the same way. The kinds then differ only in where the
// lambdas are called:
//   epilogue  the GEMM template (gemm.h) of the anchor conv2d/dense/matmul calls them on each
//             accumulator before its store; extra operands are read per output channel, per
//             element (a residual) or once (a scalar) (fused_epilogue.cpp);
//   loop      a grid-stride loop over the result evaluates the body per element: kernel inputs
//             are loaded through NumPy broadcast maps, intermediates stay in registers; it
//             stores one or more of the body's values (a value and its casts);
//   reduce    a lambda `fused_x(i)` evaluates the producer chain at element i of the reduction's
//             input, and the reduction's own emitter calls it wherever it would have loaded
//             that input (KernelRequest::fused_inputs).
// Trailing reshape-like nodes change only the result's type, so the kernel stores the value
// before them into the result buffer as it is. A single kernel may end in casts of its node's
// results, which the node's emitter rounds as it stores them (KernelRequest::result_dtypes).
//
// Intermediates are kept in the compute type (float for every float dtype): a fused f16 chain
// rounds once, at the store, where the unfused kernels rounded after every op.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <unordered_map>

#include "codegen/kernels/attention.h"
#include "codegen/kernels/elementwise_util.h"
#include "codegen/kernels/fused_body.h"
#include "codegen/kernels/optimizer.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"

namespace kiln::codegen {
namespace fused {

// A C identifier for an IR name: "conv1.bias" -> "conv1_bias", "0" -> "_0".
std::string c_identifier(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

KernelRequest inner_request(const ir::Node& node, const KernelRequest& request, const Names& names,
                            Aliases& aliases) {
  KernelRequest inner{node, request.kernel_name, {}, request.output_params, {}, request.dynamic_rows, request.precision, {}, {}};
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

namespace {

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

}  // namespace

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

}  // namespace fused

namespace {

using namespace fused;

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

// A body of one node (and reshapes): that node's own kernel, writing the kernel's result.
// `node`'s own emitter on the kernel's operands, writing `output_params` (nullopt: the kernel's),
// each result in its dtype or the one `result_dtypes` gives.
KernelSpec emit_own_kernel(const KernelRequest& request, const ir::Node& node,
                           std::optional<std::vector<std::string>> output_params = std::nullopt,
                           std::vector<std::optional<ir::DType>> result_dtypes = {}) {
  const KernelEmitter* emitter = find_kernel_emitter(node.op);
  if (!emitter)
    throw Error(node.loc.render(), node.describe() + ": codegen has no CUDA kernel for op '" +
                                       ir::to_string(node.op) + "' yet");
  const Names names(request.node, request.input_params);
  Aliases aliases;
  KernelRequest inner = inner_request(node, request, names, aliases);
  if (output_params) inner.output_params = std::move(*output_params);
  inner.result_dtypes = std::move(result_dtypes);
  KernelSpec spec = (*emitter)(inner);
  spec.body = with_aliases(aliases, spec.body);
  return spec;
}

KernelSpec emit_single(const KernelRequest& request, const BodyPlan& plan) {
  KernelSpec spec = emit_own_kernel(request, *plan.compute.front());
  spec.note += "; the result is stored as " + request.node.results[0]->type.to_string();
  return spec;
}

// A single kernel whose node's results are stored through casts (fuse-elementwise, where the
// op's kernel rounds the result as it stores it: ir::stores_rounded_result): the node's own
// kernel, each result's pointer the kernel's result it became, in the cast's dtype.
KernelSpec emit_single_with_casts(const KernelRequest& request) {
  const ir::Node& kernel = request.node;
  const ir::Graph& body = *kernel.body;
  const ir::Node& node = *body.nodes().front();
  auto refuse = [&](const std::string& why) {
    return Error(kernel.loc.render(), kernel.describe() + ": " + why);
  };
  std::vector<const ir::Value*> stored(node.results.begin(), node.results.end());
  std::vector<std::optional<ir::DType>> result_dtypes(node.results.size());
  for (size_t i = 1; i < body.nodes().size(); ++i) {
    const ir::Node& cast = *body.nodes()[i];
    const auto at = std::find(node.results.begin(), node.results.end(), cast.inputs[0]);
    const size_t index = static_cast<size_t>(at - node.results.begin());
    if (cast.op != ir::OpId::Cast || at == node.results.end() ||
        !ir::stores_rounded_result(node.op, index) || !ir::is_floating(cast.results[0]->type.dtype))
      throw refuse(cast.describe() + " is not a float cast of a result that " + node.describe() +
                   "'s kernel rounds as it stores it");
    stored[index] = cast.results[0];
    result_dtypes[index] = cast.results[0]->type.dtype;
  }
  std::vector<std::string> output_params;
  for (const ir::Value* value : stored) {
    const auto at = std::find(body.outputs.begin(), body.outputs.end(), value);
    if (at == body.outputs.end())
      throw refuse("%" + value->name + " is not one of its results, but " + node.describe() +
                   "'s kernel stores it");
    output_params.push_back(request.output_params[static_cast<size_t>(at - body.outputs.begin())]);
  }
  KernelSpec spec = emit_own_kernel(request, node, output_params, result_dtypes);
  for (size_t k = 0; k < stored.size(); ++k)
    if (result_dtypes[k])
      spec.note += fmt::format("; %{} stored as {}, rounded as it is stored (its cast)",
                               node.results[k]->name, ir::dtype_name(*result_dtypes[k]));
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
  if (ir::kernel_kind(request.node) == ir::kSingleKernel && request.node.body->nodes().size() > 1 &&
      request.node.body->nodes().back()->op == ir::OpId::Cast)
    return emit_single_with_casts(request);
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
