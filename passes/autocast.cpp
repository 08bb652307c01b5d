// autocast{to=bf16|f16}: the matrix products run in 16 bits, what needs range or precision
// stays f32, and casts go where the two meet (PyTorch's torch.autocast, ahead of time).
//
// Every node falls in one of three classes, by its op:
//   low     conv2d, dense, matmul, attention: their f32 operands are cast to `to`, so their
//           results are `to` too. Tensor cores multiply 16-bit operands and accumulate in f32
//           (codegen/kernels/gemm.cpp); the result is rounded once, when stored.
//   follow  ops that neither sum many terms nor leave 16 bits' range in practice (activations,
//           bias and residual adds, products, pools, views, concat, dropout): they run in the
//           dtype they are given, so a 16-bit activation flows from one GEMM to the next. Given
//           both dtypes, the 16-bit operands are widened (the wider type wins, as in PyTorch).
//   f32     everything else: norms, softmax, losses, reductions, exp/log and the other
//           transcendental math, the optimizer. Their 16-bit operands are widened to f32.
// A cast of the model's reads whatever it is given.
// Graph outputs keep their dtype (a cast back at the end), so the model's interface is the
// same. Only f32 is narrowed: f64 and integer values are left alone.
//
// The pass runs before autodiff (training) and before constant folding (inference): the
// gradient of a cast is the cast back, so the backward GEMMs run in 16 bits as well and every
// parameter's gradient arrives in f32 (master weights stay f32, the optimizer too); folding
// turns the casts of inference weights into 16-bit parameters (half the package). Casts then
// fuse into their neighbours: a GEMM whose operand is a cast reads the f32 tensor and rounds as
// it stages (fuse-conv-bias-relu), a cast after a GEMM or an elementwise op rounds at its store.
// Each cast is logged with the reason under --debug-only=autocast. The pass is one rewrite for
// --pass-fuel: half an autocast would leave dtypes that no cast joins.
#include <fmt/format.h>

#include <map>
#include <optional>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

using ir::DType;
using ir::OpId;

constexpr std::string_view kPass = "autocast";

enum class Class { Low, Follow, F32, Any };

Class class_of(OpId op) {
  switch (op) {
    case OpId::Conv2d: case OpId::Dense: case OpId::Matmul: case OpId::Attention:
      return Class::Low;
    case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Maximum: case OpId::Minimum:
    case OpId::Where: case OpId::BiasAdd: case OpId::Relu: case OpId::LeakyRelu:
    case OpId::Gelu: case OpId::Silu: case OpId::Sigmoid: case OpId::Tanh:
    case OpId::HardSwish: case OpId::HardSigmoid: case OpId::Neg: case OpId::Abs:
    case OpId::Clip: case OpId::Dropout: case OpId::MaxPool2d: case OpId::AvgPool2d:
    case OpId::GlobalAvgPool: case OpId::Reshape: case OpId::Flatten: case OpId::Transpose:
    case OpId::Concat: case OpId::Slice: case OpId::Gather: case OpId::BroadcastTo:
      return Class::Follow;
    case OpId::Cast:  // reads any dtype; its result's is the model's
      return Class::Any;
    default:
      return Class::F32;
  }
}

bool is_16bit(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

class AutocastRewriter {
 public:
  AutocastRewriter(ir::Graph& graph, PassContext& context, DType low)
      : graph_(graph), context_(context), low_(low), names_(graph) {}

  // One sweep in graph order: each node's casts go right before it in the new order, which the
  // graph takes once at the end (linear; inserting each cast in place would be quadratic).
  bool run() {
    // All or nothing: a graph autocast halfway would mix dtypes where no cast joins them.
    if (!context_.take_fuel(kPass, fmt::format("autocast @{} to {}", graph_.name, ir::dtype_name(low_))))
      return false;
    std::vector<DType> original;
    for (const ir::Value* output : graph_.outputs) original.push_back(output->type.dtype);
    std::vector<ir::Node*> nodes;
    for (const auto& node : graph_.nodes()) nodes.push_back(node.get());
    for (ir::Node* node : nodes) {
      if (!node->is_kernel()) visit(*node);
      order_.push_back(node);
    }
    restore_outputs(original);
    if (changed_) graph_.reorder(order_);
    return changed_;
  }

 private:
  // The dtype each float operand of `node` must have, or nullopt to leave the node as it is.
  std::optional<DType> wanted(const ir::Node& node, Class c) const {
    bool any_f32 = false, any_low = false, any_other = false;
    for (const ir::Value* input : node.inputs) {
      const DType dtype = input->type.dtype;
      if (!ir::is_floating(dtype)) continue;
      any_f32 |= dtype == DType::F32;
      any_low |= dtype == low_;
      any_other |= dtype != DType::F32 && dtype != low_;
    }
    if (any_other || (!any_f32 && !any_low)) return std::nullopt;
    switch (c) {
      case Class::Any: return std::nullopt;
      case Class::Low: return low_;
      case Class::F32: return any_low ? std::optional<DType>(DType::F32) : std::nullopt;
      case Class::Follow: return any_low && any_f32 ? std::optional<DType>(DType::F32) : std::nullopt;
    }
    return std::nullopt;
  }

  // Whether `node` reads 16-bit activations and f32 parameters only: then its parameters are
  // narrowed (a conv's separate bias_add stays in 16 bits, as PyTorch's fused bias does).
  bool follows_low_activations(const ir::Node& node) const {
    bool any_low_activation = false;
    for (const ir::Value* input : node.inputs) {
      const DType dtype = input->type.dtype;
      if (!ir::is_floating(dtype)) continue;
      const bool parameter = input->role == ir::ValueRole::Parameter;
      if (dtype == low_ && !parameter) any_low_activation = true;
      else if (dtype != low_ && !(dtype == DType::F32 && parameter)) return false;
    }
    return any_low_activation;
  }

  // Why `node`'s operands are cast (for --debug-only=autocast).
  std::string reason(const ir::Node& node, Class c, bool narrow_parameters) const {
    const std::string_view low = ir::dtype_name(low_);
    switch (c) {
      case Class::Low: return fmt::format("{} runs on {} tensor cores", node.describe(), low);
      case Class::F32: return fmt::format("{} stays f32 (range, long sums)", node.describe());
      case Class::Any: break;
      case Class::Follow:
        return narrow_parameters
                   ? fmt::format("{} reads {} activations: its parameters follow", node.describe(), low)
                   : fmt::format("{} reads {} and f32 activations: the wider wins", node.describe(), low);
    }
    return "";
  }

  // Casts the float operands of `node` to what its class wants and re-infers its results.
  void visit(ir::Node& node) {
    const Class c = class_of(node.op);
    // Narrowing a follow op's parameters (a bias, a scale) keeps its activations 16-bit.
    const bool narrow_parameters = c == Class::Follow && follows_low_activations(node);
    const std::optional<DType> target = narrow_parameters ? std::optional<DType>(low_) : wanted(node, c);
    for (ir::Value*& input : node.inputs) {
      if (!target || !ir::is_floating(input->type.dtype) || input->type.dtype == *target) continue;
      const std::string why = reason(node, c, narrow_parameters);
      input = cast_of(input, *target, &node, why);
    }
    // The operands' dtypes may have changed upstream even where none was cast here. An op whose
    // type rule takes f32 only gets its 16-bit operands widened back.
    try {
      ir::reinfer_results(node);
    } catch (const ir::OpError& error) {
      for (ir::Value*& input : node.inputs) {
        if (input->type.dtype != low_) continue;
        input = cast_of(input, DType::F32, &node,
                        fmt::format("{} takes no {} ({})", node.describe(), ir::dtype_name(low_), error.message));
      }
      reinfer(node);
    }
  }

  // `value` cast to `dtype`, made once, before its first reader that needs it (`user`, whose
  // location it takes; an output's cast takes its producer's). `why` is logged when not empty.
  ir::Value* cast_of(ir::Value* value, DType dtype, const ir::Node* user, const std::string& why) {
    const auto key = std::make_pair(static_cast<const ir::Value*>(value), dtype);
    if (auto found = casts_.find(key); found != casts_.end()) return found->second;
    if (!why.empty())
      context_.debug(kPass, fmt::format("cast %{} {} -> {}: {}", value->name,
                                        ir::dtype_name(value->type.dtype), ir::dtype_name(dtype), why));
    ir::TensorType type = value->type;
    type.dtype = dtype;
    const std::string to(ir::dtype_name(dtype));
    const ir::Node& at = user ? *user : *value->producer;
    ir::Node* cast = graph_.add_node(OpId::Cast, at.name, {value}, {{"to", to}},
                                     {{names_.take(value->name + "." + to), type}}, at.loc);
    order_.push_back(cast);
    changed_ = true;
    return casts_[key] = cast->results[0];
  }

  // An op whose type rule refuses the dtypes autocast gave it is a bug of the class table.
  static void reinfer(ir::Node& node) {
    try {
      ir::reinfer_results(node);
    } catch (const ir::OpError& error) {
      throw InternalError(fmt::format("autocast made {} ill-typed: {}", node.describe(), error.message));
    }
  }

  // Each output whose dtype the pass changed is cast back: the model's interface stays.
  void restore_outputs(const std::vector<DType>& original) {
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      ir::Value*& output = graph_.outputs[i];
      if (output->type.dtype == original[i]) continue;
      context_.debug(kPass, fmt::format("cast output %{} back to {}", output->name, ir::dtype_name(original[i])));
      output = cast_of(output, original[i], nullptr, "");
    }
  }

  ir::Graph& graph_;
  PassContext& context_;
  DType low_;
  NameTable names_;
  std::map<std::pair<const ir::Value*, DType>, ir::Value*> casts_;
  std::vector<const ir::Node*> order_;  // the graph's new order, casts before their readers
  bool changed_ = false;
};

}  // namespace

bool Autocast::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"to"});
  const std::string to = context.option("to", "bf16");
  const std::optional<DType> low = ir::parse_dtype(to);
  if (!low || !is_16bit(*low))
    throw Error("--passes", fmt::format("pass '{}': to={} must be bf16 or f16", kPass, to));
  return AutocastRewriter(graph, context, *low).run();
}

}  // namespace kiln::passes
