// fuse-elementwise: elementwise chains become one kernel; elementwise producers fuse into the
// reductions that read them; reshapes fuse into their producer.
//
// Legality follows the op-kind lattice of the registry (ir/op_registry.h, after TVM's FuseOps):
//   elementwise, broadcast  fuse with each other into a "loop" kernel, and as consumers into a
//                           conv2d/dense/matmul epilogue (out_elementwise_fusable);
//   reduce                  takes one chain of elementwise producers on its first operand
//                           ("reduce" kernel: the producers are recomputed at each load);
//   injective               only the reshape-like ops (reshape, flatten, squeeze, unsqueeze)
//                           fuse, into their producer of any kind: they do not move bytes;
//   opaque                  never fuses.
// Three sweeps over the graph, in order, each visiting nodes in topological order:
//   1. every elementwise/broadcast node joins the kernels of its producers: all loop producers,
//      or the one GEMM producer or epilogue kernel whose epilogue can apply it;
//   2. every reduction takes its first operand's loop producer;
//   3. every reshape-like node joins its producer (a producer of no other kind makes a "single"
//      kernel: its own kernel, storing its result under the reshaped type).
// A producer joins only when its value has exactly one user and is not a graph output, and a
// loop keeps one iteration space: the consumer's result must have the producer's shape (a
// producer broadcast to a larger result would be recomputed per element). batch_norm (five
// operands) and training dropout (random numbers) stay alone.
//
// Multi-consumer values: the boundary is kept. A value read by two nodes is stored once and
// each consumer's kernel reads it; duplicating the producer into every consumer would trade
// one store and n loads for n recomputations, which wins only for very cheap producers, and
// would make the memory planner's figures depend on a cost model. Every refusal is logged
// under --debug-only=fuse-elementwise.
//
// Safety: every value inside a group except the group's result has its only user inside the
// group, so no path leaves a group and comes back; make_kernel may place the kernel anywhere
// its operands allow.
#include <fmt/format.h>

#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-elementwise";
using fusion::ref;

bool is_kind(const ir::Node& node, std::string_view kind) {
  return node.is_kernel() && ir::kernel_kind(node) == kind;
}

// Why `node` cannot be evaluated per element inside a loop or epilogue; nullopt if it can.
std::optional<std::string> not_loop_op(const ir::Node& node) {
  if (node.is_kernel()) return node.describe() + " is a fused kernel";
  if (!node.def || (node.def->kind != ir::OpKind::Elementwise &&
                    node.def->kind != ir::OpKind::Broadcast))
    return fmt::format("{} is {}, not elementwise", node.op,
                       node.def ? ir::op_kind_name(node.def->kind) : "unknown");
  if (node.op == ir::OpId::BatchNorm) return "batch_norm has five operands (fold-batch-norm folds it)";
  if (node.op == ir::OpId::Dropout) {
    const auto training = node.attrs.find("training");
    if (training != node.attrs.end() && std::get<bool>(training->second))
      return "dropout in training mode draws random numbers";
  }
  return std::nullopt;
}

// A kernel whose body ends in a reshape computes a different shape than it stores.
bool ends_in_reshape(const ir::Node& node) {
  return node.is_kernel() && ir::is_reshape_like(node.body->nodes().back()->op);
}

// The first node of an epilogue kernel's body (its GEMM), or the node itself.
const ir::Node& gemm_of(const ir::Node& producer) {
  return producer.is_kernel() ? *producer.body->nodes().front() : producer;
}

std::string base_name(const ir::Node& node) {
  return node.is_kernel() ? node.name : ir::to_string(node.op);
}

// "add_relu", "sub_mul_exp_add", "sub_mul_etc_relu": the ops of a loop, in order.
std::string loop_name(const std::vector<ir::Node*>& members) {
  std::vector<std::string> ops;
  for (const ir::Node* member : members) {
    if (!member->is_kernel()) {
      ops.push_back(ir::to_string(member->op));
      continue;
    }
    for (const auto& inner : member->body->nodes()) ops.push_back(ir::to_string(inner->op));
  }
  if (ops.size() > 4) ops = {ops[0], ops[1], "etc", ops.back()};
  std::string name;
  for (const std::string& op : ops) name += (name.empty() ? "" : "_") + op;
  return name;
}

std::string describe_members(const std::vector<ir::Node*>& members) {
  std::string text;
  for (const ir::Node* member : members) text += (text.empty() ? "" : ", ") + member->describe();
  return text;
}

class ElementwiseFusion {
 public:
  ElementwiseFusion(ir::Graph& graph, PassContext& context) : graph_(graph), context_(context) {}

  bool run() {
    for (ir::Node* node : snapshot()) fuse_into_producers(*node);
    for (ir::Node* node : snapshot())
      if (!node->is_kernel() && node->def && node->def->kind == ir::OpKind::Reduce)
        fuse_into_reduction(*node);
    for (ir::Node* node : snapshot())
      if (!node->is_kernel() && ir::is_reshape_like(node->op)) fuse_reshape(*node);
    return changed_;
  }

 private:
  std::vector<ir::Node*> snapshot() const {
    std::vector<ir::Node*> nodes;
    for (const auto& node : graph_.nodes()) nodes.push_back(node.get());
    return nodes;
  }

  void refuse(const ir::Value* value, const ir::Node& consumer, const std::string& reason) {
    context_.debug(kPass, fmt::format("not fusing {} into {}: {}", ref(value), ref(consumer), reason));
  }

  bool fuse(const std::vector<ir::Node*>& members, const std::string& name, std::string_view kind) {
    const std::string what = fmt::format("fuse {} into {} kernel {}", describe_members(members),
                                         kind, name);
    if (!context_.take_fuel(kPass, what)) return false;
    ir::make_kernel(graph_, members, name, kind);
    changed_ = true;
    return true;
  }

  // The producer of `value` if it may pass `value` to `consumer` in registers.
  ir::Node* joinable_producer(const ir::Value* value, const ir::Node& consumer) {
    ir::Node* producer = value->producer;
    if (producer == nullptr) return nullptr;  // a graph input or parameter: read from memory
    if (auto reason = fusion::stored_value_reason(graph_, value)) {
      refuse(value, consumer, *reason);
      return nullptr;
    }
    if (producer->results.size() != 1) {
      refuse(value, consumer, producer->describe() + " has several results");
      return nullptr;
    }
    return producer;
  }

  // Sweep 1.
  void fuse_into_producers(ir::Node& node) {
    if (not_loop_op(node)) return;
    std::vector<ir::Node*> loop_producers;
    for (const ir::Value* operand : node.inputs) {
      ir::Node* producer = joinable_producer(operand, node);
      if (!producer) continue;
      if (std::find(loop_producers.begin(), loop_producers.end(), producer) != loop_producers.end())
        continue;
      if (ends_in_reshape(*producer)) {
        refuse(operand, node, producer->describe() + " ends in a reshape");
        continue;
      }
      if (node.results[0]->type.shape != operand->type.shape) {
        refuse(operand, node, fmt::format("{} would be recomputed for each element of the "
                                          "broadcast result {}", ref(operand),
                                          node.results[0]->type.to_string()));
        continue;
      }
      if (is_kind(*producer, ir::kEpilogueKernel) || fusion::is_gemm(*producer)) {
        const ir::Node& gemm = gemm_of(*producer);
        if (auto reason = fusion::epilogue_refusal(gemm, operand, node, false)) {
          refuse(operand, node, *reason);
          continue;
        }
        const std::string name =
            base_name(*producer) + "_" + fusion::epilogue_step_name(gemm, operand, node);
        fuse({producer, &node}, name, ir::kEpilogueKernel);
        return;
      }
      if (is_kind(*producer, ir::kLoopKernel) || !not_loop_op(*producer)) {
        loop_producers.push_back(producer);
        continue;
      }
      refuse(operand, node, producer->describe() + " is not elementwise, a loop or an epilogue");
    }
    if (loop_producers.empty()) return;
    std::vector<ir::Node*> members = loop_producers;
    members.push_back(&node);
    fuse(members, loop_name(members), ir::kLoopKernel);
  }

  // Sweep 2.
  void fuse_into_reduction(ir::Node& reduction) {
    const ir::Value* operand = reduction.inputs[0];
    ir::Node* producer = joinable_producer(operand, reduction);
    if (!producer) return;
    if (!is_kind(*producer, ir::kLoopKernel) && not_loop_op(*producer)) {
      refuse(operand, reduction, producer->describe() + " is not an elementwise loop");
      return;
    }
    if (ends_in_reshape(*producer)) {
      refuse(operand, reduction, producer->describe() + " ends in a reshape");
      return;
    }
    if (!ir::is_floating(operand->type.dtype)) {
      refuse(operand, reduction, "a reduction reads fused producers as float; " + ref(operand) +
                                     " is " + std::string(ir::dtype_name(operand->type.dtype)));
      return;
    }
    fuse({producer, &reduction}, base_name(*producer) + "_" + ir::to_string(reduction.op), ir::kReduceKernel);
  }

  // Sweep 3.
  void fuse_reshape(ir::Node& reshape) {
    const ir::Value* operand = reshape.inputs[0];
    ir::Node* producer = joinable_producer(operand, reshape);
    if (!producer) return;
    std::string_view kind = fusion::is_gemm(*producer) ? ir::kEpilogueKernel : ir::kSingleKernel;
    if (producer->is_kernel())
      kind = ir::kernel_kind(*producer);
    else if (producer->def && producer->def->kind == ir::OpKind::Reduce)
      kind = ir::kReduceKernel;
    else if (!not_loop_op(*producer))
      kind = ir::kLoopKernel;
    fuse({producer, &reshape}, base_name(*producer) + "_" + ir::to_string(reshape.op), kind);
  }

  ir::Graph& graph_;
  PassContext& context_;
  bool changed_ = false;
};

}  // namespace

bool FuseElementwise::run(ir::Graph& graph, PassContext& context) {
  return ElementwiseFusion(graph, context).run();
}

}  // namespace kiln::passes
