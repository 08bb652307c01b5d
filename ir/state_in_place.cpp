// Training state updated in place (ir/memory_plan.h, MemoryPlan::state_in_place).
//
// A training step returns the next value of each parameter P it updates as the graph output
// "next.P" (passes/append_optimizer.cpp). Without more, a backend computes next.P into a buffer
// of its own and copies it over P after the step: for ResNet-50 with Adam (161 parameters, 322
// moments, 106 running statistics, the step counter), 307 MB of buffers and 590
// device-to-device copies per step. The node
// that computes next.P may write it over P instead when nothing can tell the difference:
//
//   - every other reader of P runs before it (P is not read after it writes), and P is not
//     also a graph output (which is read after the run);
//   - it reads P only at the index it writes: an optimizer update reading P as the operand
//     whose result next.P is (the parameter, or one of its states), on its own or in a
//     multi_update kernel, where one thread reads element i of every operand of a tensor,
//     then writes element i of its results; or an elementwise or broadcasting op or a loop
//     kernel whose result has P's type (the step counter's add).
//
// Anything else keeps its buffer and the copy (a reduction, a GEMM, a kernel that reads the
// parameter through another operand too). Batch norm's running averages qualify: they are
// elementwise in the running statistic and the batch's (passes/batch_norm_training.h).
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "ir/kernel_region.h"
#include "ir/memory_plan.h"
#include "ir/op_registry.h"
#include "ir/optimizer_operands.h"

namespace kiln::ir {
namespace {

constexpr std::string_view kNextPrefix = "next.";

bool is_update(OpId op) {
  return op == OpId::SgdUpdate || op == OpId::AdamUpdate || op == OpId::AdamwUpdate;
}

// The operand of update `node` that its result `result_index` is the next value of: the
// parameter for result 0, state j for result 1 + j.
int updated_operand(const Node& node, int result_index) {
  if (result_index == 0) return 0;
  return update_operands(node).state + result_index - 1;
}

// Why update `node` may not write its result `result_index` over `operand`, which it reads;
// nullopt when it reads `operand` only as the tensor that result updates.
std::optional<std::string> update_refusal(const Node& node, int result_index, const Value* operand) {
  const int updated = updated_operand(node, result_index);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] != operand || static_cast<int>(i) == updated) continue;
    return fmt::format("{} also reads it as operand {}", node.describe(), i);
  }
  return std::nullopt;
}

// Why `node`, which computes `result` and reads `param` (or not), may not write `result` over
// `param`'s storage; nullopt when it may.
std::optional<std::string> node_refusal(const Node& node, const Value* result, const Value* param) {
  const bool reads = std::find(node.inputs.begin(), node.inputs.end(), param) != node.inputs.end();
  if (!reads) return std::nullopt;  // it never reads P: writing over it is invisible
  const int result_index = result->result_index;
  if (is_update(node.op)) return update_refusal(node, result_index, param);
  if (node.is_kernel() && kernel_kind(node) == kMultiUpdateKernel) {
    // The body's update that computes the result, and the body's stand-in for the operand.
    const Graph& body = *node.body;
    const Value* inner_result = body.outputs.at(static_cast<size_t>(result_index));
    const size_t operand_index = static_cast<size_t>(
        std::find(node.inputs.begin(), node.inputs.end(), param) - node.inputs.begin());
    const Value* inner_param = body.inputs.at(operand_index);
    for (const Node* reader : body.users(inner_param)) {
      if (reader != inner_result->producer)
        return fmt::format("{} reads it in {} too", node.describe(), reader->describe());
    }
    if (!is_update(inner_result->producer->op))
      return fmt::format("{} computes it with {}", node.describe(), inner_result->producer->describe());
    return update_refusal(*inner_result->producer, inner_result->result_index, inner_param);
  }
  const bool loop = node.is_kernel() && kernel_kind(node) == kLoopKernel;
  // An elementwise or broadcasting op reads an operand of its result's type at the index it
  // writes (only smaller, broadcast operands are read elsewhere).
  const bool elementwise =
      node.def && (node.def->kind == OpKind::Elementwise || node.def->kind == OpKind::Broadcast);
  if ((loop || elementwise) && node.results.size() == 1 && param->type == result->type)
    return std::nullopt;
  return fmt::format("{} is not an elementwise update of it", node.describe());
}

}  // namespace

const Value* state_parameter(const Graph& graph, size_t output_index) {
  const std::string& name = graph.output_name(output_index);
  if (name.rfind(kNextPrefix, 0) != 0) return nullptr;
  const Value* value = graph.find_value(name.substr(kNextPrefix.size()));
  return value != nullptr && value->role == ValueRole::Parameter ? value : nullptr;
}

std::unordered_map<const Value*, const Value*> choose_state_in_place(const Graph& graph,
                                                                     const PlanMemoryHooks& hooks) {
  std::unordered_map<const Node*, size_t> position;
  std::unordered_map<const Value*, size_t> last_read;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    position[graph.nodes()[i].get()] = i;
    for (const Value* input : graph.nodes()[i]->inputs) last_read[input] = i;
  }
  std::unordered_map<const Value*, int> output_count;
  for (const Value* output : graph.outputs) ++output_count[output];

  std::unordered_map<const Value*, const Value*> in_place;
  const auto log = [&](const std::string& message) {
    if (hooks.log) hooks.log(message);
  };
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    const Value* param = state_parameter(graph, o);
    if (param == nullptr) continue;
    const Value* next = graph.outputs[o];
    const std::string pair = fmt::format("%{} over %{}", next->name, param->name);
    const auto refuse = [&](const std::string& why) { log(fmt::format("state not in place: {}: {}", pair, why)); };
    if (next->producer == nullptr) {
      refuse("it is not computed by a node");
      continue;
    }
    if (output_count[next] > 1 || output_count.count(param) > 0) {
      refuse("the graph returns it or the parameter more than once");
      continue;
    }
    const Node& node = *next->producer;
    const auto last = last_read.find(param);
    if (last != last_read.end() && last->second > position.at(&node)) {
      refuse(fmt::format("%{} is still read later, by {}", param->name, graph.nodes()[last->second]->describe()));
      continue;
    }
    if (auto why = node_refusal(node, next, param)) {
      refuse(*why);
      continue;
    }
    const std::string what = fmt::format("state in place: {} writes {} ({} B, no copy)",
                                         node.describe(), pair, tensor_bytes(next->type));
    if (hooks.allow_in_place && !hooks.allow_in_place(what)) continue;
    if (!hooks.allow_in_place) log(what);
    in_place[next] = param;
  }
  return in_place;
}

}  // namespace kiln::ir
