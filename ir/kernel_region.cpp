#include "ir/kernel_region.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::ir {

bool is_kernel_kind(std::string_view kind) {
  return kind == kEpilogueKernel || kind == kLoopKernel || kind == kReduceKernel ||
         kind == kSingleKernel || kind == kMultiUpdateKernel;
}

const std::string& kernel_kind(const Node& kernel) {
  KILN_CHECK(kernel.is_kernel()) << kernel.describe() << " is not a kernel";
  const auto it = kernel.attrs.find("kind");
  KILN_CHECK(it != kernel.attrs.end() && std::holds_alternative<std::string>(it->second))
      << kernel.describe() << " has no kind";
  return std::get<std::string>(it->second);
}

bool is_reshape_like(OpId op) { return op == OpId::Reshape || op == OpId::Flatten; }

namespace {

// The members with kernels replaced by their body nodes, in order.
std::vector<const Node*> expand(const std::vector<Node*>& members) {
  std::vector<const Node*> nodes;
  for (const Node* member : members) {
    if (!member->is_kernel()) {
      nodes.push_back(member);
      continue;
    }
    for (const auto& inner : member->body->nodes()) nodes.push_back(inner.get());
  }
  return nodes;
}

}  // namespace

Node* make_kernel(Graph& graph, const std::vector<Node*>& members, const std::string& name,
                  std::string_view kind) {
  KILN_CHECK(!members.empty()) << "make_kernel: no members";
  KILN_CHECK(is_kernel_kind(kind)) << "make_kernel: unknown kind " << kind;
  const std::unordered_set<const Node*> member_set(members.begin(), members.end());

  // A kernel member's body reads its own inputs; they stand for the member's operands.
  std::unordered_map<const Value*, const Value*> outer_of;
  for (const Node* member : members)
    if (member->is_kernel())
      for (size_t i = 0; i < member->inputs.size(); ++i)
        outer_of[member->body->inputs[i]] = member->inputs[i];
  // And a kernel member's body outputs are the member's results.
  std::unordered_map<const Value*, const Value*> inner_result_of;
  for (const Node* member : members)
    if (member->is_kernel())
      for (size_t i = 0; i < member->results.size(); ++i)
        inner_result_of[member->body->outputs[i]] = member->results[i];

  auto body = std::make_unique<Graph>();
  body->name = name;
  std::unordered_map<const Value*, Value*> body_value;  // outer value -> body value
  std::vector<Value*> operands;
  auto body_operand = [&](const Value* read) -> Value* {
    if (auto it = outer_of.find(read); it != outer_of.end()) read = it->second;
    if (auto it = body_value.find(read); it != body_value.end()) return it->second;
    Value* input = body->add_input(read->name, read->type, read->loc);
    body_value[read] = input;
    operands.push_back(const_cast<Value*>(read));
    return input;
  };
  for (const Node* node : expand(members)) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs) inputs.push_back(body_operand(input));
    std::vector<std::pair<std::string, TensorType>> results;
    for (const Value* result : node->results) results.push_back({result->name, result->type});
    Node* copy = body->add_node(node->op, node->name, std::move(inputs), node->attrs, results,
                                node->loc);
    for (size_t i = 0; i < node->results.size(); ++i) {
      const Value* outer = node->results[i];
      if (auto it = inner_result_of.find(outer); it != inner_result_of.end()) outer = it->second;
      body_value[outer] = copy->results[i];
      copy->results[i]->loc = node->results[i]->loc;
    }
  }

  // Results: member results that something outside the group reads, or the graph returns.
  // (One pass over the graph: asking graph.users() for each result would cost the graph's size
  // per member.)
  std::unordered_set<const Value*> read_outside;
  for (const auto& node : graph.nodes())
    if (!member_set.count(node.get()))
      for (const Value* input : node->inputs) read_outside.insert(input);
  std::vector<Value*> escaping;
  for (Node* member : members)
    for (Value* result : member->results)
      if (graph.is_output(result) || read_outside.count(result)) escaping.push_back(result);
  KILN_CHECK(!escaping.empty()) << "make_kernel: the group's results are all unused";

  std::vector<std::pair<std::string, TensorType>> result_types;
  for (Value* result : escaping) {
    result_types.push_back({result->name, result->type});
    Value* inner = body_value.at(result);
    body->outputs.push_back(inner);
    body->output_names.push_back(inner->name);
  }
  // The kernel's results take over the names of the values they replace.
  for (Node* member : members)
    for (Value* result : member->results) result->name += ".fused";
  // The kernel takes the place of the last member: every operand is defined before some
  // member, so before it, and the one result that leaves the group is read after it.
  const Node* last = nullptr;
  for (const auto& node : graph.nodes())
    if (member_set.count(node.get())) last = node.get();
  AttrMap attrs{{"kind", std::string(kind)}};
  Node* kernel = graph.insert_node_before(last, OpId::Kernel, name, operands,
                                          std::move(attrs), result_types, last->loc);
  kernel->body = std::move(body);
  for (size_t i = 0; i < escaping.size(); ++i) {
    kernel->results[i]->loc = escaping[i]->loc;
    graph.replace_all_uses(escaping[i], kernel->results[i]);
  }
  graph.erase_nodes([&](const Node& node) { return member_set.count(&node) > 0; });
  graph.sort_topologically();  // a no-op unless several results leave the group
  return kernel;
}

}  // namespace kiln::ir
