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
// Four sweeps over the graph (and one between the first two), in order, each visiting nodes in
// topological order:
//   1. every elementwise/broadcast node joins the kernels of its producers: all loop producers,
//      or the one GEMM producer or epilogue kernel whose epilogue can apply it;
//   1b. a value that must be stored (several readers, or a graph output) and is also cast by
//      some of its readers: the casts join its loop kernel (or elementwise producer) as further
//      results, so one pass stores the value and its 16-bit copies (autocast's casts in a
//      training step, where the f32 value has another reader);
//   2. every reduction takes its first operand's loop producer;
//   3. every reshape-like node joins its producer (a producer of no other kind makes a "single"
//      kernel: its own kernel, storing its result under the reshaped type);
//   4. a float cast that alone reads a result an opaque op's kernel can round as it stores it
//      (ir::stores_rounded_result: the normalization gradients' dx) joins that op's "single"
//      kernel, which stores the result in the cast's type.
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
// its operands allow. Sweep 1b's kernels have several results, but the casts it adds read only
// the value they cast, and nothing joins those kernels afterwards.
//
// Cost: sweep 1 grows loop groups without building kernels (each join appends to its first
// producer's group, and the debug log and fuel see the same joins, named as the kernel built so
// far would be), then makes one kernel per group; users are counted once per sweep. Building a
// kernel at every join would copy the growing body each time: quadratic on a long chain.
#include <fmt/format.h>

#include <tuple>
#include <unordered_map>

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

std::string describe_members(const std::vector<ir::Node*>& members) {
  std::string text;
  for (const ir::Node* member : members) text += (text.empty() ? "" : ", ") + member->describe();
  return text;
}

class ElementwiseFusion {
 public:
  ElementwiseFusion(ir::Graph& graph, PassContext& context) : graph_(graph), context_(context) {}

  bool run() {
    count_users();
    in_sweep1_ = true;
    for (ir::Node* node : snapshot()) fuse_into_producers(*node);
    in_sweep1_ = false;
    make_loop_kernels();
    fuse_casts_of_stored_values();
    for (ir::Node* node : snapshot())
      if (!node->is_kernel() && node->def && node->def->kind == ir::OpKind::Reduce)
        fuse_into_reduction(*node);
    for (ir::Node* node : snapshot())
      if (!node->is_kernel() && ir::is_reshape_like(node->op)) fuse_reshape(*node);
    for (ir::Node* node : snapshot())
      if (!node->is_kernel() && node->op == ir::OpId::Cast) fuse_rounded_store(*node);
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

  // A loop kernel of sweep 1 in the making: its members in the order make_kernel expands them
  // (kernel members stand for their bodies), and enough of its op list to name it: "add_relu",
  // "sub_mul_exp_add", "sub_mul_etc_relu" (the ops in order; past four, two, etc, the last).
  struct Group {
    std::vector<ir::Node*> members;
    std::vector<std::string> head;  // the first ops, at most 4
    std::string last;               // the last op
    size_t ops = 0;
    std::string name() const {
      std::vector<std::string> shown = head;
      if (ops > 4) shown = {head[0], head[1], "etc", last};
      std::string text;
      for (const std::string& op : shown) text += (text.empty() ? "" : "_") + op;
      return text;
    }
    void append_ops(const std::vector<std::string>& ops_head, const std::string& ops_last,
                    size_t count) {
      for (const std::string& op : ops_head)
        if (head.size() < 4) head.push_back(op);
      last = ops_last;
      ops += count;
    }
  };

  // Users of every value (nodes that read it), counted once: graph.users() scans the graph.
  void count_users() {
    use_count_.clear();
    for (const auto& node : graph_.nodes()) {
      std::vector<const ir::Value*> seen;
      for (const ir::Value* input : node->inputs) {
        if (std::find(seen.begin(), seen.end(), input) != seen.end()) continue;
        seen.push_back(input);
        ++use_count_[input];
      }
    }
  }

  // fusion::stored_value_reason, from the counts.
  std::optional<std::string> stored_reason(const ir::Value* value) const {
    if (graph_.is_output(value)) return ref(value) + " is a graph output, so it is stored";
    auto it = use_count_.find(value);
    const size_t users = it == use_count_.end() ? 0 : it->second;
    if (users != 1)
      return fmt::format("producer has {} users (the value is stored once and each reads it)", users);
    return std::nullopt;
  }

  // A producer of sweep 1 as the log names it: its pending group's kernel, or itself.
  std::string describe_component(ir::Node* producer) const {
    auto it = group_of_.find(producer);
    if (it != group_of_.end()) return "kernel '" + groups_[it->second].name() + "'";
    return producer->describe();
  }

  // Sweep 1's join of `producers` (in operand order) and `node` into one loop group.
  void join_loop(const std::vector<ir::Node*>& producers, ir::Node& node) {
    std::string text;
    for (ir::Node* producer : producers) text += (text.empty() ? "" : ", ") + describe_component(producer);
    text += ", " + node.describe();
    // The group the first producer is in takes the others (or a new one starts).
    size_t target;
    if (auto it = group_of_.find(producers[0]); it != group_of_.end()) {
      target = it->second;
    } else {
      target = groups_.size();
      groups_.emplace_back();
    }
    Group preview = groups_[target].members.empty() ? Group{} : Group{{}, groups_[target].head,
                                                                      groups_[target].last,
                                                                      groups_[target].ops};
    std::vector<std::pair<ir::Node*, size_t>> absorbed;  // producer, its group (or npos)
    for (ir::Node* producer : producers) {
      auto it = group_of_.find(producer);
      const size_t group = it == group_of_.end() ? std::string::npos : it->second;
      if (group == target && !groups_[target].members.empty()) continue;
      absorbed.push_back({producer, group});
      if (group != std::string::npos) {
        const Group& other = groups_[group];
        preview.append_ops(other.head, other.last, other.ops);
      } else {
        const auto [ops_head, ops_last, count] = ops_of(*producer);
        preview.append_ops(ops_head, ops_last, count);
      }
    }
    preview.append_ops({ir::to_string(node.op)}, ir::to_string(node.op), 1);
    const std::string what = fmt::format("fuse {} into {} kernel {}", text, ir::kLoopKernel,
                                         preview.name());
    if (!context_.take_fuel(kPass, what)) {
      if (groups_[target].members.empty()) groups_.pop_back();
      return;
    }
    Group& into = groups_[target];
    for (const auto& [producer, group] : absorbed) {
      if (group == std::string::npos) {
        into.members.push_back(producer);
        group_of_[producer] = target;
        continue;
      }
      for (ir::Node* member : groups_[group].members) {
        into.members.push_back(member);
        group_of_[member] = target;
      }
      groups_[group].members.clear();
    }
    into.members.push_back(&node);
    group_of_[&node] = target;
    into.head = preview.head;
    into.last = preview.last;
    into.ops = preview.ops;
    changed_ = true;
  }

  // The op list of a single producer: itself, or a kernel's body.
  static std::tuple<std::vector<std::string>, std::string, size_t> ops_of(const ir::Node& node) {
    if (!node.is_kernel()) return {{ir::to_string(node.op)}, ir::to_string(node.op), 1};
    std::vector<std::string> head;
    for (const auto& inner : node.body->nodes())
      if (head.size() < 4) head.push_back(ir::to_string(inner->op));
    return {head, ir::to_string(node.body->nodes().back()->op), node.body->nodes().size()};
  }

  void make_loop_kernels() {
    std::vector<ir::KernelGroup> kernels;
    for (const Group& group : groups_)
      if (group.members.size() >= 2) kernels.push_back({group.members, group.name(), ir::kLoopKernel});
    ir::make_kernels(graph_, kernels);
    groups_.clear();
    group_of_.clear();
  }

  // Sweep 1b. A value stored because several nodes read it, some of them through a cast
  // (autocast's 16-bit copy for the convolution that reads it, where the f32 value is also a
  // relu's gradient mask): the producer's loop stores the value and each cast of it, one read
  // and one launch fewer per cast. A cast reads nothing else, so no path leaves the kernel and
  // comes back; nothing joins these kernels afterwards (sweeps 2 and 3 take only producers
  // with one result).
  void fuse_casts_of_stored_values() {
    const fusion::Users users(graph_);
    std::vector<ir::KernelGroup> kernels;
    std::unordered_map<const ir::Node*, size_t> taken;  // node -> its group
    for (const auto& owned : graph_.nodes()) {
      ir::Node* producer = owned.get();
      if (taken.count(producer) || producer->results.size() != 1) continue;
      const ir::Value* value = producer->results[0];
      if (!fusion::stored_value_reason(graph_, value, users.of(value).size()))
        continue;  // one reader: sweep 1 decided
      std::vector<ir::Node*> casts;
      for (ir::Node* user : users.of(value)) {
        if (user->is_kernel() || user->op != ir::OpId::Cast || taken.count(user)) continue;
        if (auto reason = sibling_cast_refusal(*producer, *user, users)) {
          refuse(value, *user, *reason);
          continue;
        }
        casts.push_back(user);
      }
      if (casts.empty()) continue;
      std::vector<ir::Node*> members = {producer};
      members.insert(members.end(), casts.begin(), casts.end());
      const std::string name = base_name(*producer) + "_cast";
      const std::string what = fmt::format("fuse {} into {} kernel {}, which stores {} and its "
                                           "cast{}", describe_members(members), ir::kLoopKernel,
                                           name, ref(value), casts.size() > 1 ? "s" : "");
      if (!context_.take_fuel(kPass, what)) continue;
      for (ir::Node* member : members) taken[member] = kernels.size();
      kernels.push_back({members, name, ir::kLoopKernel});
    }
    if (kernels.empty()) return;
    ir::make_kernels(graph_, kernels);
    changed_ = true;
  }

  // Why `producer`'s loop cannot also store `cast` of its result (read by other nodes too).
  std::optional<std::string> sibling_cast_refusal(const ir::Node& producer, const ir::Node& cast,
                                                  const fusion::Users& users) const {
    if (is_kind(producer, ir::kEpilogueKernel) || fusion::is_gemm(producer))
      return "a GEMM epilogue stores one result";
    if (!is_kind(producer, ir::kLoopKernel) && not_loop_op(producer))
      return producer.describe() + " is not an elementwise loop, which could store the cast too";
    if (ends_in_reshape(producer)) return producer.describe() + " ends in a reshape";
    // A cast with one reader that sweeps 2 or 3 fuse (a reduction's first operand, a reshape)
    // is better off there: the reduction recomputes it as it loads, the reshape is free.
    const std::vector<ir::Node*>& readers = users.of(cast.results[0]);
    if (readers.size() == 1 && !graph_.is_output(cast.results[0]) && !readers[0]->is_kernel()) {
      const ir::Node& reader = *readers[0];
      if (ir::is_reshape_like(reader.op))
        return reader.describe() + " reshapes the cast, in its kernel";
      if (reader.def && reader.def->kind == ir::OpKind::Reduce && reader.inputs[0] == cast.results[0])
        return reader.describe() + " computes the cast as it loads it";
    }
    return std::nullopt;
  }

  // The producer of `value` if it may pass `value` to `consumer` in registers.
  ir::Node* joinable_producer(const ir::Value* value, const ir::Node& consumer) {
    ir::Node* producer = value->producer;
    if (producer == nullptr) return nullptr;  // a graph input or parameter: read from memory
    if (auto reason = in_sweep1_ ? stored_reason(value) : fusion::stored_value_reason(graph_, value)) {
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
      if (std::find_if(loop_producers.begin(), loop_producers.end(), [&](ir::Node* other) {
            return other == producer || same_group(other, producer);
          }) != loop_producers.end())
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
        if (fuse({producer, &node}, name, ir::kEpilogueKernel)) count_users();
        return;
      }
      if (is_kind(*producer, ir::kLoopKernel) || !not_loop_op(*producer)) {
        loop_producers.push_back(producer);
        continue;
      }
      refuse(operand, node, producer->describe() + " is not elementwise, a loop or an epilogue");
    }
    if (loop_producers.empty()) return;
    join_loop(loop_producers, node);
  }

  bool same_group(ir::Node* a, ir::Node* b) const {
    auto ia = group_of_.find(a);
    auto ib = group_of_.find(b);
    return ia != group_of_.end() && ib != group_of_.end() && ia->second == ib->second;
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

  // Sweep 4. A cast that is the only reader of an opaque op's result, where the op's kernel
  // can round that result as it stores it (ir::stores_rounded_result: a batch-norm gradient's
  // dx, which autocast's cast brings to bf16 for the convolution gradients): the op's "single"
  // kernel stores the cast's value, and the f32 tensor is never written.
  void fuse_rounded_store(ir::Node& cast) {
    const ir::Value* operand = cast.inputs[0];
    ir::Node* producer = operand->producer;
    if (producer == nullptr || producer->is_kernel() || !not_loop_op(*producer))
      return;  // sweeps 1-3 decided (a graph input, a loop's value, a kernel's)
    const auto at = std::find(producer->results.begin(), producer->results.end(), operand);
    const size_t index = static_cast<size_t>(at - producer->results.begin());
    if (!ir::stores_rounded_result(producer->op, index)) return;  // sweep 1 gave the reason
    if (auto reason = fusion::stored_value_reason(graph_, operand)) {
      refuse(operand, cast, *reason);
      return;
    }
    if (!ir::is_floating(operand->type.dtype) || !ir::is_floating(cast.results[0]->type.dtype)) {
      refuse(operand, cast, "the kernel rounds to float types only");
      return;
    }
    // The op's kernel writes every result: each other one must be a result of the kernel.
    for (const ir::Value* other : producer->results)
      if (other != operand && !graph_.is_output(other) && graph_.users(other).empty()) {
        refuse(operand, cast, fmt::format("nothing reads {}, which {}'s kernel writes", ref(other),
                                          producer->describe()));
        return;
      }
    fuse({producer, &cast}, base_name(*producer) + "_cast", ir::kSingleKernel);
  }

  ir::Graph& graph_;
  PassContext& context_;
  bool changed_ = false;
  bool in_sweep1_ = false;
  std::unordered_map<const ir::Value*, size_t> use_count_;
  std::vector<Group> groups_;
  std::unordered_map<const ir::Node*, size_t> group_of_;
};

}  // namespace

bool FuseElementwise::run(ir::Graph& graph, PassContext& context) {
  return ElementwiseFusion(graph, context).run();
}

}  // namespace kiln::passes
