// The parts of a fused kernel's code that codegen/kernels/fused.cpp (the loop, reduce and single
// kinds, and dispatch) and fused_epilogue.cpp (the epilogue kind) share: how the body's values
// are named, the element lambdas and chains, the inner request for a body node's own emitter.
#pragma once

#include <fmt/format.h>

#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codegen/kernel_emitter.h"
#include "codegen/kernels/emit_util.h"
#include "ir/graph.h"

namespace kiln::codegen::fused {

// A C identifier for an IR name: "conv1.bias" -> "conv1_bias", "0" -> "_0".
std::string c_identifier(const std::string& name);

// What the kernel computes: the body without its trailing reshapes, and the value it stores.
// A loop kernel may store several (fuse-elementwise gives a value read elsewhere its casts):
// `stored` goes to the first result, `also_stored` to the others, in order.
struct BodyPlan {
  std::vector<const ir::Node*> compute;
  const ir::Value* stored = nullptr;
  std::vector<const ir::Value*> also_stored;
};

// Per value of the body: how the generated code names it. Distinct IR names may make one C
// identifier ("conv1/out" and "conv1_out"), so computed values get one each, numbered on a clash.
class Names {
 public:
  Names(const ir::Node& kernel, const std::vector<std::string>& input_params) {
    for (size_t i = 0; i < kernel.inputs.size(); ++i) param_[kernel.body->inputs[i]] = input_params[i];
    std::set<std::string> taken;
    for (const auto& node : kernel.body->nodes())
      for (const ir::Value* result : node->results) {
        const std::string base = c_identifier(result->name);
        std::string id = base;
        for (int n = 2; taken.count(id); ++n) id = fmt::format("{}_{}", base, n);
        taken.insert(id);
        id_[result] = id;
      }
  }
  // The kernel parameter of a body input; empty for values computed in the body.
  std::string param(const ir::Value* value) const {
    auto it = param_.find(value);
    return it == param_.end() ? "" : it->second;
  }
  // Whether `name` is one of the kernel's input parameters.
  bool is_param(const std::string& name) const {
    for (const auto& [value, param] : param_)
      if (param == name) return true;
    return false;
  }
  std::string variable(const ir::Value* value) const { return "v_" + id_.at(value); }
  std::string function(const ir::Node& node) const { return "f_" + id_.at(node.results[0]); }

 private:
  std::unordered_map<const ir::Value*, std::string> param_;
  std::unordered_map<const ir::Value*, std::string> id_;  // computed values
};

// The request for one body node's own emitter (a single kernel's op, a reduce kernel's
// reduction). Emitters name locals after their operand pointers (`x4`, `x_v`, `x_index`), which
// is safe for the names of an unfused kernel but not for the kernel parameters here: in_x4 may
// be a parameter too, and sub(%x, %x) passes in_x twice. So each operand read from memory goes
// through an alias named as in the op's own kernel (`const float* __restrict__ a = in_x;`);
// `aliases` gets one declaration per alias, for with_aliases.
using Aliases = std::vector<std::pair<std::string, std::string>>;  // alias, declaration

KernelRequest inner_request(const ir::Node& node, const KernelRequest& request, const Names& names,
                            Aliases& aliases);

// `body` after the declarations of the aliases it uses (an unused local draws warnings).
std::string with_aliases(const Aliases& aliases, const std::string& body);

// `const auto f_relu1 = [](float value) -> float { ... };` for an elementwise body node.
void emit_element_lambda(BodyWriter& w, const ir::Node& node, const Names& names);

// Evaluates `nodes` (elementwise, in order) at flat index `flat` of `loop`: loads each kernel
// input once per view it is read with (a bias_add's bias is indexed by one axis, the same
// tensor as an operand of add by NumPy rules: two loads), then one `const T v_x = f_x(...)`
// per node. Returns the variable holding the last result.
std::string emit_element_chain(BodyWriter& w, const std::vector<const ir::Node*>& nodes,
                               const ir::Shape& loop, const Names& names,
                               const std::string& flat, const std::string& type);

// "add, relu, cast": the ops of `nodes`, for kernel notes.
std::string source_list(const std::vector<const ir::Node*>& nodes);

// The epilogue kind (fused_epilogue.cpp): the GEMM template with the body's elementwise ops
// applied to each accumulator before its store.
KernelSpec emit_epilogue(const KernelRequest& request, const BodyPlan& plan);

}  // namespace kiln::codegen::fused
