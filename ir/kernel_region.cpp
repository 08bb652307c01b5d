#include "ir/kernel_region.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::ir {

bool is_kernel_kind(std::string_view kind) {
  return kind == kEpilogueKernel || kind == kLoopKernel || kind == kReduceKernel ||
         kind == kSingleKernel || kind == kMultiUpdateKernel || kind == kAttentionKernel;
}

const std::string& kernel_kind(const Node& kernel) {
  KILN_CHECK(kernel.is_kernel()) << kernel.describe() << " is not a kernel";
  const auto it = kernel.attrs.find("kind");
  KILN_CHECK(it != kernel.attrs.end() && std::holds_alternative<std::string>(it->second))
      << kernel.describe() << " has no kind";
  return std::get<std::string>(it->second);
}

bool is_reshape_like(OpId op) { return op == OpId::Reshape || op == OpId::Flatten; }

bool stores_rounded_result(OpId op, size_t index) {
  return (op == OpId::BatchNormTrainGrad || op == OpId::LayerNormGrad) && index == 0;
}

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

// One group's kernel in the making: its body, operands and the member results that leave it.
struct BuiltKernel {
  std::unique_ptr<Graph> body;
  std::vector<Value*> operands;
  std::vector<Value*> escaping;
};

// Copies the group's members (kernels among them inlined) into a body graph. `escapes` says
// which member results something outside the group reads (or the graph returns).
BuiltKernel build_kernel(const KernelGroup& group,
                         const std::unordered_set<const Value*>& escapes) {
  const std::vector<Node*>& members = group.members;
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

  BuiltKernel built;
  built.body = std::make_unique<Graph>();
  Graph& body = *built.body;
  body.name = group.name;
  std::unordered_map<const Value*, Value*> body_value;  // outer value -> body value
  auto body_operand = [&](const Value* read) -> Value* {
    if (auto it = outer_of.find(read); it != outer_of.end()) read = it->second;
    if (auto it = body_value.find(read); it != body_value.end()) return it->second;
    Value* input = body.add_input(read->name, read->type, read->loc);
    body_value[read] = input;
    built.operands.push_back(const_cast<Value*>(read));
    return input;
  };
  for (const Node* node : expand(members)) {
    std::vector<Value*> inputs;
    for (const Value* input : node->inputs) inputs.push_back(body_operand(input));
    std::vector<std::pair<std::string, TensorType>> results;
    for (const Value* result : node->results) results.push_back({result->name, result->type});
    Node* copy = body.add_node(node->op, node->name, std::move(inputs), node->attrs, results,
                               node->loc);
    for (size_t i = 0; i < node->results.size(); ++i) {
      const Value* outer = node->results[i];
      if (auto it = inner_result_of.find(outer); it != inner_result_of.end()) outer = it->second;
      body_value[outer] = copy->results[i];
      copy->results[i]->loc = node->results[i]->loc;
    }
  }
  for (Node* member : members)
    for (Value* result : member->results)
      if (escapes.count(result)) {
        built.escaping.push_back(result);
        Value* inner = body_value.at(result);
        body.outputs.push_back(inner);
        body.output_names.push_back(inner->name);
      }
  KILN_CHECK(!built.escaping.empty()) << "make_kernel: the results of " << group.name << " are all unused";
  return built;
}

}  // namespace

Node* make_kernel(Graph& graph, const std::vector<Node*>& members, const std::string& name,
                  std::string_view kind) {
  return make_kernels(graph, {KernelGroup{members, name, kind}}).at(0);
}

std::vector<Node*> make_kernels(Graph& graph, const std::vector<KernelGroup>& groups) {
  std::unordered_map<const Node*, size_t> group_of;
  for (size_t g = 0; g < groups.size(); ++g) {
    KILN_CHECK(!groups[g].members.empty()) << "make_kernel: no members";
    KILN_CHECK(is_kernel_kind(groups[g].kind)) << "make_kernel: unknown kind " << groups[g].kind;
    for (const Node* member : groups[g].members)
      KILN_CHECK(group_of.emplace(member, g).second) << "make_kernels: " << member->describe() << " is in two groups";
  }
  auto group_index = [&](const Node* node) -> std::optional<size_t> {
    if (auto it = group_of.find(node); it != group_of.end()) return it->second;
    return std::nullopt;
  };

  // Member results read outside their group or returned by the graph, and each group's last
  // member in graph order (where its kernel goes: every operand is defined before some member,
  // so before it, and the results that leave the group are read after it). One sweep.
  std::unordered_set<const Value*> escapes(graph.outputs.begin(), graph.outputs.end());
  std::vector<const Node*> last(groups.size(), nullptr);
  for (const auto& node : graph.nodes()) {
    const std::optional<size_t> reader = group_index(node.get());
    if (reader) last[*reader] = node.get();
    for (const Value* input : node->inputs)
      if (input->producer && group_index(input->producer) != reader) escapes.insert(input);
  }

  // Bodies first, then the renaming: a body reads its operands' names as they were.
  for (size_t g = 0; g < groups.size(); ++g)
    KILN_CHECK(last[g] != nullptr) << "make_kernel: the members of " << groups[g].name << " are not in the graph";
  std::vector<BuiltKernel> built;
  for (const KernelGroup& group : groups) built.push_back(build_kernel(group, escapes));
  std::vector<std::vector<std::pair<std::string, TensorType>>> result_types(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    for (const Value* result : built[g].escaping) result_types[g].push_back({result->name, result->type});
  // The kernels' results take over the names of the values they replace.
  for (const KernelGroup& group : groups)
    for (Node* member : group.members)
      for (Value* result : member->results) result->name += ".fused";

  std::vector<Node*> kernels;
  std::unordered_map<const Value*, Value*> replacement;
  for (size_t g = 0; g < groups.size(); ++g) {
    Node* kernel = graph.add_node(OpId::Kernel, groups[g].name, built[g].operands,
                                  AttrMap{{"kind", std::string(groups[g].kind)}}, result_types[g],
                                  last[g]->loc);
    kernel->body = std::move(built[g].body);
    for (size_t i = 0; i < built[g].escaping.size(); ++i) {
      kernel->results[i]->loc = built[g].escaping[i]->loc;
      replacement[built[g].escaping[i]] = kernel->results[i];
    }
    kernels.push_back(kernel);
  }
  const std::unordered_set<const Node*> is_new_kernel(kernels.begin(), kernels.end());

  // Every operand and graph output that read an escaping result reads the kernel's instead.
  for (const auto& node : graph.nodes())
    for (Value*& input : node->inputs)
      if (auto it = replacement.find(input); it != replacement.end()) input = it->second;
  for (Value*& output : graph.outputs)
    if (auto it = replacement.find(output); it != replacement.end()) output = it->second;

  // Kernels in their last members' places, members gone.
  std::vector<const Node*> order;
  for (const auto& node : graph.nodes()) {
    if (is_new_kernel.count(node.get())) continue;
    const std::optional<size_t> g = group_index(node.get());
    if (!g) order.push_back(node.get());
    else if (last[*g] == node.get()) order.push_back(kernels[*g]);
  }
  graph.erase_nodes([&](const Node& node) { return group_of.count(&node) > 0; });
  graph.reorder(order);
  // A kernel may read a result of a kernel placed after it (a group whose last member comes
  // late); re-sorting moves it, keeping every valid stretch of the order as it is.
  graph.sort_topologically();
  return kernels;
}

}  // namespace kiln::ir
