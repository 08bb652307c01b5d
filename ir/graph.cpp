#include "ir/graph.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::ir {

std::string SourceLoc::render(std::string_view sub) const {
  if (file.empty() && pointer.empty() && line == 0) return {};
  if (line > 0) return file + ":" + std::to_string(line) + ":" + std::to_string(column);
  std::string where = pointer + std::string(sub);
  if (file.empty()) return where;
  if (where.empty()) return file;
  return file + ": " + where;
}

std::string Node::describe() const {
  const std::string op_text(op_name());
  return name.empty() ? op_text : op_text + " '" + name + "'";
}

Value* Graph::new_value(std::string name, TensorType type, ValueRole role, SourceLoc loc) {
  auto value = std::make_unique<Value>();
  value->name = std::move(name);
  value->type = std::move(type);
  value->role = role;
  value->loc = std::move(loc);
  values_.push_back(std::move(value));
  return values_.back().get();
}

Value* Graph::add_input(std::string name, TensorType type, SourceLoc loc) {
  Value* value = new_value(std::move(name), std::move(type), ValueRole::Input, std::move(loc));
  inputs.push_back(value);
  return value;
}

Value* Graph::add_parameter(std::string name, TensorType type, ParamSource source,
                            SourceLoc loc) {
  Value* value =
      new_value(std::move(name), std::move(type), ValueRole::Parameter, std::move(loc));
  value->source = std::move(source);
  parameters.push_back(value);
  return value;
}

Node* Graph::add_node(OpId op, std::string name, std::vector<Value*> inputs,
                      AttrMap attrs,
                      const std::vector<std::pair<std::string, TensorType>>& results,
                      SourceLoc loc) {
  auto node = std::make_unique<Node>();
  node->def = &OpRegistry::instance().get(op);
  node->op = op;
  node->name = std::move(name);
  node->inputs = std::move(inputs);
  node->attrs = std::move(attrs);
  node->loc = loc;
  for (size_t i = 0; i < results.size(); ++i) {
    Value* value = new_value(results[i].first, results[i].second, ValueRole::NodeResult, loc);
    value->producer = node.get();
    value->result_index = static_cast<int>(i);
    node->results.push_back(value);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().get();
}

Node* Graph::insert_node_before(const Node* before, OpId op, std::string name,
                                std::vector<Value*> inputs, AttrMap attrs,
                                const std::vector<std::pair<std::string, TensorType>>& results,
                                SourceLoc loc) {
  auto position = std::find_if(nodes_.begin(), nodes_.end(),
                               [&](const auto& node) { return node.get() == before; });
  KILN_CHECK(position != nodes_.end()) << "insert_node_before: node not in the graph";
  const size_t index = static_cast<size_t>(position - nodes_.begin());
  add_node(op, std::move(name), std::move(inputs), std::move(attrs), results,
           std::move(loc));
  std::rotate(nodes_.begin() + static_cast<std::ptrdiff_t>(index), nodes_.end() - 1, nodes_.end());
  return nodes_[index].get();
}

std::vector<Node*> Graph::users(const Value* value) const {
  std::vector<Node*> found;
  for (const auto& node : nodes_)
    if (std::find(node->inputs.begin(), node->inputs.end(), value) != node->inputs.end())
      found.push_back(node.get());
  return found;
}

const std::string& Graph::output_name(size_t index) const {
  if (index < output_names.size() && !output_names[index].empty()) return output_names[index];
  return outputs.at(index)->name;
}

bool Graph::is_output(const Value* value) const {
  return std::find(outputs.begin(), outputs.end(), value) != outputs.end();
}

void Graph::replace_all_uses(const Value* from, Value* to) {
  for (const auto& node : nodes_)
    std::replace(node->inputs.begin(), node->inputs.end(), const_cast<Value*>(from), to);
  std::replace(outputs.begin(), outputs.end(), const_cast<Value*>(from), to);
}

size_t Graph::erase_nodes(const std::function<bool(const Node&)>& dead) {
  std::unordered_set<const Value*> removed_values;
  for (const auto& node : nodes_)
    if (dead(*node))
      for (const Value* result : node->results) removed_values.insert(result);
  for (const auto& node : nodes_) {
    if (dead(*node)) continue;
    for (const Value* input : node->inputs)
      KILN_CHECK(!removed_values.count(input))
          << "erase_nodes: " << node->describe() << " still reads '" << input->name << "'";
  }
  for (const Value* output : outputs)
    KILN_CHECK(!removed_values.count(output)) << "erase_nodes: '" << output->name << "' is an output";
  const size_t before = nodes_.size();
  std::erase_if(nodes_, [&](const auto& node) { return dead(*node); });
  std::erase_if(values_, [&](const auto& value) { return removed_values.count(value.get()) > 0; });
  return before - nodes_.size();
}

size_t Graph::erase_parameters(const std::function<bool(const Value&)>& dead) {
  std::unordered_set<const Value*> removed;
  for (Value* param : parameters)
    if (dead(*param)) {
      KILN_CHECK(users(param).empty() && !is_output(param))
          << "erase_parameters: '" << param->name << "' is still used";
      removed.insert(param);
    }
  std::erase_if(parameters, [&](Value* param) { return removed.count(param) > 0; });
  std::erase_if(values_, [&](const auto& value) { return removed.count(value.get()) > 0; });
  return removed.size();
}

void Graph::sort_topologically() {
  // Kahn's algorithm, always taking the earliest ready node, so a valid order is kept as is.
  std::unordered_map<const Node*, size_t> position;
  for (size_t i = 0; i < nodes_.size(); ++i) position[nodes_[i].get()] = i;
  std::vector<size_t> waiting(nodes_.size(), 0);
  std::vector<std::vector<size_t>> readers(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    std::unordered_set<const Node*> producers;
    for (const Value* input : nodes_[i]->inputs)
      if (input->producer) producers.insert(input->producer);
    for (const Node* producer : producers) {
      readers[position.at(producer)].push_back(i);
      ++waiting[i];
    }
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (waiting[i] == 0) ready.insert(i);
  std::vector<std::unique_ptr<Node>> sorted;
  while (!ready.empty()) {
    const size_t next = *ready.begin();
    ready.erase(ready.begin());
    sorted.push_back(std::move(nodes_[next]));
    for (size_t reader : readers[next])
      if (--waiting[reader] == 0) ready.insert(reader);
  }
  KILN_CHECK(sorted.size() == nodes_.size()) << "sort_topologically: the nodes form a cycle";
  nodes_ = std::move(sorted);
}

void Graph::reorder(const std::vector<const Node*>& order) {
  KILN_CHECK(order.size() == nodes_.size()) << "reorder: " << order.size() << " nodes for a graph of " << nodes_.size();
  std::unordered_map<const Node*, std::unique_ptr<Node>> owned;
  for (auto& node : nodes_) owned.emplace(node.get(), std::move(node));
  for (size_t i = 0; i < order.size(); ++i) {
    auto it = owned.find(order[i]);
    KILN_CHECK(it != owned.end() && it->second) << "reorder: a node is missing or listed twice";
    nodes_[i] = std::move(it->second);
  }
}

std::string Graph::unique_name(const std::string& base) const {
  if (!find_value(base)) return base;
  for (int i = 1;; ++i) {
    std::string candidate = base + "." + std::to_string(i);
    if (!find_value(candidate)) return candidate;
  }
}

Value* Graph::find_value(std::string_view name) const {
  for (const auto& value : values_)
    if (value->name == name) return value.get();
  return nullptr;
}

}  // namespace kiln::ir
