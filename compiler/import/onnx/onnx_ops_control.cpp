// ONNX control flow → kiln ops, by importing the subgraphs inline (kiln's IR has no regions):
// If with a condition known at import takes its branch; with a run-time condition both branches
// are computed and `where` picks (they must agree on types). Scan is unrolled over the sequence,
// its body imported once per step with the states and the step's slices bound.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

// As the recurrent layers: an unrolled body past this many ONNX nodes is refused.
constexpr int64_t kMaxUnrolledNodes = 32768;

const onnx::GraphProto& graph_attr(NodeContext& node, const char* name) {
  const onnx::GraphProto* graph = node.attr_graph(name);
  if (!graph) node.fail(std::string("attribute '") + name + "' (a graph) is required");
  return *graph;
}

Outputs subgraph(NodeContext& node, const onnx::GraphProto& body,
                 const std::vector<std::pair<std::string, Operand>>& bound, const std::string& scope) {
  std::optional<Outputs> outputs = node.builder().subgraphs->import_subgraph(body, bound, node.location() + " " + scope);
  if (!outputs) node.fail(scope + " could not be imported (its errors are above)");
  return std::move(*outputs);
}

Outputs if_op(NodeContext& node) {
  node.check_attrs({"then_branch", "else_branch"});
  const Operand& condition = node.input(0);
  if (condition.type().dtype != ir::DType::Bool || ir::num_elements(condition.type().shape) != 1)
    node.fail("cond must be one bool, got " + condition.type().to_string());
  const onnx::GraphProto& then_branch = graph_attr(node, "then_branch");
  const onnx::GraphProto& else_branch = graph_attr(node, "else_branch");
  for (const auto* branch : {&then_branch, &else_branch})
    if (branch->input_size() != 0) node.fail("a branch takes no inputs, got " + std::to_string(branch->input_size()));
  // A condition known now: only its branch is imported (it may not even type-check otherwise).
  if (condition.is_constant()) {
    const bool taken = condition.constant->get(0) != 0;
    return subgraph(node, taken ? then_branch : else_branch, {}, taken ? "then_branch" : "else_branch");
  }
  const Outputs then_outputs = subgraph(node, then_branch, {}, "then_branch");
  const Outputs else_outputs = subgraph(node, else_branch, {}, "else_branch");
  if (then_outputs.size() != else_outputs.size())
    node.fail("then_branch has " + std::to_string(then_outputs.size()) + " outputs, else_branch " +
              std::to_string(else_outputs.size()));
  const Operand flag = node.reshape(condition, {});
  Outputs outputs;
  for (size_t k = 0; k < then_outputs.size(); ++k) {
    const Operand& a = then_outputs[k];
    const Operand& b = else_outputs[k];
    if (a.empty || b.empty || a.type() != b.type())
      node.fail("output " + std::to_string(k) + ": then_branch gives " + (a.empty ? "an empty tensor" : a.type().to_string()) +
                ", else_branch " + (b.empty ? "an empty tensor" : b.type().to_string()) +
                "; with a condition known only at run time both branches must give one type");
    outputs.push_back(node.emit(OpId::Where, {flag, a, b}));
  }
  return outputs;
}

// x without `axis`, at position `at` along it.
Operand take(NodeContext& node, const Operand& x, int axis, int64_t at) {
  ir::Shape rest = x.type().shape;
  rest.erase(rest.begin() + axis);
  return node.reshape(
      node.emit(OpId::Slice, {x}, {{"starts", Ints{at}}, {"ends", Ints{at + 1}}, {"axes", Ints{axis}}, {"steps", Ints{1}}}), rest);
}

// The parts stacked along a new `axis`.
Operand stack(NodeContext& node, const std::vector<Operand>& parts, int axis) {
  std::vector<Operand> unsqueezed;
  for (const Operand& part : parts) {
    ir::Shape shape = part.type().shape;
    shape.insert(shape.begin() + axis, 1);
    unsqueezed.push_back(node.reshape(part, shape));
  }
  if (unsqueezed.size() == 1) return unsqueezed[0];
  return node.emit(OpId::Concat, unsqueezed, {{"axis", int64_t{axis}}});
}

struct ScanAxes {
  Ints input_axes, input_reverse, output_axes, output_reverse;
};

// The scan loop, unrolled: `states` in, the final states and the stacked scan outputs out.
Outputs unroll_scan(NodeContext& node, const onnx::GraphProto& body, Outputs states, const Outputs& scans,
                    const ScanAxes& axes, const std::string& scope) {
  const size_t n = states.size(), m = scans.size();
  if (static_cast<size_t>(body.input_size()) != n + m)
    node.fail("body takes " + std::to_string(body.input_size()) + " inputs; the node gives " + std::to_string(n) +
              " states and " + std::to_string(m) + " scan inputs");
  if (static_cast<size_t>(body.output_size()) < n)
    node.fail("body gives " + std::to_string(body.output_size()) + " outputs, fewer than the " + std::to_string(n) + " states");
  const size_t k = static_cast<size_t>(body.output_size()) - n;
  int64_t length = -1;
  std::vector<int> input_axes;
  for (size_t j = 0; j < m; ++j) {
    const int rank = scans[j].type().rank();
    const int axis = normalize_axis_or_fail(node, j < axes.input_axes.size() ? axes.input_axes[j] : 0, rank, "scan_input_axes");
    input_axes.push_back(axis);
    const int64_t steps = scans[j].type().shape[static_cast<size_t>(axis)];
    if (length >= 0 && steps != length)
      node.fail("scan inputs have " + std::to_string(length) + " and " + std::to_string(steps) + " steps");
    length = steps;
  }
  if (length < 0) node.fail("Scan needs at least one scan input");
  // An empty body still costs its slices and stacking per step: count it as one node.
  if (length > kMaxUnrolledNodes / std::max(body.node_size(), 1))
    node.fail(std::to_string(length) + " steps of a " + std::to_string(body.node_size()) + "-node body would unroll to over " +
              std::to_string(kMaxUnrolledNodes) + " nodes; kiln unrolls Scan at import");
  std::vector<Outputs> elements(k);
  for (int64_t t = 0; t < length; ++t) {
    std::vector<std::pair<std::string, Operand>> bound;
    for (size_t i = 0; i < n; ++i) bound.emplace_back(body.input(static_cast<int>(i)).name(), states[i]);
    for (size_t j = 0; j < m; ++j) {
      const bool reverse = j < axes.input_reverse.size() && axes.input_reverse[j] != 0;
      bound.emplace_back(body.input(static_cast<int>(n + j)).name(), take(node, scans[j], input_axes[j], reverse ? length - 1 - t : t));
    }
    const Outputs step = subgraph(node, body, bound, scope + " (step " + std::to_string(t) + ")");
    for (size_t i = 0; i < n; ++i) states[i] = step[i];
    for (size_t e = 0; e < k; ++e) {
      if (step[n + e].empty) node.fail("scan output " + std::to_string(e) + " is an empty tensor");
      elements[e].push_back(step[n + e]);
    }
  }
  Outputs outputs = states;
  for (size_t e = 0; e < k; ++e) {
    if (e < axes.output_reverse.size() && axes.output_reverse[e] != 0) std::reverse(elements[e].begin(), elements[e].end());
    const int rank = elements[e][0].type().rank() + 1;
    const int axis = normalize_axis_or_fail(node, e < axes.output_axes.size() ? axes.output_axes[e] : 0, rank, "scan_output_axes");
    outputs.push_back(stack(node, elements[e], axis));
  }
  return outputs;
}

// Scan (opset 9+): states first, then num_scan_inputs scan inputs, each scanned along its axis.
Outputs scan(NodeContext& node) {
  node.check_attrs({"body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes",
                    "scan_output_directions"});
  const int64_t m = node.attr_int("num_scan_inputs", -1);
  if (m < 1 || m > node.num_inputs()) node.fail("num_scan_inputs must lie in [1, inputs], got " + std::to_string(m));
  Outputs states, scans;
  for (int i = 0; i < node.num_inputs(); ++i) (i < node.num_inputs() - m ? states : scans).push_back(node.input(i));
  ScanAxes axes{node.attr_ints("scan_input_axes"), node.attr_ints("scan_input_directions"),
                node.attr_ints("scan_output_axes"), node.attr_ints("scan_output_directions")};
  return unroll_scan(node, graph_attr(node, "body"), states, scans, axes, "body");
}

// Scan-8: every input has a batch dim first; the body runs per batch element, scanning axis 1.
// sequence_lens (input 0) must be absent or the full length for every element.
Outputs scan8(NodeContext& node) {
  node.check_attrs({"body", "num_scan_inputs", "directions"});
  const int64_t m = node.attr_int("num_scan_inputs", -1);
  if (m < 1 || m > node.num_inputs() - 1) node.fail("num_scan_inputs must lie in [1, inputs - 1], got " + std::to_string(m));
  const int n = node.num_inputs() - 1 - static_cast<int>(m);
  const int64_t batch = node.input(1).type().shape.empty() ? 0 : node.input(1).type().shape[0];
  for (int i = 1; i < node.num_inputs(); ++i)
    if (node.input(i).type().rank() < 1 || node.input(i).type().shape[0] != batch)
      node.fail("every state and scan input needs the batch dim first, of " + std::to_string(batch));
  const int64_t length = node.input(1 + n).type().rank() >= 2 ? node.input(1 + n).type().shape[1] : 0;
  // Every batch element unrolls the whole sequence: the cap covers them together.
  const int64_t per_element = std::max<int64_t>(length, 1) * std::max(graph_attr(node, "body").node_size(), 1);
  if (per_element > kMaxUnrolledNodes || batch > kMaxUnrolledNodes / per_element)
    node.fail("a batch of " + std::to_string(batch) + " sequences of " + std::to_string(length) +
              " steps would unroll to over " + std::to_string(kMaxUnrolledNodes) + " nodes; kiln unrolls Scan at import");
  if (node.has_input(0))
    for (int64_t l : node.const_ints(0, "sequence_lens"))
      if (l != length) node.fail("sequence_lens must all be the full length " + std::to_string(length) + " (kiln unrolls a fixed count)");
  ScanAxes axes{Ints(static_cast<size_t>(m), 0), node.attr_ints("directions"), {}, {}};
  std::vector<Outputs> per_batch;
  for (int64_t b = 0; b < batch; ++b) {
    Outputs states, scans;
    for (int i = 1; i < node.num_inputs(); ++i) (i <= n ? states : scans).push_back(take(node, node.input(i), 0, b));
    per_batch.push_back(unroll_scan(node, graph_attr(node, "body"), states, scans, axes,
                                    "body (batch element " + std::to_string(b) + ")"));
  }
  Outputs outputs;
  for (size_t o = 0; o < per_batch[0].size(); ++o) {
    std::vector<Operand> parts;
    for (const Outputs& element : per_batch) parts.push_back(element[o]);
    outputs.push_back(stack(node, parts, 0));
  }
  return outputs;
}

constexpr OpRule kRules[] = {
    {"If", 1, kMaxOpset, if_op},
    {"Scan", 8, 8, scan8},
    {"Scan", 9, kMaxOpset, scan},
};

}  // namespace

std::span<const OpRule> control_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
