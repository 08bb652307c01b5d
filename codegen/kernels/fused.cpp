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
#include <unordered_map>

#include "codegen/kernels/elementwise_util.h"
#include "codegen/kernels/gemm.h"
#include "ir/kernel_region.h"
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
struct BodyPlan {
  std::vector<const ir::Node*> compute;
  const ir::Value* stored = nullptr;
};

BodyPlan plan_body(const ir::Node& kernel) {
  const ir::Graph& body = *kernel.body;
  if (kernel.results.size() != 1)
    throw Error(kernel.loc.render(), kernel.describe() + ": codegen supports fused kernels with "
                                                         "one result");
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

// Per value of the body: how the generated code names it.
class Names {
 public:
  Names(const ir::Node& kernel, const std::vector<std::string>& input_params) {
    for (size_t i = 0; i < kernel.inputs.size(); ++i) param_[kernel.body->inputs[i]] = input_params[i];
  }
  // The kernel parameter of a body input; empty for values computed in the body.
  std::string param(const ir::Value* value) const {
    auto it = param_.find(value);
    return it == param_.end() ? "" : it->second;
  }
  static std::string variable(const ir::Value* value) { return "v_" + c_identifier(value->name); }
  static std::string function(const ir::Node& node) {
    return "f_" + c_identifier(node.results[0]->name);
  }

 private:
  std::unordered_map<const ir::Value*, std::string> param_;
};

// The request for one body node's own emitter: its operands' kernel parameters. A node may
// read one value twice (sub(%x, %x), once canonicalize has dropped an identity transpose), but
// the kernel has one parameter per value, and emitters name locals after their operands'
// parameters (`in_x4`, `in_x_v`): a repeated operand reads through an alias, declared by the
// lines returned in `aliases`.
KernelRequest inner_request(const ir::Node& node, const KernelRequest& request, const Names& names,
                            std::string& aliases) {
  KernelRequest inner{node, request.kernel_name, {}, request.output_params, {}};
  BodyWriter w;
  std::vector<std::string> taken = request.input_params;
  taken.insert(taken.end(), request.output_params.begin(), request.output_params.end());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    std::string param = names.param(node.inputs[i]);
    const auto& earlier = inner.input_params;
    if (!param.empty() && std::find(earlier.begin(), earlier.end(), param) != earlier.end()) {
      std::string alias = fmt::format("{}_operand{}", param, i);
      while (std::find(taken.begin(), taken.end(), alias) != taken.end()) alias += "_";
      w.line("const {}* __restrict__ {} = {};  // operand {} is operand {} again",
             c_type(node.inputs[i]->type.dtype), alias, param, i,
             std::find(earlier.begin(), earlier.end(), param) - earlier.begin());
      taken.push_back(alias);
      param = alias;
    }
    inner.input_params.push_back(param);
  }
  aliases = w.take();
  return inner;
}

// `const auto f_relu1 = [](float value) -> float { ... };` for an elementwise body node.
void emit_element_lambda(BodyWriter& w, const ir::Node& node) {
  const std::optional<ElementFn> fn = element_fn(node);
  if (!fn)
    throw Error(node.loc.render(), node.describe() + ": codegen cannot fuse op '" + node.op +
                                       "' into a kernel's element computation");
  static const char* const kUnary[] = {"value"};
  static const char* const kBinary[] = {"lhs", "rhs"};
  std::string params;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    params += fmt::format("{}{} {}", i ? ", " : "", compute_type(node.inputs[i]->type.dtype),
                          node.inputs.size() == 1 ? kUnary[i] : kBinary[i]);
  // Summaries often start with the op's name ("relu: ..."): don't say it twice.
  const std::string prefix = node.op + ": ";
  w.comment(node.describe() + ": " +
            (fn->summary.rfind(prefix, 0) == 0 ? fn->summary.substr(prefix.size()) : fn->summary));
  w.open("const auto {} = []({}) -> {}", Names::function(node), params,
         compute_type(node.results[0]->type.dtype));
  for (const std::string& statement : fn->statements) w.line(statement);
  w.close(";");
}

// The shape a body input is read with when broadcast to `loop`: its own (NumPy rules), or for
// the bias of a bias_add, its length at the op's axis.
ir::Shape view_shape(const ir::Value* input, const ir::Node& user, const ir::Shape& loop) {
  if (user.op != "bias_add" || user.inputs[1] != input || user.inputs[0] == input)
    return input->type.shape;
  ir::Shape shape(loop.size(), 1);
  const int axis = axis_of(user);
  shape[static_cast<size_t>(axis)] = input->type.shape[0];
  return shape;
}

// Evaluates `nodes` (elementwise, in order) at flat index `flat` of `loop`: loads each kernel
// input once through its broadcast map, then one `const T v_x = f_x(...)` per node. Returns
// the variable holding the last result.
std::string emit_element_chain(BodyWriter& w, const std::vector<const ir::Node*>& nodes,
                               const ir::Shape& loop, const Names& names,
                               const std::string& flat, const std::string& type) {
  IndexMap map;
  map.dims = loop;
  std::vector<std::pair<const ir::Value*, std::string>> loads;  // input -> operand name
  std::unordered_map<const ir::Value*, std::string> variable;
  for (const ir::Node* node : nodes)
    for (const ir::Value* input : node->inputs) {
      const std::string param = names.param(input);
      if (param.empty() || variable.count(input)) continue;
      map.operands.push_back(broadcast_operand(param, view_shape(input, *node, loop), loop));
      variable[input] = "x_" + param;
      loads.push_back({input, param});
    }
  map = collapse(map);
  emit_index_constants(w, map, type);
  emit_operand_indices(w, map, flat, type);
  for (size_t k = 0; k < loads.size(); ++k) {
    const auto& [input, param] = loads[k];
    w.line("const {} {} = {};", compute_type(input->type.dtype), variable.at(input),
           load(input->type.dtype, param + "[" + operand_index(map, map.operands[k], flat) + "]"));
  }
  std::string last;
  for (const ir::Node* node : nodes) {
    std::string args;
    for (size_t i = 0; i < node->inputs.size(); ++i)
      args += (i ? ", " : "") + variable.at(node->inputs[i]);
    last = Names::variable(node->results[0]);
    w.line("const {} {} = {}({});", compute_type(node->results[0]->type.dtype), last,
           Names::function(*node), args);
    variable[node->results[0]] = last;
  }
  return last;
}

std::string source_list(const std::vector<const ir::Node*>& nodes) {
  std::string text;
  for (const ir::Node* node : nodes) text += (text.empty() ? "" : ", ") + node->op;
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
  for (const ir::Node* node : plan.compute) emit_element_lambda(w, *node);
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  open_grid_stride_loop(w, "i", type, "kCount");
  const std::string last = emit_element_chain(w, plan.compute, loop, names, "i", type);
  w.line("{}[i] = {};", request.output_params[0], store(plan.stored->type.dtype, last));
  w.close();
  KernelSpec spec = grid_stride_spec(count);
  spec.body = w.take();
  spec.note = "fused grid-stride loop (" + source_list(plan.compute) +
              "), intermediates in registers";
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

  std::string aliases;
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
  for (const ir::Node* node : producers) emit_element_lambda(w, *node);
  w.comment(fmt::format("Element i of {}'s input, computed from the kernel's inputs.",
                        reduction.describe()));
  w.open("const auto fused_x = [&]({} i) -> float", type);
  const std::string last = emit_element_chain(w, producers, loop, names, "i", type);
  w.line("return {};", last);
  w.close(";");
  KernelSpec spec = (*emitter)(inner);
  spec.body = aliases + w.take() + spec.body;
  spec.note += "; reads its input through the fused " + source_list(producers);
  return spec;
}

// --- epilogue ------------------------------------------------------------------------------------

// How an epilogue operand is indexed at one GEMM result: the result's channel (a bias), the
// result's own position (a residual) or element 0 (a scalar).
std::string epilogue_index(const ir::Node& node, const ir::Value* operand,
                           const ir::Shape& out) {
  if (node.op == "bias_add") return "channel";
  const ir::Shape& shape = operand->type.shape;
  if (shape == out) return "out_index";
  if (ir::num_elements(shape) == 1) return "0";
  return "channel";  // fuse-conv-bias-relu checked that it is per output channel
}

KernelSpec emit_epilogue(const KernelRequest& request, const BodyPlan& plan) {
  const ir::Node& kernel = request.node;
  const Names names(kernel, request.input_params);
  const ir::Node& anchor = *plan.compute.front();
  KernelRequest inner{anchor, request.kernel_name, {}, request.output_params, {}};
  for (const ir::Value* input : anchor.inputs) inner.input_params.push_back(names.param(input));

  nn::GemmSpec spec = anchor.op == "conv2d"  ? nn::conv2d_gemm(inner)
                      : anchor.op == "dense" ? nn::dense_gemm(inner)
                                             : nn::matmul_gemm(inner);
  BodyWriter prelude(0);
  BodyWriter epilogue(0);
  const ir::Value* running = anchor.results[0];
  const ir::Shape& out = running->type.shape;
  for (size_t n = 1; n < plan.compute.size(); ++n) {
    const ir::Node& node = *plan.compute[n];
    emit_element_lambda(prelude, node);
    std::string args;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ir::Value* input = node.inputs[i];
      std::string arg = "value";
      if (input != running) {
        const std::string param = names.param(input);
        KILN_CHECK(!param.empty()) << node.describe() << " reads a value the epilogue lost";
        arg = load(input->type.dtype, param + "[" + epilogue_index(node, input, out) + "]");
      }
      args += (i ? ", " : "") + arg;
    }
    epilogue.line("value = {}({});  // {}", Names::function(node), args, node.describe());
    running = node.results[0];
  }
  spec.prelude = prelude.take();
  if (!spec.epilogue.empty() && spec.epilogue.back() != '\n') spec.epilogue += '\n';
  spec.epilogue += epilogue.take();
  spec.out_dtype = plan.stored->type.dtype;
  spec.note += "; fused epilogue: " +
               source_list({plan.compute.begin() + 1, plan.compute.end()});
  return nn::emit_gemm(spec, anchor);
}

// A body of one node (and reshapes): that node's own kernel, writing the kernel's result.
KernelSpec emit_single(const KernelRequest& request, const BodyPlan& plan) {
  const ir::Node& node = *plan.compute.front();
  const KernelEmitter* emitter = find_kernel_emitter(node.op);
  if (!emitter)
    throw Error(node.loc.render(), node.describe() + ": codegen has no CUDA kernel for op '" +
                                       node.op + "' yet");
  const Names names(request.node, request.input_params);
  std::string aliases;
  const KernelRequest inner = inner_request(node, request, names, aliases);
  KernelSpec spec = (*emitter)(inner);
  spec.body = aliases + spec.body;
  spec.note += "; the result is stored as " + request.node.results[0]->type.to_string();
  return spec;
}

KernelSpec emit_fused_kernel(const KernelRequest& request) {
  const BodyPlan plan = plan_body(request.node);
  if (plan.compute.size() == 1) return emit_single(request, plan);
  const std::string& kind = ir::kernel_kind(request.node);
  if (kind == ir::kEpilogueKernel) return emit_epilogue(request, plan);
  if (kind == ir::kReduceKernel) return emit_reduce(request, plan);
  return emit_loop(request, plan);
}

}  // namespace

std::vector<std::string> fused_kernel_params(const ir::Node& kernel) {
  std::vector<std::string> params;
  for (const ir::Value* input : kernel.body->inputs) {
    std::string name = "in_" + c_identifier(input->name);
    while (std::find(params.begin(), params.end(), name) != params.end()) name += "_";
    params.push_back(name);
  }
  return params;
}

void add_fused_emitters(EmitterTable& table) {
  table.emplace_back(std::string(ir::kKernelOp), emit_fused_kernel);
}

}  // namespace kiln::codegen
