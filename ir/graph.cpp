#include "ir/graph.h"

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
  return name.empty() ? op : op + " '" + name + "'";
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

Node* Graph::add_node(std::string op, std::string name, std::vector<Value*> inputs,
                      AttrMap attrs,
                      const std::vector<std::pair<std::string, TensorType>>& results,
                      SourceLoc loc) {
  auto node = std::make_unique<Node>();
  node->op = std::move(op);
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

Value* Graph::find_value(std::string_view name) const {
  for (const auto& value : values_)
    if (value->name == name) return value.get();
  return nullptr;
}

}  // namespace kiln::ir
