// layout-nhwc: convolutions store their tensors NHWC, and so do the elementwise ops, biases and
// pools between them, so that cuDNN's tensor-core algorithms read them as they are.
//
// cuDNN's tensor cores (TF32, bf16, f16) read NHWC; given NCHW, cuDNN transforms each operand
// to NHWC and back around every call, up to twice the traffic of the tensors for each
// convolution (kiln inspect's layout_transform_seconds bounds it). The inference pipelines
// run this pass when cuDNN computes the convolutions with --precision=tf32, bf16 or f16
// (passes::with_nhwc_convolutions); it is a no-op on what the host and the generated kernels
// compute, which read either layout (the fallback when cuDNN declines a call reads NHWC too).
//
// Every conv2d becomes conv2d{layout=nhwc} of transpose(x) by transpose(weight) (KRSC, folded
// by constant-fold for a weight with data), then a transpose back to NCHW, its result keeping
// the old name. In topological order, the transposes back then sink through what can run on
// NHWC values: elementwise ops whose other operands are one element or of the result's shape
// (transposed to NHWC in turn: the region grows rather than ends), a
// bias_add on the channels (axis 3), max_pool2d and avg_pool2d (layout=nhwc). A conv2d reading
// a value that is such a transpose reads its source instead. So the transposes left are at the
// edges of each NHWC region: after the graph inputs and before the first op that needs NCHW
// (global_avg_pool, a reshape, a batch_norm...), each said with its reason under
// --debug-only=layout-nhwc; dce removes the transposes that nothing reads any more. The graph
// computes what it computed, element for element: only where values are stored changes.
//
// Where it pays: the pass first plans the regions, then rewrites only when the transposes at
// their edges (a launch each, and their bytes) take less time than cuDNN's transforms of the
// convolutions' NCHW activations could (input and result, there and back: the bound kiln
// inspect models, less the filters, which constant-fold transposes once). A lone convolution
// between NCHW ops stays NCHW, and so does a small CNN at batch 1 (the seed CNN: 0.3 us of
// transforms against two launches); ResNet-50 runs its 53 convolutions NHWC between one
// transpose in and one out. The decision is the graph's, not each region's; the option
// always=true rewrites regardless (tests, experiments).
#include <fmt/format.h>

#include <functional>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/image_layout.h"
#include "ir/op_registry.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "layout-nhwc";

// The model that decides (an H100 SXM, as split-k's): each transpose at an edge is one more
// launch, a few microseconds in a CUDA graph, plus its bytes at the DRAM rate; what it saves is
// cuDNN's transforms' bytes at the DRAM rate.
constexpr double kLaunchSeconds = 5e-6;
constexpr double kDramBytesPerSecond = 3.35e12;

bool is_perm(const ir::Node& node, const std::vector<int64_t>& perm) {
  if (node.is_kernel() || node.op != ir::OpId::Transpose) return false;
  return std::get<std::vector<int64_t>>(node.attrs.at("perm")) == perm;
}

// The NHWC value `value` is the NCHW transpose of, or nullptr.
ir::Value* nhwc_source(const ir::Value* value) {
  const ir::Node* producer = value->producer;
  if (producer == nullptr || !is_perm(*producer, ir::nhwc_to_nchw_perm())) return nullptr;
  return producer->inputs[0];
}

bool one_element(const ir::Value* value) { return ir::num_elements(value->type.shape) == 1; }

// Whether `node` reads `input` as an image of its result's shape, which then runs NHWC with it
// (transposed in when it is NCHW); a bias_add's bias never is.
bool image_operand(const ir::Node& node, const ir::Value* input) {
  return node.op != ir::OpId::BiasAdd && input->type.shape == node.results[0]->type.shape;
}

// Why `node` cannot run on the NHWC sources of its 4-D operands as it is (an elementwise op)
// or with its layout changed (bias_add, pools), nullopt when it can. `node` reads at least one
// such transpose.
std::optional<std::string> refusal(const ir::Node& node, const std::function<bool(const ir::Value*)>& in_nhwc) {
  if (node.is_kernel()) return "it is a fused kernel";
  if (node.results[0]->type.rank() != 4) return fmt::format("its result {} is not 4-D", node.results[0]->type.to_string());
  switch (node.op) {
    case ir::OpId::BiasAdd:
      if (std::get<int64_t>(node.attrs.at("axis")) != 1 || !in_nhwc(node.inputs[0]))
        return "it adds its bias along an axis other than the channels";
      return std::nullopt;
    case ir::OpId::MaxPool2d:
    case ir::OpId::AvgPool2d:
      return std::nullopt;
    case ir::OpId::Dropout:
      return "dropout draws each element's mask by its position, which NHWC would change";
    case ir::OpId::BatchNorm:
    case ir::OpId::BroadcastTo:
    case ir::OpId::MaximumShare:
    case ir::OpId::MinimumShare:
      return fmt::format("{} is not elementwise on its operands", ir::to_string(node.op));
    default:
      break;
  }
  if (node.def == nullptr || (node.def->kind != ir::OpKind::Elementwise && node.def->kind != ir::OpKind::Broadcast))
    return fmt::format("{} reads NCHW (it is not elementwise)", ir::to_string(node.op));
  // The other operands: one element, or NCHW values of the result's shape, transposed to NHWC.
  for (const ir::Value* input : node.inputs)
    if (!one_element(input) && !in_nhwc(input) && !image_operand(node, input))
      return fmt::format("its operand %{} {} broadcasts against NHWC values", input->name, input->type.to_string());
  return std::nullopt;
}

// Whether `node` is a conv2d the pass may rewrite (a split-K one is not, and says so).
bool convertible_conv(const ir::Node& node, PassContext& context) {
  if (node.is_kernel() || node.op != ir::OpId::Conv2d || ir::image_layout(node) == ir::ImageLayout::Nhwc)
    return false;
  if (std::get<int64_t>(node.attrs.at("k_chunk")) > 0) {
    context.debug(kPass, fmt::format("{} stays NCHW: it is split-K partial sums", node.describe()));
    return false;
  }
  return true;
}

int64_t bytes(const ir::Value* value) {
  return ir::num_elements(value->type.shape) * static_cast<int64_t>(ir::dtype_size(value->type.dtype));
}

// What would run NHWC, and what that costs and saves, in bytes moved.
struct Plan {
  std::unordered_set<const ir::Node*> nodes;
  int64_t convolutions = 0;
  // The transposes at the regions' edges read and write each value they transpose once.
  int64_t edges = 0;
  int64_t edge_bytes = 0;
  // What cuDNN's transforms of NCHW operands could move: each convolution's input and result
  // twice (codegen/cost_model.cpp's bound, less the filters).
  int64_t transform_bytes = 0;
};

Plan plan_layout(const ir::Graph& graph, PassContext& context) {
  Plan plan;
  std::unordered_set<const ir::Value*> nhwc, edges;
  const auto in_nhwc = [&](const ir::Value* value) { return nhwc.count(value) > 0 || nhwc_source(value) != nullptr; };
  const auto edge = [&](const ir::Value* value) {
    if (!edges.insert(value).second) return;
    ++plan.edges;
    plan.edge_bytes += 2 * bytes(value);
  };
  for (const auto& owned : graph.nodes()) {
    const ir::Node& node = *owned;
    if (convertible_conv(node, context)) {
      if (!in_nhwc(node.inputs[0])) edge(node.inputs[0]);
      plan.transform_bytes += 2 * (bytes(node.inputs[0]) + bytes(node.results[0]));
      // A parameter is transposed to KRSC once, by constant-fold; a weight computed or given at
      // run time at each run, as cuDNN would (its filter transform is not counted otherwise:
      // the saving must come from the activations).
      const ir::Value* weight = node.inputs[1];
      if (weight->role != ir::ValueRole::Parameter) {
        edge(weight);
        plan.transform_bytes += 2 * bytes(weight);
      }
      ++plan.convolutions;
      plan.nodes.insert(&node);
      nhwc.insert(node.results[0]);
      continue;
    }
    bool reads_nhwc = false;
    for (const ir::Value* input : node.inputs) reads_nhwc |= nhwc.count(input) > 0;
    if (!reads_nhwc || (!node.is_kernel() && node.op == ir::OpId::Conv2d)) continue;
    const auto why = node.results.size() == 1 ? refusal(node, in_nhwc) : std::optional<std::string>("it has several results");
    if (why) {
      context.debug(kPass, fmt::format("back to NCHW before {}: {}", node.describe(), *why));
      continue;
    }
    for (const ir::Value* input : node.inputs)
      if (!in_nhwc(input) && image_operand(node, input)) edge(input);
    plan.nodes.insert(&node);
    nhwc.insert(node.results[0]);
  }
  // The values read in NCHW after all: by the other nodes, or as graph outputs.
  for (const auto& owned : graph.nodes())
    if (!plan.nodes.count(owned.get()))
      for (const ir::Value* input : owned->inputs)
        if (nhwc.count(input)) edge(input);
  for (const ir::Value* output : graph.outputs)
    if (nhwc.count(output)) edge(output);
  return plan;
}

}  // namespace

bool LayoutNhwc::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"always"});
  const std::string always = context.option("always", "false");
  if (always != "true" && always != "false")
    throw Error("--passes", fmt::format("pass '{}': option always={}: expected true or false", kPass, always));
  NameTable names(graph);
  Replacements replacements;
  std::unordered_set<const ir::Node*> dead;
  // Gives `node`'s result (an NCHW value) to a transpose of `nhwc`, which keeps its name.
  const auto transpose_back = [&](ir::Node& node, ir::Value* nhwc, NodeInserter& inserter) {
    ir::Value* old = node.results[0];
    const std::string name = old->name;
    old->name = names.take(name + ".nchw");
    names.release(name);
    replacements[old] = inserter.add(ir::OpId::Transpose, {nhwc}, {{"perm", ir::nhwc_to_nchw_perm()}}, name);
    dead.insert(&node);
  };
  const auto to_nhwc = [&](ir::Value* value, NodeInserter& inserter, const std::string& suffix) {
    if (ir::Value* source = nhwc_source(value)) return source;
    return inserter.add(ir::OpId::Transpose, {value}, {{"perm", ir::nchw_to_nhwc_perm()}}, value->name + suffix);
  };

  const Plan plan = plan_layout(graph, context);
  if (plan.convolutions == 0) return false;
  const double edge_seconds =
      static_cast<double>(plan.edges) * kLaunchSeconds + static_cast<double>(plan.edge_bytes) / kDramBytesPerSecond;
  const double saved_seconds = static_cast<double>(plan.transform_bytes) / kDramBytesPerSecond;
  const std::string summary = fmt::format(
      "{} convolutions and {} other ops: {} transposes at the edges move {} bytes ({:.1f} us with their launches), "
      "cuDNN's transforms of NCHW activations up to {} ({:.1f} us)",
      plan.convolutions, plan.nodes.size() - static_cast<size_t>(plan.convolutions), plan.edges, plan.edge_bytes,
      edge_seconds * 1e6, plan.transform_bytes, saved_seconds * 1e6);
  if (always == "true") {
    context.debug(kPass, "NHWC (always=true): " + summary);
  } else if (edge_seconds >= saved_seconds) {
    context.debug(kPass, "everything stays NCHW, NHWC would not pay: " + summary);
    return false;
  } else {
    context.debug(kPass, "NHWC pays: " + summary);
  }

  bool changed = false;
  std::vector<ir::Node*> order;
  for (const auto& node : graph.nodes()) order.push_back(node.get());
  for (ir::Node* node : order) {
    rewrite_operands(*node, replacements);
    if (!plan.nodes.count(node)) continue;
    if (node->op == ir::OpId::Conv2d) {
      if (!context.take_fuel(kPass, fmt::format("{} runs NHWC", node->describe()))) break;
      NodeInserter inserter(graph, names, *node);
      std::vector<ir::Value*> inputs = {to_nhwc(node->inputs[0], inserter, ".nhwc"),
                                        to_nhwc(node->inputs[1], inserter, ".krsc")};
      if (node->inputs.size() > 2) inputs.push_back(node->inputs[2]);
      ir::AttrMap attrs = node->attrs;
      attrs[std::string(ir::kLayoutAttribute)] = std::string("nhwc");
      ir::Value* conv = inserter.add(ir::OpId::Conv2d, inputs, attrs, node->results[0]->name + ".nhwc");
      transpose_back(*node, conv, inserter);
      changed = true;
      continue;
    }
    if (!context.take_fuel(kPass, fmt::format("{} runs on NHWC values", node->describe()))) break;
    NodeInserter inserter(graph, names, *node);
    std::vector<ir::Value*> inputs;
    for (ir::Value* input : node->inputs) {
      // NHWC sources, and NCHW images transposed; a bias or a one-element operand as it is.
      const bool image = nhwc_source(input) != nullptr || image_operand(*node, input);
      inputs.push_back(image ? to_nhwc(input, inserter, ".nhwc") : input);
    }
    ir::AttrMap attrs = node->attrs;
    if (node->op == ir::OpId::BiasAdd) attrs["axis"] = int64_t{ir::channel_axis(ir::ImageLayout::Nhwc)};
    if (node->op == ir::OpId::MaxPool2d || node->op == ir::OpId::AvgPool2d)
      attrs[std::string(ir::kLayoutAttribute)] = std::string("nhwc");
    ir::Value* nhwc = inserter.add(node->op, inputs, attrs, node->results[0]->name + ".nhwc");
    transpose_back(*node, nhwc, inserter);
    changed = true;
  }
  replace_and_erase(graph, replacements, dead);
  return changed;
}

}  // namespace kiln::passes
