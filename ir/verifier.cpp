#include "ir/verifier.h"

#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"

namespace kiln::ir {

namespace {

class Verifier {
 public:
  explicit Verifier(const Graph& graph) : graph_(graph) {}

  void run() {
    for (Value* input : graph_.inputs) define_leaf(input, ValueRole::Input, "input");
    for (Value* param : graph_.parameters) {
      define_leaf(param, ValueRole::Parameter, "parameter");
      if (!param->source)
        throw Error(param->loc.render(), "parameter '" + param->name + "' has no data source");
    }
    for (const auto& node : graph_.nodes()) verify_node(*node);
    if (graph_.outputs.empty()) throw Error("", "graph '" + graph_.name + "' returns no value");
    for (size_t i = 0; i < graph_.outputs.size(); ++i) {
      const Value* output = graph_.outputs[i];
      if (output == nullptr || !defined_.count(output))
        throw Error("", "graph output " + std::to_string(i) + " is not a value of the graph");
    }
    verify_dynamic_dims();
  }

 private:
  void check_type(const Value& value, const std::string& what) {
    if (!checked_num_elements(value.type.shape))
      throw Error(value.loc.render(), what + " '" + value.name + "' has invalid shape " +
                                          shape_to_string(value.type.shape) +
                                          " (dims must be >= 1, at most 2^48 elements)");
  }

  // Symbols are distinct with bounds >= 1; an input's dynamic dim names one of them and has
  // its bound as extent; and padding to the bounds cannot reach a real result.
  void verify_dynamic_dims() {
    for (size_t i = 0; i < graph_.symbols.size(); ++i) {
      const DimSymbol& symbol = graph_.symbols[i];
      if (symbol.name.empty() || symbol.bound < 1)
        throw Error("", "dynamic dim " + std::to_string(i) + " '" + symbol.name +
                            "' needs a name and a bound >= 1, got " + std::to_string(symbol.bound));
      for (size_t j = 0; j < i; ++j)
        if (graph_.symbols[j].name == symbol.name)
          throw Error("", "dynamic dim '" + symbol.name + "' is declared twice");
    }
    for (const Value* input : graph_.inputs) {
      const DimMap& dims = input->dynamic_dims;
      if (dims.empty()) continue;
      const auto fail = [&](const std::string& why) {
        throw Error(input->loc.render(), "input '" + input->name + "': " + why);
      };
      if (static_cast<int>(dims.size()) != input->type.rank())
        fail("has " + std::to_string(dims.size()) + " dynamic-dim entries for rank " +
             std::to_string(input->type.rank()));
      for (size_t d = 0; d < dims.size(); ++d) {
        if (!dims[d].is_dynamic()) continue;
        if (dims[d].symbol >= static_cast<int>(graph_.symbols.size()) || dims[d].outer != 1 || dims[d].inner != 1)
          fail("dim " + std::to_string(d) + " names no declared dynamic dim");
        const DimSymbol& symbol = graph_.symbols[static_cast<size_t>(dims[d].symbol)];
        if (input->type.shape[d] != symbol.bound)
          fail("dim " + std::to_string(d) + " is the dynamic dim '" + symbol.name +
               "', so its extent must be the bound " + std::to_string(symbol.bound) + ", not " +
               std::to_string(input->type.shape[d]));
      }
    }
    infer_dynamic_dims(graph_);
  }

  void claim_name(const Value& value) {
    if (value.name.empty()) return;
    auto [it, inserted] = names_.emplace(value.name, &value);
    if (!inserted)
      throw Error(value.loc.render(), "name '" + value.name + "' is used twice (also at " +
                                          it->second->loc.render() + ")");
  }

  void define_leaf(Value* value, ValueRole role, const std::string& what) {
    KILN_CHECK(value != nullptr) << "null " << what;
    if (value->role != role || value->producer != nullptr)
      throw Error(value->loc.render(), what + " '" + value->name + "' has the wrong role");
    check_type(*value, what);
    claim_name(*value);
    defined_.insert(value);
  }

  void verify_node(const Node& node) {
    const std::string where = node.loc.render();
    const std::string who = node.describe();
    if (node.def != &OpRegistry::instance().get(node.op))
      throw Error(where, who + ": op '" + std::string(node.op_name()) + "' is not a registered op");
    std::vector<TensorType> operand_types;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Value* operand = node.inputs[i];
      if (operand == nullptr)
        throw Error(where, who + ": operand " + std::to_string(i) + " is missing");
      if (!defined_.count(operand))
        throw Error(where, who + ": operand " + std::to_string(i) + " ('" + operand->name +
                               "') is used before it is defined");
      operand_types.push_back(operand->type);
    }
    std::vector<TensorType> inferred;
    if (node.op == OpId::Kernel) {
      inferred = verify_kernel(node, operand_types);
    } else {
      if (node.body) throw Error(where, who + ": only a kernel has a body");
      AttrMap normalized = node.attrs;
      try {
        inferred = infer_op(*node.def, operand_types, normalized);
      } catch (const OpError& error) {
        throw Error(where, who + ": " + error.message);
      }
      if (normalized != node.attrs)
        throw Error(where, who + ": attributes are not normalized (defaults missing)");
    }
    if (inferred.size() != node.results.size())
      throw Error(where, who + ": has " + std::to_string(node.results.size()) +
                             " results, the op produces " + std::to_string(inferred.size()));
    for (size_t i = 0; i < inferred.size(); ++i) {
      const Value* result = node.results[i];
      KILN_CHECK(result != nullptr) << who << " has a null result";
      if (result->producer != &node || result->result_index != static_cast<int>(i) ||
          defined_.count(result))
        throw Error(where, who + ": result " + std::to_string(i) + " ('" + result->name +
                               "') has another producer");
      if (result->type != inferred[i])
        throw Error(where, who + ": result type " + result->type.to_string() +
                               " does not match the inferred " + inferred[i].to_string());
      claim_name(*result);
      defined_.insert(result);
    }
  }

  // A kernel's body is a graph of plain nodes whose inputs match the kernel's operands; its
  // outputs' types are the kernel's result types.
  std::vector<TensorType> verify_kernel(const Node& node, const std::vector<TensorType>& operands) {
    const std::string where = node.loc.render();
    const std::string who = node.describe();
    if (!node.body) throw Error(where, who + ": has no body");
    const auto kind = node.attrs.find("kind");
    if (node.attrs.size() != 1 || kind == node.attrs.end() ||
        !std::holds_alternative<std::string>(kind->second) ||
        !is_kernel_kind(std::get<std::string>(kind->second)))
      throw Error(where, who + ": a kernel takes one attribute, kind (epilogue, loop, reduce, single, multi_update or attention)");
    const Graph& body = *node.body;
    if (!body.parameters.empty()) throw Error(where, who + ": a kernel's body has no parameters");
    if (body.inputs.size() != operands.size())
      throw Error(where, who + ": the body has " + std::to_string(body.inputs.size()) +
                             " inputs for " + std::to_string(operands.size()) + " operands");
    for (size_t i = 0; i < operands.size(); ++i)
      if (body.inputs[i]->type != operands[i])
        throw Error(where, who + ": body input " + std::to_string(i) + " has type " +
                               body.inputs[i]->type.to_string() + ", the operand " +
                               operands[i].to_string());
    if (body.nodes().empty()) throw Error(where, who + ": the body has no nodes");
    for (const auto& inner : body.nodes())
      if (inner->op == OpId::Kernel)
        throw Error(inner->loc.render(), who + ": kernels do not nest");
    Verifier(body).run();
    std::vector<TensorType> types;
    for (const Value* output : body.outputs) types.push_back(output->type);
    return types;
  }

  const Graph& graph_;
  std::unordered_set<const Value*> defined_;
  std::unordered_map<std::string, const Value*> names_;
};

}  // namespace

void verify(const Graph& graph) { Verifier(graph).run(); }

}  // namespace kiln::ir
